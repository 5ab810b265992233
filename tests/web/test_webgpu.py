"""The webgpu backend in headless Chromium, on SwiftShader (a CPU emulation of a GPU, which the
page never picks by itself; these tests ask for it with ?backend=webgpu)."""
from __future__ import annotations

import numpy as np

from tests.web.conftest import Session
from tests.web.test_image_card import browser_top5
from tests.web.test_page import PREDICTION, draw
from tests.webgpu import shader_checks

WEBGPU = "index.html?backend=webgpu"


def test_every_shader_matches_numpy_in_chromium(dev_server, session_factory):
    s = session_factory(dev_server.url)
    s.open(WEBGPU)
    source = shader_checks.__file__
    result = s.run(open(source).read() + "\nrun()")
    assert "swiftshader" in result["adapter"], result["adapter"]
    failed = {name: ratio for name, ratio in result["errors"].items() if not ratio <= 1.0}
    assert not failed, failed
    assert len(result["errors"]) > 100
    assert s.console_errors == []


def test_auto_never_picks_the_software_adapter(dev_server, session_factory):
    page = session_factory(dev_server.url).open()
    options = page.eval_on_selector_all("[data-testid=backend-select] option", "els => els.map(e => e.value)")
    assert "webgpu" in options                                          # there, when asked for
    assert page.input_value("[data-testid=backend-select]") == "simd"
    assert page.text_content("[data-testid=backend-adapter]") == "GPU: google swiftshader (software, CPU emulation)"


def test_draw_digits_on_webgpu(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open(WEBGPU)
    assert page.input_value("[data-testid=backend-select]") == "webgpu"
    for digit in ["1", "7"]:
        page.click("[data-testid=digit-clear]")
        draw(page, digit)
        page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '{digit}'", timeout=60_000)
        assert page.text_content("[data-testid=digit-backend]") == "webgpu"
    # the same input gives the numpy backend's logits; the forward pass reads back only its output
    result = s.run(
        "import numpy as np\nfrom engine.web.worker import pipeline\nfrom engine.backends import webgpu\n"
        "pipe = pipeline()\nx = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)\n"
        "gpu = pipe.logits(x)\nstats = dict(webgpu.device().stats)\ngpu = pipe.logits(x)\n"
        "after = dict(webgpu.device().stats)\n"
        "[gpu.tolist(), pipe.to('numpy').logits(x).tolist(), after['reads'] - stats['reads'],"
        " after['read_bytes'] - stats['read_bytes']]")
    gpu_logits, numpy_logits, reads, read_bytes = np.array(result[0]), np.array(result[1]), result[2], result[3]
    assert np.abs(gpu_logits - numpy_logits).max() <= 1e-4
    assert (reads, read_bytes) == (1, 3 * 10 * 4)
    assert s.foreign_requests() == [] and s.console_errors == []


def test_photo_on_webgpu_equals_numpy(dev_server, session_factory, site):
    s = session_factory(dev_server.url)
    page = s.open(WEBGPU + "#photo")
    page.set_input_files("[data-testid=image-input]", str(site / "samples" / "coffee.png"))
    top = browser_top5(page)
    assert page.text_content("#image-backend") == "webgpu"
    logits = s.run(
        "import numpy as np\nfrom engine.web.worker import pipeline\n"
        "pipe = pipeline('image-classification')\n"
        "x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)\n"
        "[pipe.logits(x).tolist(), pipe.to('numpy').logits(x).tolist()]")
    gpu_logits, numpy_logits = np.array(logits[0]), np.array(logits[1])
    assert np.abs(gpu_logits - numpy_logits).max() <= 2e-3 * np.abs(numpy_logits).max()
    assert (np.argsort(-gpu_logits)[:, :5] == np.argsort(-numpy_logits)[:, :5]).all()
    page.evaluate("document.querySelector('[data-testid=image-top5]').innerHTML = ''")
    page.select_option("[data-testid=backend-select]", "numpy")
    page.wait_for_function("location.search.includes('backend=numpy')")
    page.set_input_files("[data-testid=image-input]", str(site / "samples" / "coffee.png"))
    assert [t[1] for t in browser_top5(page)] == [t[1] for t in top]      # the same top 5 on both
    assert s.console_errors == []


def test_a_lost_device_falls_back_and_the_page_keeps_working(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open(WEBGPU)
    draw(page, "7")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '7'", timeout=60_000)
    s.run("from engine.backends import webgpu\nwebgpu.device().destroy()")       # as a driver reset would
    page.click("[data-testid=digit-clear]")
    draw(page, "3")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3'", timeout=60_000)
    assert page.text_content("[data-testid=digit-backend]") == "simd"
    assert page.input_value("[data-testid=backend-select]") == "simd"
    note = page.text_content("#backend-note")
    assert page.is_visible("#backend-note") and "was lost" in note and "continuing on simd" in note, note
    options = page.eval_on_selector_all("[data-testid=backend-select] option", "els => els.map(e => e.value)")
    assert "webgpu" not in options


def test_no_adapter_says_why_and_runs_on_simd(dev_server, browser_without_gpu):
    s = Session(browser_without_gpu, dev_server.url)
    try:
        page = s.open(WEBGPU)
        assert page.input_value("[data-testid=backend-select]") == "simd"
        note = page.text_content("#backend-note")
        assert "backend 'webgpu' is not available here" in note and "no adapter" in note, note
        assert page.text_content("[data-testid=backend-adapter]").startswith("no WebGPU: ")
        draw(page, "7")
        page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '7'", timeout=15_000)
        assert s.console_errors == []
    finally:
        s.close()


def test_decode_steps_on_webgpu_submit_once_and_read_16_bytes(dev_server, session_factory):
    """SmolLM2 in the page's worker on SwiftShader: tokens chosen on the device (engine.sampler),
    greedy and sampled with a seed, equal simd's; once its step graphs are captured, a decode step
    is one submission with 16 bytes read back and no kernel recorded from Python."""
    from tests.web.test_chat_card import PARIS, ask
    s = session_factory(dev_server.url)
    page = s.open(WEBGPU + "#chat")
    assert ask(page, "What is the capital of France?") == PARIS
    result = s.run("""
from engine.generation import GenerationConfig
from engine.web import worker
pipe = worker.pipeline("text-generation")
ids = pipe.prompt_ids([{"role": "user", "content": "Name three colours."}])
configs = [GenerationConfig(max_new_tokens=12), GenerationConfig(max_new_tokens=12, temperature=0.8, top_k=40,
                                                                 top_p=0.9, repetition_penalty=1.1, seed=7)]
out = {}
for device in ("webgpu", "simd"):
    pipe.to(device)
    for n, config in enumerate(configs):
        if device == "webgpu":
            pipe.generator.reset()
            list(pipe.generator.tokens(ids, config))         # captures the steps' graphs
        pipe.generator.reset()
        out[device, n] = list(pipe.generator.tokens(ids, config))
        if device == "webgpu":
            out["stats", n] = {k: pipe.generator.stats.get(k) for k in
                               ("selected_on_device", "submits_per_step", "read_bytes_per_step", "recorded_per_step",
                                "calls_per_step")}
pipe.to("webgpu")
[out["webgpu", 0] == out["simd", 0], out["webgpu", 1] == out["simd", 1], out["stats", 0], out["stats", 1],
 len(out["webgpu", 0])]
""")
    greedy_same, sampled_same, greedy, sampled, count = result
    assert greedy_same and sampled_same and count == 12
    for stats in (greedy, sampled):
        # one bridge crossing a step: a step's submission goes with the wait on the step before,
        # all but the first's; the last step's wait goes alone, and an attention window's edge
        # writes the next graph's two inputs (11 steps: 12 crossings, 14 across an edge; apart, a
        # submission and a wait would be 22)
        assert stats.pop("calls_per_step") <= 14 / 11, stats
        assert stats == {"selected_on_device": True, "submits_per_step": 1, "read_bytes_per_step": 16,
                         "recorded_per_step": 0}, stats
    assert s.console_errors == []
