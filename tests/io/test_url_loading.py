"""Weights by URL natively: engine.load_safetensors / load_gguf / load_pth of an http URL and their
awaitable forms, against a local Range server (tests/io/conftest.py), compared with the same
files read from disk; and the faults, each one error naming the URL.

The blocking forms run twice: through urllib by Range (HttpSource, what native Python uses) and
through the Loader that Pyodide uses (engine.site.urls.LoaderSource, here over urllib instead of
the browser's fetch, waited for with asyncio.run instead of JSPI).
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import engine
from engine.errors import FetchError, NeedsAwait, SourceNotFound
from engine.formats import sources
from engine.site import urls
from engine.rows import PREPARE
from engine.runtime import wait
from tests.helpers import write_weight_formats
from tests.io.conftest import _RangeHandler
from tests.io.test_remote import MemoryCache

ASYNC = {"safetensors": engine.site.load_safetensors_async, "gguf": engine.site.load_gguf_async,
         "pth": engine.site.load_pth_async}
SYNC = {"safetensors": engine.load_safetensors, "gguf": engine.load_gguf, "pth": engine.load_pth}
FILES = {"safetensors": "model.safetensors", "gguf": "model.gguf", "pth": "model.pth"}
PAGE = b"<!DOCTYPE html>\n<html><head><title>Not here</title></head><body>Sign in</body></html>\n"


class _Handler(_RangeHandler):
    """The conftest's Range server, plus the ways a host serves a page instead of the file."""

    def do_GET(self) -> None:
        mode = self.server.mode
        if mode == "html":                   # an error or login page, with its content type, for any path
            self.server.requests.append(self.headers.get("Range"))
            return self._reply(200, PAGE, {"Content-Type": "text/html; charset=utf-8"})
        if mode == "html_bytes":             # the page's bytes by Range, with no content type to tell
            for name in FILES.values():
                (self.server.root / name).write_bytes(PAGE * 10)
        super().do_GET()

    def _reply(self, status, body, headers=None, length=None):
        try:
            super()._reply(status, body, headers, length)
        except (BrokenPipeError, ConnectionResetError):     # a client that wanted no body (a 200 to a Range)
            pass


@pytest.fixture
def server(http_server):
    http_server.RequestHandlerClass = _Handler
    return http_server


@pytest.fixture
def files(tmp_path):
    """The same tensors as safetensors, GGUF (a header of ~150 kB, past the first request) and
    torch .pth, in the server's folder; {name: array} as written."""
    rng = np.random.default_rng(0)
    arrays = {"w": rng.standard_normal((64, 300)).astype(np.float32), "b": np.arange(7, dtype=np.float32),
              "big": rng.standard_normal(300_000).astype(np.float32)}        # 1.2 MB, beyond a read window
    write_weight_formats(tmp_path, arrays)
    return arrays


def _arrays(loaded) -> dict:
    return {name: np.asarray(loaded[name].numpy()) for name in loaded}


def _local(kind, root) -> dict:
    return _arrays(SYNC[kind](str(root / FILES[kind])))


@pytest.fixture(params=["urllib", "loader"])
def blocking(request, monkeypatch):
    """The blocking forms through urllib (native Python), or through the Loader Pyodide uses."""
    if request.param == "loader":
        monkeypatch.setattr(sources, "_url_opener", None)
        sources.set_url_opener(urls.open_url)
    return request.param


@pytest.mark.parametrize("kind", FILES)
def test_blocking_forms_read_a_url_as_a_file(server, files, tmp_path, blocking, kind):
    url = server.url(FILES[kind])
    loaded = SYNC[kind](url)
    got = _arrays(loaded)
    assert set(got) == set(files)
    for name, want in _local(kind, tmp_path).items():
        assert np.array_equal(got[name], want), name
    if kind != "pth":               # the header first, then the tensors by Range as they are read
        assert all(r and r.startswith("bytes=") for r in server.requests)


def test_blocking_safetensors_reads_only_what_is_asked(server, files, blocking):
    f = engine.load_safetensors(server.url(FILES["safetensors"]))
    assert np.array_equal(f["w"].numpy(), files["w"])
    assert len(server.requests) == 2         # the header, then "w" (stored after the 1.2 MB "big")
    first, last = map(int, server.requests[1].removeprefix("bytes=").split("-"))
    assert last + 1 - first <= urls.WINDOW


@pytest.mark.parametrize("kind", FILES)
def test_awaitable_forms_read_a_url_as_a_file(server, files, tmp_path, kind):
    loaded = asyncio.run(ASYNC[kind](server.url(FILES[kind])))
    count = len(server.requests)
    got = _arrays(loaded)
    assert len(server.requests) == count     # everything arrived before the file was handed back
    for name, want in _local(kind, tmp_path).items():
        assert np.array_equal(got[name], want), name
    if kind == "gguf":                       # a header longer than the first request: read on, then tensors
        assert server.requests[0] == "bytes=0-65535" and server.requests[1].startswith("bytes=65536-")
        assert len(server.requests) <= 4


@pytest.mark.parametrize("kind", FILES)
def test_awaitable_forms_take_paths_too(files, tmp_path, kind):
    loaded = asyncio.run(ASYNC[kind](tmp_path / FILES[kind]))
    for name, want in _local(kind, tmp_path).items():
        assert np.array_equal(np.asarray(loaded[name].numpy()), want), name


FAULTS = [
    ("missing", SourceNotFound, r"not found \(HTTP 404\)"),
    ("ignore_range", FetchError, r"the server ignores HTTP Range requests \(it answered with the whole file, "
                                 r"HTTP 200\); serve it from a host with HTTP Range support"),
    ("html", FetchError, r"the server sent an HTML page \(Content-Type: text/html\) instead of the file"),
    ("html_bytes", FetchError, r"the server sent an HTML page \(it begins with <!doctype html> or <html>\)"),
]


@pytest.mark.parametrize("mode,error,message", FAULTS, ids=[f[0] for f in FAULTS])
@pytest.mark.parametrize("form", ["urllib", "loader", "awaitable"])
@pytest.mark.parametrize("kind", FILES)
def test_each_fault_is_one_error_naming_the_url(server, files, kind, form, mode, error, message, monkeypatch):
    if form == "loader":
        monkeypatch.setattr(sources, "_url_opener", None)
        sources.set_url_opener(urls.open_url)
    server.mode = "normal" if mode == "missing" else mode
    url = server.url("absent/" + FILES[kind] if mode == "missing" else FILES[kind])
    with pytest.raises(error, match=message) as e:
        loaded = asyncio.run(ASYNC[kind](url)) if form == "awaitable" else SYNC[kind](url)
        for name in loaded:
            loaded[name]
    assert e.value.file == url and url in str(e.value)
    assert "gave up" not in str(e.value)          # a lasting fault is not retried
    assert len(server.requests) == 1


def test_transient_failures_are_retried_through_the_loader(server, files):
    server.fail_next = 2
    f = asyncio.run(engine.site.load_safetensors_async(server.url(FILES["safetensors"])))
    assert np.array_equal(f["w"].numpy(), files["w"])
    assert server.requests[:3] == ["bytes=0-65535"] * 3      # two 503s, then the header


def test_wait_inside_a_running_loop_names_the_awaitable_form():
    async def inside():
        async def work():
            return 1
        with pytest.raises(NeedsAwait, match=r"cannot block inside a running event loop: use `await "
                                             r"engine.load_gguf_async\(url\)` instead"):
            wait(work(), "await engine.load_gguf_async(url)")
        with pytest.raises(NeedsAwait, match=r"use `await the pipeline's prepare\(...\)` instead"):
            wait(work(), PREPARE)
    asyncio.run(inside())
    assert issubclass(NeedsAwait, FetchError)


def test_a_blocking_load_inside_a_running_loop_says_what_to_await(server, files, monkeypatch):
    monkeypatch.setattr(sources, "_url_opener", None)
    sources.set_url_opener(urls.open_url)

    async def inside():
        engine.load_gguf(server.url(FILES["gguf"]))
    with pytest.raises(NeedsAwait, match=r"await engine.load_gguf_async\(url\)"):
        asyncio.run(inside())


class _Versioned(_Handler):
    """Sends the server's `etag` (when set) with every reply, as most static hosts do."""

    def _reply(self, status, body, headers=None, length=None):
        headers = dict(headers or {})
        if getattr(self.server, "etag", None):
            headers["ETag"] = self.server.etag
        super()._reply(status, body, headers, length)


def _load_cached(kind, url, cache, monkeypatch):
    if kind == "blocking":
        monkeypatch.setattr(urls, "default_cache", lambda cache_=True: cache)
        loaded = urls.LoaderSource(url)
        return _arrays(engine.load_gguf(loaded))
    return _arrays(asyncio.run(ASYNC[kind](url, cache=cache)))


@pytest.mark.parametrize("kind", ["safetensors", "gguf", "pth", "blocking"])
def test_a_url_is_cached_by_its_etag_and_size(server, files, tmp_path, kind, monkeypatch):
    """A second load asks the host for the header only; a new version of the file (another ETag)
    is fetched again and its old entries go; without an ETag nothing is kept."""
    server.RequestHandlerClass = _Versioned
    server.etag = '"v1"'
    name = FILES["gguf" if kind == "blocking" else kind]
    url, cache = server.url(name), MemoryCache()
    first = _load_cached(kind, url, cache, monkeypatch)
    assert cache.entries and all(key.startswith(url + "?engine-range=") for key in cache.entries)
    cold = len(server.requests)
    assert cold >= 2
    second = _load_cached(kind, url, cache, monkeypatch)
    assert len(server.requests) == cold + 1               # the header: it tells the version
    for array_name, want in first.items():
        assert np.array_equal(second[array_name], want)
    old = set(cache.entries)
    server.etag = '"v2"'
    _load_cached(kind, url, cache, monkeypatch)
    assert len(server.requests) == 2 * cold + 1 and not old & set(cache.entries)
    server.etag = None
    cache.entries.clear()
    _load_cached(kind, url, cache, monkeypatch)
    assert cache.entries == {}


def test_a_file_changed_during_a_load_is_an_error(server, files, monkeypatch):
    server.RequestHandlerClass = _Versioned
    server.etag = '"v1"'
    url = server.url(FILES["safetensors"])
    source = urls.LoaderSource(url, urls.UrlLoader(cache=None))
    f = engine.load_safetensors(source)
    server.etag = '"v2"'
    with pytest.raises(FetchError, match=r"the file changed on the server while it was read \(ETag now \"v2\"\)") as e:
        f["w"]
    assert e.value.file == url


# --- a site's model folder by URL: what the build wrote, verified against its manifest ------------
@pytest.fixture
def site_folders(tmp_path, files):
    """models/st/ (safetensors in shards) and models/gg/ (the GGUF) as the site build writes them."""
    from buildtools import convert
    from engine import registry
    for name, weights in (("st", FILES["safetensors"]), ("gg", FILES["gguf"])):
        model = registry.Model(name=name, tasks=(), pipeline=None, title=name, load=None, max_shard_kb=512,
                               sources=(registry.Source("repo", files={"weights": weights}),))
        convert.write_model(model, convert.locate(model, tmp_path, tmp_path / "cache", True), tmp_path / "site")
    return tmp_path / "site" / "models"


@pytest.mark.parametrize("form", ["blocking", "awaitable"])
@pytest.mark.parametrize("kind,folder", [("safetensors", "st"), ("gguf", "gg")])
def test_a_site_folder_by_url_is_read_and_verified(server, site_folders, kind, folder, form):
    local = _arrays(SYNC[kind](site_folders / folder))
    for url in (server.url(f"site/models/{folder}/"), server.url(f"site/models/{folder}/manifest.json")):
        loaded = asyncio.run(ASYNC[kind](url)) if form == "awaitable" else SYNC[kind](url)
        got = _arrays(loaded)
        assert set(got) == set(local)
        for name, want in local.items():
            assert np.array_equal(got[name], want), name
    shard = sorted(p for p in (site_folders / folder).iterdir() if not p.name.endswith(".json"))[-1]
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF                        # inside the last tensor
    shard.write_bytes(bytes(data))
    with pytest.raises(engine.errors.IntegrityError, match="sha256") as e:
        loaded = asyncio.run(ASYNC[kind](url)) if form == "awaitable" else SYNC[kind](url)
        _arrays(loaded)
    assert f"/site/models/{folder}/" in str(e.value) and "tensor '" in str(e.value)


def test_a_site_folder_of_the_other_kind_is_named(server, site_folders):
    with pytest.raises(engine.errors.InvalidHeader, match="holds a safetensors model: open it with load_safetensors"):
        engine.load_gguf(server.url("site/models/st/"))
    with pytest.raises(engine.errors.InvalidHeader, match="holds a gguf model: open it with load_gguf"):
        asyncio.run(engine.load_safetensors_async(server.url("site/models/gg/manifest.json")))


def test_the_loader_source_never_fetches_a_byte_twice_in_one_read(server, files):
    """A .pth read whole through the browser's path: the header's request, then the rest."""
    url = server.url(FILES["pth"])
    source = urls.LoaderSource(url, urls.UrlLoader(cache=None))
    data = bytes(source.read(0, source.size()))
    assert data == (server.root / FILES["pth"]).read_bytes()
    assert server.requests == ["bytes=0-65535", f"bytes=65536-{len(data) - 1}"]
