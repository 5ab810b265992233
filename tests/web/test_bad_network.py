"""A bad network, in Chromium: the page against a misbehaving host of our own
(tests/web/faultserver.py), one fault at a time. Each load ends in the right weights or a
clear error on the page, never wrong numbers, and the page keeps working once the fault is gone.

The loader is the page's own (engine.site.remote over JS fetch and the Cache API in the worker);
every fault class runs through it in one page (the matrix), then the page-level tests show
what a person sees: the status card's error and Retry, a card's error, the storage note.
Models: MNIST (0.5 MB in three shards) for almost everything, a toy GGUF split into 16 KiB
parts for the GGUF path, MiniLM where row tables matter, SmolLM2's manifest alone for the heap.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from tests.web.faultserver import FaultServer
from tests.web.test_page import PREDICTION, draw

MNIST = r"/models/mnist_cnn/model-0000\d-of-00003\.safetensors$"
SHARD3 = r"/models/mnist_cnn/model-00003-of-00003\.safetensors$"
TOY = r"/models/toy/toy\.Q8_0\.gguf"
STATUS = "[data-testid=engine-status]"


# --- a toy GGUF site folder in byte parts (the GGUF path without SmolLM2's 98 MB) --------------
@pytest.fixture(scope="module")
def toy_gguf(tmp_path_factory):
    """models/toy/: a GGUF of 64 kB in parts of 16 KiB (its header spans two), with the file's
    tensor bytes' sha256 in name order (what the page must end with)."""
    import gguf

    from buildtools import convert
    from engine import registry
    from engine.formats.gguf import GGUFFile
    from engine.formats.sources import FileSource
    root = tmp_path_factory.mktemp("toy")
    path = root / "toy.Q8_0.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"token{i}" for i in range(2500)])     # a 30 kB header
    rng = np.random.default_rng(3)
    writer.add_tensor("token_embd.weight", gguf.quants.quantize(rng.standard_normal((96, 128)).astype(np.float32),
                                                                gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.add_tensor("output_norm.weight", rng.standard_normal(128).astype(np.float32))
    writer.add_tensor("blk.0.ffn_up.weight", rng.standard_normal((64, 128)).astype(np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    entry = registry.Model(name="toy", tasks=(), pipeline=None, title="toy", load=None,
                           sources=(registry.Source("repo", files={"weights": path.name}),), max_shard_kb=16)
    convert.write_model(entry, convert.locate(entry, root, root / "cache", True), root / "site")
    folder = root / "site" / "models" / "toy"
    assert len(list(folder.glob("*.part-*"))) >= 4
    file = GGUFFile(FileSource(path))
    digest = hashlib.sha256(b"".join(bytes(file.source.read(file.info(n).offset, file.info(n).nbytes))
                                     for n in sorted(file))).hexdigest()
    return folder, digest


@pytest.fixture(scope="module")
def faulty(site, toy_gguf):
    server = FaultServer(site, overlays={"/models/toy/": toy_gguf[0]})
    yield server
    server.stop()


@pytest.fixture
def host(faulty):
    """The misbehaving host, with no fault in force before and after the test."""
    faulty.clear()
    faulty.log.clear()
    yield faulty
    faulty.clear()


# --- every fault class through the page's own loader, in one page ------------------------------
LOAD = """
import hashlib, js, json, time
import numpy as np
import engine
from engine.site.folders import fetch_gguf, fetch_model
from engine.site.browser import CacheApiStore
from engine.runtime import JsFetchTransport
if {fresh}:
    await js.caches.delete("fault-matrix")
options = dict(transport=JsFetchTransport(stall_timeout={stall}), cache=CacheApiStore("fault-matrix"),
               backoff=0.05)
started = time.perf_counter()
try:
    if {gguf}:
        w = await fetch_gguf(engine.runtime.site_url() + "models/toy/", **options)
        value = hashlib.sha256(b"".join(bytes(w.source.read(w.info(n).offset, w.info(n).nbytes))
                                        for n in sorted(w))).hexdigest()
        stats = w.fetch_stats
    else:
        checkpoint = await fetch_model(engine.runtime.site_url() + "models/mnist_cnn/", **options)
        pipe = engine.pipeline("digit-classification", weights=checkpoint, device="numpy")
        value = pipe.logits(np.array({x}, dtype=np.float32)).tolist()
        stats = checkpoint.tensors.tensors.fetch_stats
    result = {{"value": value, "stats": stats}}
except Exception as e:
    result = {{"error": f"{{type(e).__name__}}: {{e}}"}}
result["s"] = round(time.perf_counter() - started, 2)
result
"""

# (kind, options, what it ends in: "ok" or a regex the error must match), on MNIST's shards
MATRIX = [
    ("ignore-range", {}, "ok"),
    ("gzip", {}, "ok"),
    ("wrong-range", {"times": 1}, "ok"),
    ("wrong-range", {}, r"FetchError: could not fetch bytes \[0, 65536\): Content-Range 'bytes 100-65635/\d+' "
                        r"does not answer bytes=0-65535 \(gave up after 4 attempts\) \(file .*model-0000"),
    ("wrong-range", {"claim": "asked", "after": 1, "pattern": SHARD3},
     r"IntegrityError: downloaded bytes \[\d+, \d+\) are corrupt: sha256 \w+ differs from the manifest's \w+ "
     r"\(file .*model-00003-of-00003.safetensors, tensor '[\w.]+'\)"),
    ("status", {"status": 416}, r"HTTP 416 \(range not satisfiable: the server says the file has \d+ bytes\) "
                                r"\(gave up after 4 attempts\) \(file .*model-0000"),
    ("status", {"status": 503, "times": 2}, "ok"),
    ("status", {"status": 500}, r"FetchError: could not fetch bytes \[0, 65536\): HTTP 500 \(gave up after 4 "
                                r"attempts\) \(file .*model-0000"),
    ("reset", {"times": 2}, "ok"),
    ("reset", {}, r"FetchError: could not fetch bytes \[0, 65536\): the connection failed \(TypeError: .*\) "
                  r"\(gave up after 4 attempts\) \(file .*model-0000"),
    ("trickle", {"times": 1, "chunk": 64, "interval": 0.5}, "ok"),
    ("trickle", {"chunk": 64, "interval": 0.5, "pattern": SHARD3},
     r"FetchError: could not fetch bytes \[0, 65536\): the download stalled: less than 1024 bytes in 1 s "
     r"\(gave up after 4 attempts\) \(file .*model-00003-of-00003.safetensors\)"),
]
# the GGUF path: header and tensors spread over byte parts
TOY_MATRIX = [
    ("ignore-range", {}, "ok"),
    ("gzip", {}, "ok"),
    ("wrong-range", {"times": 2}, "ok"),
    ("reset", {"times": 2}, "ok"),
    ("trickle", {"times": 1, "chunk": 64, "interval": 0.5}, "ok"),
    ("wrong-range", {"claim": "asked", "after": 4},
     r"IntegrityError: downloaded bytes \[\d+, \d+\) are corrupt: .*tensor '[\w.]+'"),
    ("status", {"status": 503}, r"HTTP 503 \(gave up after 4 attempts\) \(file .*toy.Q8_0.gguf.part-"),
]


def load_in_worker(s, *, gguf: bool, x=None, stall: float = 1.0, fresh: bool = True) -> dict:
    return s.run(LOAD.format(fresh=fresh, stall=stall, gguf=gguf, x=json.dumps(x.tolist() if x is not None else None)))


def test_every_fault_through_the_page_loader(host, session_factory, toy_gguf):
    """The right weights (MNIST's logits equal the native model's; the toy GGUF's tensor bytes
    equal the file's) or an error saying what went wrong and where; never wrong numbers. A clean
    load after each case shows nothing was left broken, and every case starts with an empty cache
    so its bytes cross the faulty network."""
    from models import mnist_cnn
    import engine
    x = np.random.default_rng(0).random((2, 1, 28, 28), dtype=np.float32)
    native = mnist_cnn.load()(engine.from_numpy(x)).numpy()
    s = session_factory(host.url)
    s.open()
    outcomes = {}
    for gguf, matrix in ((False, MATRIX), (True, TOY_MATRIX)):
        for kind, options, expect in matrix:
            options = dict(options)
            pattern = options.pop("pattern", TOY if gguf else MNIST)
            host.clear()
            host.inject(kind, pattern, **options)
            result = load_in_worker(s, gguf=gguf, x=x)
            label = f"{'toy' if gguf else 'mnist'} {kind} {options}"
            outcomes[label] = result.get("error", "ok"), result["s"]
            if expect == "ok":
                assert "error" not in result, (label, result)
                if gguf:
                    assert result["value"] == toy_gguf[1], label
                else:
                    assert np.abs(np.array(result["value"]) - native).max() <= 1e-5, label
            else:
                assert "error" in result, (label, result)
                assert __import__("re").search(expect, result["error"]), (label, result["error"])
            host.clear()
            clean = load_in_worker(s, gguf=gguf, x=x)
            assert "error" not in clean, (label, clean)
    # what went over the wire for the misbehaving hosts: ranges asked, 200s and gzip read whole once
    for label, (outcome, seconds) in outcomes.items():
        print(f"{label:70s} {seconds:5.2f} s  {outcome[:100]}")
    # a warm load after all that: nothing but the manifest and the index from the network
    assert "error" not in load_in_worker(s, gguf=False, x=x)
    warm = load_in_worker(s, gguf=False, x=x, fresh=False)
    assert warm["stats"]["cache_bytes"] > 0 and warm["stats"]["requests"] == 1, warm["stats"]
    assert s.console_errors == []


def test_a_host_without_ranges_or_compressing_on_the_fly_serves_the_right_weights(host, session_factory):
    """Python's http.server ignores Range; a misconfigured host gzips weights on the fly. Either way
    each shard is read whole once (the browser decodes gzip itself) and every tensor verified."""
    for kind in ("ignore-range", "gzip"):
        host.clear()
        host.log.clear()
        host.inject(kind, r"/models/")
        s = session_factory(host.url)
        page = s.open()
        draw(page, "3")
        page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3'", timeout=15_000)
        # per shard a plain GET of the whole file (after a look at a plain GET's headers for gzip)
        whole = [entry for entry in host.requests(MNIST) if entry[2] is None]
        assert len(whole) == (3 if kind == "ignore-range" else 6), host.requests(MNIST)
        assert all(entry[3] == 200 for entry in whole), host.requests(MNIST)
        assert s.console_errors == []


def wait_status(page, status: str, timeout: float = 90_000):
    page.wait_for_function(f"document.querySelector('{STATUS}').textContent === '{status}'", timeout=timeout)


def test_persistent_faults_show_a_clear_error_and_retry_recovers(host, session_factory):
    """At start-up, a fault that retries cannot cure is an error naming the shard and the cause,
    with Retry; Retry after the host is mended starts the page, which then works."""
    s = session_factory(host.url)
    cases = [("status", {"status": 503}, ["HTTP 503", "gave up after 4 attempts", "model-0000"]),
             ("reset", {}, ["the connection failed", "model-0000"]),
             ("wrong-range", {"claim": "asked", "after": 1, "pattern": SHARD3},
              ["IntegrityError", "sha256", "model-00003-of-00003.safetensors", "tensor '"])]
    for i, (kind, options, words) in enumerate(cases):
        options = dict(options)
        host.clear()
        host.inject(kind, options.pop("pattern", MNIST), **options)
        if i == 0:
            page = s.open(ready=False)
        else:
            page.click("#retry")
        wait_status(page, "error")
        text = page.text_content("[data-testid=engine-error]")
        assert all(word in text for word in words), (kind, text)
        assert page.is_visible("#retry")
    host.clear()
    page.click("#retry")
    s.wait_ready()
    draw(page, "7")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '7'", timeout=15_000)


def test_a_stalled_download_is_an_error_in_its_card_then_works(host, session_factory):
    """A trickle slower than the stall timeout (lowered to 1 s here; 20 s in the page) on one of
    EfficientNet's shards: the photo card says the download stalled, naming the shard; once the
    host is mended the same click classifies the photo."""
    s = session_factory(host.url)
    page = s.open()
    s.run("import engine.runtime as f\nf.STALL_SECONDS = 1.0\n'ok'")
    host.inject("trickle", r"/models/efficientnet_lite0/model-00002-of-00005\.safetensors$", chunk=64, interval=0.5)
    stalled = ("!document.querySelector('[data-testid=image-error]').hidden && document.querySelector("
               "'[data-testid=image-error]').textContent.includes('the download stalled')")
    s.open_card("photo")                                 # its model starts loading: the card says why it cannot
    page.wait_for_function(stalled, timeout=120_000)
    page.evaluate("document.querySelector('[data-testid=image-error]').textContent = ''")
    page.click("[data-sample]")                          # tries the download again: the same error
    page.wait_for_function(stalled, timeout=120_000)
    text = page.text_content("[data-testid=image-error]")
    assert "the download stalled" in text and "model-00002-of-00005.safetensors" in text, text
    host.clear()
    page.click("[data-sample]")
    page.wait_for_function("document.querySelectorAll('[data-testid=image-top5] li').length === 5", timeout=120_000)
    assert page.is_hidden("[data-testid=image-error]")


def test_cache_over_quota_works_uncached_and_says_so(host, session_factory):
    s = session_factory(host.url)
    cdp = s.context.new_cdp_session(s.page)
    cdp.send("Storage.overrideQuotaForOrigin", {"origin": host.url.rstrip("/"), "quotaSize": 20_000})
    page = s.open()
    note = page.text_content("[data-testid=storage-note]")
    assert page.is_visible("[data-testid=storage-note]")
    assert "mnist_cnn" in note and "QuotaExceededError" in note and "download again" in note, note
    draw(page, "3")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3'", timeout=15_000)
    host.log.clear()
    page.reload()
    s.wait_ready()
    assert [e for e in host.requests(MNIST) if e[3] == 206], "not cached: downloaded again"
    assert page.is_visible("[data-testid=storage-note]")
    assert s.console_errors == []


def test_cache_evicted_during_a_session(host, session_factory):
    """The browser may drop the Cache API's entries at any time (storage pressure, the user). Row
    blocks fetched after that are stored again (in the cache as it now is, not into the deleted
    one), and a reload downloads what is gone and works."""
    s = session_factory(host.url)
    page = s.open()
    s.open_card("sentences")
    page.click("[data-testid=sentences-rank]")
    page.wait_for_function("document.querySelectorAll('[data-testid=sentences-ranking] li').length === 8",
                           timeout=180_000)
    cdp = s.context.new_cdp_session(page)
    cdp.send("Storage.clearDataForOrigin", {"origin": host.url.rstrip("/"), "storageTypes": "cache_storage"})
    assert s.run("import js\n[str(r.url) for r in await (await js.caches.open('engine-weights-v1')).keys()]") == []
    host.log.clear()
    page.fill("[data-testid=sentences-list]", "Zebras gallop across savannas.\nQuantum chromodynamics puzzles physicists.")
    page.fill("[data-testid=sentences-query]", "Which animals run?")
    page.click("[data-testid=sentences-rank]")
    page.wait_for_function("document.querySelectorAll('[data-testid=sentences-ranking] li').length === 2 && "
                           "document.querySelector('[data-testid=sentences-ranking] li.top').dataset.index === '0'",
                           timeout=60_000)
    assert host.requests(r"model-rows-00001\.safetensors$"), "new words' rows come from the network"
    keys = s.run("import js\n[str(r.url) for r in await (await js.caches.open('engine-weights-v1')).keys()]")
    assert any("engine-rows=" in key for key in keys), keys
    host.log.clear()
    s.open_card("digit")
    page.reload()
    s.wait_ready()
    assert [e for e in host.requests(MNIST) if e[3] == 206], "the evicted digits model downloads again"
    page.locator("[data-testid=digit-canvas]").scroll_into_view_if_needed()     # the reload kept the scroll
    draw(page, "1")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '1'", timeout=15_000)
    assert s.console_errors == []


def test_two_tabs_load_the_same_model_at_once(host, session_factory):
    """Two tabs of one browser start together and fill the same cache at once: both work, and a
    third tab finds every weight in the cache."""
    s = session_factory(host.url)
    second = s.context.new_page()
    errors = []
    second.on("console", lambda m: m.type == "error" and errors.append(m.text))
    s.page.goto(host.url + "index.html")
    second.goto(host.url + "index.html")
    for page in (s.page, second):
        page.wait_for_function("document.body.dataset.ready === 'true'", timeout=120_000)
    for page in (s.page, second):
        page.bring_to_front()                           # a tab in the background draws at a crawl
        draw(page, "3")
        page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3'", timeout=15_000)
    host.log.clear()
    third = s.context.new_page()
    third.goto(host.url + "index.html")
    third.wait_for_function("document.body.dataset.ready === 'true'", timeout=120_000)
    assert host.requests(MNIST) == []                   # every tensor from the shared cache
    assert errors == [] and s.console_errors == []


def test_a_model_too_large_for_the_heap_is_refused_before_downloading(host, session_factory, site):
    """A manifest claiming 3 GB of weights: the chat card says the model cannot fit in this
    page's WebAssembly heap, before a byte of the GGUF moves; once the host serves the real
    manifest, the next message loads the model and answers."""
    folder = site / "models/SmolLM2-135M-Instruct"
    manifest = json.loads((folder / "manifest.json").read_text())
    gguf = manifest["gguf"]
    huge = 3_000_000_000
    name, entry = max(manifest["tensors"].items(), key=lambda kv: kv[1]["offset"])
    entry["nbytes"] = huge - entry["offset"]
    gguf["size"] = manifest["total_bytes"] = huge
    manifest["files"][gguf["parts"][0]["file"]]["size"] = huge
    host.inject("body", r"/models/SmolLM2-135M-Instruct/manifest\.json$", body=json.dumps(manifest).encode())
    s = session_factory(host.url)
    page = s.open()
    s.open_card("chat")                      # opening the card starts the load: it fails at once
    shown = "() => { const e = document.querySelector('[data-testid=chat-error]'); return e.hidden ? null : e.textContent; }"
    text = page.wait_for_function(shown, timeout=60_000).json_value()
    assert "SmolLM2-135M-Instruct is too large for this browser" in text and "GiB" in text, text
    page.fill("[data-testid=chat-input]", "What is the capital of France?")
    page.press("[data-testid=chat-input]", "Enter")
    # sending clears the error and tries the load again; read the error once that send is over
    # (its input taken, Send enabled again), in one evaluation so that no later change races it
    answered = """() => { const e = document.querySelector('[data-testid=chat-error]');
        const input = document.querySelector('[data-testid=chat-input]');
        const send = document.querySelector('[data-testid=chat-send]');
        return input.value === '' && !send.disabled && !e.hidden ? e.textContent : null; }"""
    text = page.wait_for_function(answered, timeout=60_000).json_value()
    assert "SmolLM2-135M-Instruct is too large for this browser" in text and "GiB" in text, text
    assert "manifest.json" in text and "nothing was downloaded" in text, text
    assert host.requests(r"\.gguf") == []
    host.clear()
    from tests.web.test_chat_card import PARIS, ask
    assert ask(page, "What is the capital of France?") == PARIS
    assert page.is_hidden("[data-testid=chat-error]")
