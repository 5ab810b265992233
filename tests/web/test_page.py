"""The page in headless Chromium, driven like a person: draw digits, reload, break things."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tests.helpers import copy_site
from tests.web.conftest import ROOT, start_dev_server

STROKES = json.loads((ROOT / "samples" / "digits" / "strokes.json").read_text())
PREDICTION = "[data-testid=digit-prediction]"


def draw(page, digit: str) -> None:
    """Replay the digit's pen strokes with real mouse events on the canvas."""
    box = page.locator("[data-testid=digit-canvas]").bounding_box()
    for stroke in STROKES[digit]:
        xs = [box["x"] + x * box["width"] for x, _ in stroke]
        ys = [box["y"] + y * box["height"] for _, y in stroke]
        page.mouse.move(xs[0], ys[0])
        page.mouse.down()
        for x, y in zip(xs[1:], ys[1:]):
            page.mouse.move(x, y, steps=4)
        page.mouse.up()


def weight_responses(session):
    return [r for r in session.responses if "/models/" in r.url and r.url.endswith(".safetensors")]


def test_draw_digits_and_see_predictions(server, session_factory):
    s = session_factory(server.url)
    page = s.open()
    assert page.evaluate("document.body.dataset.ready") == "true"
    assert page.input_value("[data-testid=backend-select]") == "simd"      # the best one is the default
    for digit in ["0", "1", "3", "7"]:
        page.click("[data-testid=digit-clear]")
        page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '–'")
        draw(page, digit)
        page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '{digit}'", timeout=15_000)
        probs = page.eval_on_selector_all("[data-testid=digit-probs] li", "els => els.map(e => +e.dataset.prob)")
        assert len(probs) == 10 and abs(sum(probs) - 1) < 1e-3 and int(np.argmax(probs)) == int(digit)
        assert float(page.text_content("[data-testid=digit-time-ms]")) > 0
    weights = weight_responses(s)
    assert weights and all(r.status == 206 for r in weights), [(r.url, r.status) for r in weights]
    assert all(r.request.headers.get("range", "").startswith("bytes=") for r in weights)
    assert s.foreign_requests() == []
    assert s.console_errors == []


def test_a_boot_done_before_the_client_loads_is_not_lost(dev_server, session_factory):
    """index.html starts the inference worker, and its boot, in its first script, before the
    page's modules load; engine-client.js takes it over with what it had said by then. Held back
    10 s here, the client comes after the whole boot, reply included, and still gets it all:
    ready, every stage's download progress, one worker, and answers."""
    import time
    s = session_factory(dev_server.url)

    def late(route):
        time.sleep(10)
        route.continue_()
    s.context.route("**/engine-client.js", late)
    page = s.open()
    timings = page.evaluate("window.engineClient.state.info.timings")
    booted = timings["worker_start_ms"] + sum(timings[k] for k in ("pyodide_ms", "numpy_ms", "engine_ms",
                                                                   "devices_ms", "weights_ms"))
    loaded = page.evaluate("performance.getEntriesByType('resource')"
                           ".find((e) => e.name.endsWith('/engine-client.js')).responseEnd")
    assert booted < loaded - 1000, (booted, loaded)         # the boot ended well before the client came
    progress = page.evaluate("window.engineClient.snapshot().progress")
    for stage in ("pyodide", "numpy", "engine"):
        assert 0 < progress[stage]["total"] == progress[stage]["loaded"], (stage, progress)
    assert sum(u.endswith("/worker.js") for u in s.requests) == 1
    assert page.evaluate("window.engineStarted") is None
    draw(page, "7")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '7'", timeout=30_000)


def test_reload_downloads_no_weight_bytes(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open()
    assert weight_responses(s), "the first visit must fetch weights"
    s.responses.clear()
    page.reload()
    s.wait_ready()
    assert weight_responses(s) == []                      # everything came from the Cache API
    stats = s.run("import json; from engine.web.worker import _state; _state['stats']['digit-classification']")
    index = dev_server.root / "models/mnist_cnn/model.safetensors.index.json"
    # only the small index (which names the shards) is asked for again; no tensor byte is
    assert stats["network_bytes"] == index.stat().st_size and stats["cache_bytes"] > 0


def test_page_answers_while_a_long_inference_runs(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open()
    # A slow job in the worker; the page must keep answering (drawing, clicks) meanwhile.
    page.evaluate("""() => { window.longJob = window.engine.run(
        "import time\\nt = time.time()\\nwhile time.time() - t < 4: pass\\n'done'").then(v => {
            window.longJobDoneAt = performance.now(); return v; }); }""")
    answered_at = page.evaluate("""() => new Promise(resolve => {
        document.querySelector('[data-testid=digit-clear]').click();
        requestAnimationFrame(() => resolve(performance.now())); })""")
    draw(page, "1")
    assert page.evaluate("window.longJobDoneAt === undefined")      # still running, yet we drew
    assert page.evaluate("window.longJob") == "done"
    assert answered_at < page.evaluate("window.longJobDoneAt")


def test_clear_wins_over_an_answer_still_in_flight(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open()
    # Hold the worker busy so the prediction for the drawing is queued behind it, then clear.
    page.evaluate("""() => { window.busy = window.engine.run(
        "import time\\nt = time.time()\\nwhile time.time() - t < 1.5: pass\\n'done'"); }""")
    draw(page, "7")
    page.wait_for_timeout(300)                                  # past the debounce: the request is sent
    page.click("[data-testid=digit-clear]")
    assert page.evaluate("window.busy") == "done"
    page.wait_for_timeout(500)                                  # the stale answer has arrived by now
    assert page.text_content(PREDICTION) == "–"
    assert page.text_content("[data-testid=digit-time-ms]") == "–"


def test_browser_logits_equal_native(dev_server, session_factory, mnist):
    import engine
    from models import mnist_cnn
    images, _, _, held = mnist
    x = images[held[:12], None].astype(np.float32)
    native = mnist_cnn.load()(engine.from_numpy(x)).numpy()
    s = session_factory(dev_server.url)
    s.open()
    browser = np.array(s.run(
        "import numpy as np\nfrom engine.web.worker import pipeline\n"
        f"x = np.array({json.dumps(x.tolist())}, dtype=np.float32)\npipeline().logits(x)"))
    assert browser.shape == native.shape
    assert np.abs(browser - native).max() <= 1e-5


def test_engine_run_rejects_with_the_python_error(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open()
    error = page.evaluate("() => window.engine.run('1/0').then(() => 'no error', e => e.message)")
    assert error.startswith("ZeroDivisionError: division by zero"), error
    assert s.run("engine.tensor([1.0, 2.0]).sum()") == 3.0
    assert s.run("engine.available_devices()") == ["numpy", "simd", "webgpu"]     # webgpu: SwiftShader


ENGINE_FAILED = "document.querySelector('[data-testid=engine-status]').textContent === 'error'"


@contextmanager
def failed_boot(session_factory, root: Path):
    """The page served from `root` by a dev server of its own, once its engine failed to start and
    the page says so (never ready): (page, the error it shows)."""
    served = start_dev_server(root)
    try:
        page = session_factory(served.url).open(ready=False)
        page.wait_for_function(ENGINE_FAILED, timeout=90_000)
        assert page.evaluate("document.body.dataset.ready") == "false"
        yield page, page.text_content("[data-testid=engine-error]")
    finally:
        served.stop()


def test_corrupt_shard_shows_an_integrity_error(site, tmp_path, session_factory):
    broken = tmp_path / "broken"
    copy_site(site, broken)
    manifest = json.loads((broken / "models/mnist_cnn/manifest.json").read_text())
    name, info = max(manifest["tensors"].items(), key=lambda kv: kv[1]["nbytes"])
    shard = broken / "models/mnist_cnn" / info["file"]
    data = bytearray(shard.read_bytes())
    data[info["offset"] + info["nbytes"] // 2] ^= 0x40                 # one flipped bit in one tensor
    shard.write_bytes(bytes(data))
    with failed_boot(session_factory, broken) as (page, text):
        assert "sha256" in text.lower() and name in text and info["file"] in text, text
        assert page.is_visible("#retry")


def test_damaged_wheel_is_refused_naming_the_file(site, tmp_path, session_factory):
    """The worker fetches the wheels early, with the integrity Pyodide asks for (the lock's sha256):
    a wheel whose bytes differ is never installed, and the page says which file and why."""
    import hashlib
    import zipfile
    broken = tmp_path / "broken"
    copy_site(site, broken)
    wheel = broken / "pyodide" / "engine-0.1.0-py3-none-any.whl"
    lock = json.loads((broken / "pyodide" / "pyodide-lock.json").read_text())
    assert lock["packages"]["engine"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as z:                   # a stored member: its bytes are in the file as is
        member = z.getinfo("engine/tensor.py")
        assert member.compress_type == zipfile.ZIP_STORED
    data = bytearray(wheel.read_bytes())
    start = member.header_offset + 30 + len(member.filename.encode()) + len(member.extra)
    data[start + member.file_size // 2] ^= 0x20         # one flipped bit in engine/tensor.py
    wheel.write_bytes(bytes(data))
    for copy in (".br", ".gz"):                         # the host sends the damaged file itself
        Path(f"{wheel}{copy}").unlink(missing_ok=True)
    with failed_boot(session_factory, broken) as (_, text):
        assert "pyodide/engine-0.1.0-py3-none-any.whl" in text and "sha256" in text, text
        assert hashlib.sha256(bytes(data)).hexdigest() in text and lock["packages"]["engine"]["sha256"] in text, text


def test_transient_network_failures_are_retried(dev_server, session_factory):
    s = session_factory(dev_server.url)
    failed = []

    def flaky(route):
        if len(failed) < 2:                      # the first two weight requests die mid-flight
            failed.append(route.request.url)
            route.abort("connectionreset")
        else:
            route.continue_()
    s.context.route("**/models/mnist_cnn/*.safetensors", flaky)
    s.open()
    assert len(failed) == 2
    draw(s.page, "7")
    s.page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '7'", timeout=15_000)


def test_failure_then_retry_button(dev_server, session_factory):
    s = session_factory(dev_server.url)
    s.context.route("**/models/mnist_cnn/*.safetensors", lambda route: route.abort("failed"))
    page = s.open(ready=False)
    page.wait_for_function(ENGINE_FAILED, timeout=90_000)
    assert "mnist_cnn" in page.text_content("[data-testid=engine-error]")
    s.context.unroute("**/models/mnist_cnn/*.safetensors")
    page.click("#retry")
    s.wait_ready()


def test_backend_from_the_url_and_fallback_note(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open("index.html?backend=numpy")
    assert page.input_value("[data-testid=backend-select]") == "numpy"
    assert page.is_hidden("#backend-note")
    s2 = session_factory(dev_server.url)
    page2 = s2.open("index.html?backend=cuda")
    assert page2.input_value("[data-testid=backend-select]") == "simd"
    assert "backend 'cuda' is not available here" in page2.text_content("#backend-note")


def test_works_without_cross_origin_isolation(site, session_factory):
    served = start_dev_server(site, isolation=False)
    try:
        s = session_factory(served.url)
        page = s.open()
        assert "not cross-origin isolated" in page.text_content("#isolation")
        draw(page, "3")
        page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3'", timeout=15_000)
        assert s.console_errors == []
    finally:
        served.stop()


def test_isolated_when_served_with_coop_coep(dev_server, session_factory):
    page = session_factory(dev_server.url).open()
    assert page.evaluate("self.crossOriginIsolated") is True
    assert "cross-origin isolated: precise timers" in page.text_content("#isolation")


def test_phone_layout(dev_server, session_factory):
    s = session_factory(dev_server.url, viewport={"width": 390, "height": 844})
    page = s.open()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    box = page.locator("[data-testid=digit-canvas]").bounding_box()
    assert box["width"] >= 200 and box["x"] >= 0 and box["x"] + box["width"] <= 390
    page.locator("[data-testid=digit-canvas]").scroll_into_view_if_needed()
    draw(page, "1")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '1'", timeout=15_000)


def test_bench_page_runs(dev_server, session_factory):
    s = session_factory(dev_server.url)
    # MiniLM on SwiftShader's emulated GPU alone took 4 minutes: its webgpu case runs in
    # tests/web/test_sentences_card.py; the quantized-linear section alone runs in
    # tests/web/test_quantized_page.py; the chat section with a short answer;
    # the GEMMs up to 512**3 multiply-adds (1024**3 on the emulated GPU and NumPy in Pyodide: ~25 s)
    page = s.open("bench.html?repeat=1&gemm_max=512&qlinear=0&minilm=simd&llm=1&peer=1&tokens=8", ready=False)
    page.wait_for_function("document.body.dataset.done === 'true'", timeout=400_000)
    results = json.loads(page.text_content("[data-testid=bench-results]"))
    assert "error" not in results, results
    assert set(results["minilm"]) == {"simd"} and results["minilm"]["simd"]
    llm = results["llm"]["simd"]
    assert llm["prompt_tokens"] == 37 and llm["new_tokens"] == 8 and llm["graphs"] is True
    assert llm["prefill_tok_s"] > 0 and llm["decode_tok_s"] > 0 and llm["ttft_s"] > 0 and llm["heap_bytes"] > 0
    assert results["llm_load"]["weights"]["network_bytes"] == 98_362_432
    peer = results["llm_peer"]                        # llama.cpp in WebAssembly, same case, this run
    assert peer["threads"] == 1 and peer["prompt_tokens"] == 37 and peer["new_tokens"] == 8
    assert peer["prefill_tok_s"] > 0 and peer["decode_tok_s"] > 0 and peer["answer_start"].startswith("The capital")
    table = page.text_content("[data-testid=llm-table]")
    assert "decode" in table and "llama.cpp" in table and "this run" in table
    assert set(results["sections_ms"]) == {"gemm", "ops", "mnist", "effnet", "minilm", "llm"}
    assert set(results["cold_start_ms"]) >= {"pyodide_ms", "numpy_ms", "engine_ms", "weights_ms", "total"}
    cold = results["cold_start"]                      # a fresh profile: a first visit, all over the network
    assert cold["visit"] == "navigate" and cold["service_worker"] is False
    # a full start, whose memory snapshot is taken after its answer (web/snapshot-worker.js)
    assert cold["runtime"]["start"] == "full" and cold["runtime"]["snapshot_stored"] == "pending"
    assert set(cold["stages"]) >= {"pyodide", "numpy", "engine", "weights"} and cold["stages"]["pyodide"]["ms"] > 0
    wasm = (dev_server.root / "pyodide" / "pyodide.asm.wasm").stat().st_size
    # the dev server sends the build's .gz: pyodide.asm.wasm alone goes 10.1 MB -> 3.1 MB
    pyodide = cold["stages"]["pyodide"]
    assert pyodide["decoded_bytes"] >= wasm and pyodide["body_bytes"] < pyodide["decoded_bytes"] - wasm / 2
    assert results["mnist"]["numpy"]["batch1_ms"] > 0
    assert results["weights"]["network_bytes"] > 0
    assert results["effnet"]["numpy"]["batch1_ms"] > 0 and results["effnet"]["simd"]["batch1_ms"] > 0
    assert results["mnist"]["simd"]["batch1_ms"] > 0 and results["kernels"] == "relaxed"
    assert {(c["m"], c["k"], c["n"]) for c in results["gemm"]} >= {(512, 512, 512), (128, 384, 1536)}
    assert all(c["simd"]["gflops"] > 0 and c["numpy"]["gflops"] > 0 for c in results["gemm"])
    assert results["effnet_load"]["weights"]["network_bytes"] > 18_000_000
    # webgpu on SwiftShader, named as the CPU emulation it is; per-op times on every backend
    assert results["devices"] == ["numpy", "simd", "webgpu"]
    assert results["adapter"] == "google swiftshader (software, CPU emulation)"
    assert results["effnet"]["webgpu"]["batch1_ms"] > 0 and results["mnist"]["webgpu"]["batch1_ms"] > 0
    ops = {c["op"]: c for c in results["ops"]}
    assert {"matmul", "conv2d 3x3", "depthwise 3x3", "softmax", "layer_norm"} <= set(ops)
    assert all(c[d]["ms"] > 0 for c in ops.values() for d in results["devices"])


OPS_PROBE = """
import numpy as np
import engine
import engine.nn.functional as F
rng = np.random.default_rng(7)
x = engine.from_numpy(rng.standard_normal((2, 3, 9, 8)).astype(np.float32))
w = engine.from_numpy(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
dw = engine.from_numpy(rng.standard_normal((3, 1, 3, 3)).astype(np.float32))
table = engine.from_numpy(rng.standard_normal((11, 5)).astype(np.float32))
ids = engine.tensor([[3, 0, 10], [7, 7, 1]])
q = engine.from_numpy(rng.standard_normal((1, 2, 5, 4)).astype(np.float32))
{
    "conv": F.conv2d(x, w, stride=2, padding=1).numpy().tolist(),
    "depthwise": F.conv2d(x, dw, padding="same", groups=3).numpy().tolist(),
    "max_pool": F.max_pool2d(x, 3, 2, 1, ceil_mode=True).numpy().tolist(),
    "avg_pool": F.avg_pool2d(x, 2, count_include_pad=False).numpy().tolist(),
    "adaptive_pool": F.adaptive_avg_pool2d(x, (4, 3)).numpy().tolist(),
    "embedding": F.embedding(ids, table).numpy().tolist(),
    "pad": F.pad(x, (1, 2, 2, 1), mode="reflect").numpy().tolist(),
    "topk_values": engine.topk(x.flatten(1), 5).values.numpy().tolist(),
    "topk_indices": engine.topk(x.flatten(1), 5).indices.numpy().tolist(),
    "layer_norm": F.layer_norm(x, (8,)).numpy().tolist(),
    "rms_norm": F.rms_norm(x, (8,)).numpy().tolist(),
    "gelu": F.gelu(x).numpy().tolist(),
    "attention": F.scaled_dot_product_attention(q, q, q, is_causal=True).numpy().tolist(),
    "index": x[:, [2, 0], ::3].numpy().tolist(),
    "bf16": x.to(engine.bfloat16).numpy().tolist(),
}
"""


def test_ops_in_pyodide_match_native(dev_server, session_factory):
    """wasm32 differs (32-bit intp, no BLAS): the same ops must give the same numbers."""
    from tests.web.pyodide_probe import evaluate_natively
    native = evaluate_natively(OPS_PROBE)
    s = session_factory(dev_server.url)
    s.open()
    browser = s.run(OPS_PROBE)
    assert set(browser) == set(native)
    assert browser["topk_indices"] == native["topk_indices"]
    for key in native:
        b, n = browser[key], native[key]
        np.testing.assert_allclose(np.array(b, dtype=float), np.array(n, dtype=float), rtol=1e-5, atol=1e-5,
                                   err_msg=key)
