"""engine.pipeline(task, site=...) and engine.pipeline_async natively: a built site's models
over HTTP (the dev server, as any static host serves them) and from its folder give the
vectors the default pipeline gives from the same build; a site that lacks the model, a URL
with no site behind it and a bad `site=` each get one clear error. The browser runs the same
calls in the page's worker (tests/web/test_library_worker.py)."""
from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

import engine
from buildtools import convert
from buildtools.fetch import DEFAULT_CACHE
from engine import registry
from engine.errors import InputError, SourceNotFound, WeightsError
from engine.tasks.base import open_checkpoint
from tests.helpers import build_lock

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "digits"
MODELS = ("mnist_cnn", "all-MiniLM-L6-v2")          # what the test site serves
TEXTS = ["A man is eating food.", "Someone is eating.", "The cat sleeps on the sofa."]

pytestmark = pytest.mark.slow           # the site's build (MiniLM converted) takes ~10 s on 2 cores


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A built site holding two models (the build's own converter and registry listing), as
    `python build.py` lays them out; the MiniLM wheel comes from the download cache."""
    out = tmp_path_factory.mktemp("site")
    with build_lock():                  # the download cache may be filled here, as a build does
        for name in MODELS:
            entry = registry.model(name)
            convert.write_model(entry, convert.locate(entry, ROOT, DEFAULT_CACHE, False), out)
    listing = [m for m in engine.tasks.page_listing() if m["name"] in MODELS]     # as the build writes it
    (out / "registry.json").write_text(json.dumps(listing))
    return out


def serve(root: Path):
    """The repository's dev server on `root`, on a free port: (its base URL, stop)."""
    from buildtools.devserver import make_server
    server = make_server(root, port=0, isolation=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop():
        server.shutdown()
        server.server_close()
    return f"http://127.0.0.1:{server.server_port}/", stop


@pytest.fixture(scope="module")
def site_url(built):
    url, stop = serve(built)
    yield url
    stop()


@pytest.fixture(scope="module")
def default_vectors(built):
    """The vectors of the default pipeline (no site=, no weights=) reading this build as its dist/."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGINE_DIST", str(built))
        assert registry.default_location(registry.model("all-MiniLM-L6-v2")).startswith(str(built))
        return engine.pipeline("sentence-embedding", device="numpy")(TEXTS)


def test_a_site_url_gives_the_default_pipelines_vectors(site_url, default_vectors, minilm_folder):
    emb = engine.pipeline("sentence-embedding", site=site_url.rstrip("/"), device="numpy")
    assert emb.entry.name == "all-MiniLM-L6-v2"
    tables = emb.checkpoint.tensors.tables                        # the site's row table, fetched whole natively
    assert set(tables) == {"embeddings.word_embeddings.weight"}
    assert all(t.fetched_rows == t.shape[0] for t in tables.values())
    np.testing.assert_array_equal(emb(TEXTS), default_vectors)
    # and the site's float16 weights stay close to the original float32 checkpoint's vectors
    original = engine.pipeline("sentence-embedding", weights=minilm_folder, device="numpy")(TEXTS)
    np.testing.assert_allclose(default_vectors, original, atol=2e-3)
    assert float(np.abs(default_vectors - original).max()) > 0     # the site's copy was read, not the original


def test_pipeline_async_gives_the_same_vectors(site_url, default_vectors, built):
    emb = asyncio.run(engine.pipeline_async("sentence-embedding", site=site_url, device="numpy"))
    np.testing.assert_array_equal(emb(TEXTS), default_vectors)
    from_folder = asyncio.run(engine.pipeline_async("sentence-embedding", site=built, device="numpy"))
    np.testing.assert_array_equal(from_folder(TEXTS), default_vectors)


def test_pipeline_async_with_a_weights_url(site_url, default_vectors):
    """weights=URL, awaited: the tensors by engine.load_safetensors_async, the processor files
    from beside them, all fetched before the pipeline is built."""
    index = f"{site_url}models/all-MiniLM-L6-v2/{registry.INDEX_NAME}"
    emb = asyncio.run(engine.pipeline_async("sentence-embedding", weights=index, device="numpy"))
    assert emb.checkpoint.complete and emb.checkpoint.location == index
    assert sorted(emb.checkpoint.files) == ["1_Pooling/config.json", "config.json", "sentence_bert_config.json",
                                            "tokenizer.json"]
    np.testing.assert_array_equal(emb(TEXTS), default_vectors)


def test_a_local_folder_site(built, default_vectors):
    emb = engine.pipeline("sentence-embedding", site=str(built), device="numpy")
    assert emb.checkpoint.location == str(built / "models" / "all-MiniLM-L6-v2" / registry.INDEX_NAME)
    np.testing.assert_array_equal(emb(TEXTS), default_vectors)


def test_the_blocking_form_works_inside_a_running_event_loop(site_url, default_vectors):
    """A notebook's cell runs inside an event loop: the sync pipeline still loads (its fetches
    run in a thread of their own) and its calls wait for nothing."""
    async def cell():
        emb = engine.pipeline("sentence-embedding", site=site_url, device="numpy")
        return emb(TEXTS)
    np.testing.assert_array_equal(asyncio.run(cell()), default_vectors)


def test_a_model_without_row_tables_and_a_named_model(site_url):
    from engine.vision import read_image
    digit = read_image(SAMPLES / "7.png")
    want = engine.pipeline("digit-classification")(digit)             # the copy bundled with the code
    got = engine.pipeline("digit-classification", site=site_url, model="mnist_cnn")(digit)
    assert [p["label"] for p in got] == [p["label"] for p in want] and got[0]["label"] == "7"
    np.testing.assert_allclose([p["score"] for p in got], [p["score"] for p in want], rtol=1e-5)


def test_a_site_that_does_not_serve_the_model(site_url, built):
    for site in (site_url, built):
        with pytest.raises(InputError, match=r"serves the task 'image-classification' with no model; it serves: "
                                             r"mnist_cnn \(digit-classification\); all-MiniLM-L6-v2"):
            engine.pipeline("image-classification", site=site)
        with pytest.raises(InputError, match=r"does not serve the model 'efficientnet_lite0'") as caught:
            engine.pipeline("image-classification", site=site, model="efficientnet_lite0")
        assert str(site).rstrip("/") in str(caught.value)
    with pytest.raises(InputError, match="does not serve the task 'sentence-embedding'"):
        engine.pipeline("sentence-embedding", site=site_url, model="mnist_cnn")


def test_a_site_whose_registry_lists_a_model_this_engine_does_not_know(tmp_path):
    (tmp_path / "registry.json").write_text(json.dumps([{"name": "someone-elses", "tasks": ["sentence-embedding"]}]))
    with pytest.raises(InputError, match=r"only with models this engine has no code for \(someone-elses\)"):
        engine.pipeline("sentence-embedding", site=tmp_path)


def test_a_url_with_no_site_behind_it(site_url):
    with pytest.raises(SourceNotFound, match=r"no built site at .*/nowhere/: it has no registry\.json") as caught:
        engine.pipeline("sentence-embedding", site=site_url + "nowhere/")
    assert caught.value.file == site_url + "nowhere/registry.json"
    with pytest.raises(SourceNotFound, match="no built site at"):
        asyncio.run(engine.pipeline_async("sentence-embedding", site=site_url + "nowhere"))


def test_a_site_that_lists_a_model_it_does_not_hold(built, tmp_path):
    """registry.json says MiniLM, its folder is missing: the manifest's URL is named."""
    shutil.copy(built / "registry.json", tmp_path / "registry.json")
    url, stop = serve(tmp_path)
    try:
        with pytest.raises(SourceNotFound) as caught:
            engine.pipeline("sentence-embedding", site=url)
        assert caught.value.file == f"{url}models/all-MiniLM-L6-v2/manifest.json"
        with pytest.raises(WeightsError, match="not built yet"):
            engine.pipeline("sentence-embedding", site=tmp_path)
    finally:
        stop()


def test_bad_sites(tmp_path):
    with pytest.raises(InputError, match="neither an http"):
        engine.pipeline("sentence-embedding", site=str(tmp_path / "missing"))
    with pytest.raises(InputError, match="site must be"):
        engine.pipeline("sentence-embedding", site=42)
    (tmp_path / "registry.json").write_text("<!doctype html><title>Not found</title>")
    with pytest.raises(WeightsError, match=r"registry\.json is not valid JSON"):
        engine.pipeline("sentence-embedding", site=tmp_path)


def test_site_roots():
    from engine.site.folders import site_root
    assert site_root("http://example.org/engine") == "http://example.org/engine/"
    worker = "http://example.org/app/worker.js"             # in the browser: relative to the page or worker
    assert site_root("../site", page_url=worker) == "http://example.org/site/"
    assert site_root("./", page_url=worker) == "http://example.org/app/"
    assert site_root("https://other.example/", page_url=worker) == "https://other.example/"
    with pytest.raises(InputError, match="in the browser a site is a URL"):
        site_root("file:///dist", page_url=worker)


def test_weights_with_a_site_take_the_processor_files_from_the_site(built, minilm_folder):
    """weights= names the tensors; the files beside them first, the site's model folder after."""
    checkpoint = open_checkpoint(registry.model("all-MiniLM-L6-v2"), minilm_folder / "model.safetensors",
                                 str(built))
    assert checkpoint.file("tokenizer.json") == (minilm_folder / "tokenizer.json").read_bytes()
    assert checkpoint.fallback == str(built / "models" / "all-MiniLM-L6-v2" / registry.INDEX_NAME)
    mnist = open_checkpoint(registry.model("mnist_cnn"), {"w": np.zeros(1)}, str(built))
    assert mnist.location is None and mnist.fallback.startswith(str(built))


def test_a_site_checkpoint_has_all_its_files_and_looks_nowhere_else(site_url):
    emb = engine.pipeline("sentence-embedding", site=site_url, device="numpy")
    assert emb.checkpoint.complete
    assert sorted(emb.checkpoint.files) == ["1_Pooling/config.json", "config.json", "sentence_bert_config.json",
                                            "tokenizer.json"]
    assert emb.checkpoint.file("vocab.txt", required=False) is None
    with pytest.raises(WeightsError, match=r"vocab\.txt is missing: it is not among the files that came with the "
                                           r"weights \(1_Pooling/config\.json, .*models/all-MiniLM-L6-v2/vocab\.txt"):
        emb.checkpoint.file("vocab.txt")


def test_no_site_in_a_foreign_page_says_pass_site(monkeypatch):
    """A Pyodide page that set no site (not our page) and passed none: the error says what to
    pass, before anything is fetched (in_browser() stands in for Pyodide, and a native wait for
    JSPI's: the site is looked up before any browser call)."""
    from engine import runtime
    monkeypatch.setitem(runtime._site, "url", None)
    monkeypatch.setattr(runtime, "in_browser", lambda: True)
    monkeypatch.setattr(runtime, "wait", lambda awaitable, hint, thread=False: asyncio.run(awaitable))
    for device in (None, "numpy"):                # with the kernels to fetch first, and without
        with pytest.raises(WeightsError, match=r"this page has no site to load models from: pass site=URL"):
            engine.pipeline("sentence-embedding", device=device)
        with pytest.raises(WeightsError, match=r"pass site=URL"):
            asyncio.run(engine.pipeline_async("sentence-embedding", device=device))
