"""The wasm SIMD kernels in headless Chromium: both builds against NumPy, models on simd vs numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.web.conftest import ROOT

KERNELS = ROOT / "tests" / "kernels"

# The native kernel checks (tests/kernels/wasm_checks.py), run in the page's worker. The MNIST
# check there loads the repo's weights; in the page it uses the worker's own loaded model.
BROWSER_CHECKS = '''
import sys, types
for name in ("tests", "tests.kernels"):
    sys.modules.setdefault(name, types.ModuleType(name))
for name, source in MODULES.items():                  # in order: program_cases imports reference
    module = types.ModuleType(f"tests.kernels.{name}")
    sys.modules[module.__name__] = module
    exec(compile(source, f"{name}.py", "exec"), module.__dict__)
checks = {"__name__": "wasm_checks"}
exec(compile(CHECKS, "wasm_checks.py", "exec"), checks)

def mnist_check(rng, errors):
    from engine.web.worker import pipeline
    pipe, batch = pipeline(), rng.random((5, 1, 28, 28), dtype=np.float32)
    expected = pipe.to("numpy").logits(batch)
    actual = pipe.to("simd").logits(batch)
    errors["mnist logits (atol 1e-4)"] = checks["worst"](actual, expected, 1e-4)

checks["mnist_check"] = mnist_check
checks["main"]("")
'''


def browser_checks() -> str:
    checks = (KERNELS / "wasm_checks.py").read_text().rsplit("\nmain(", 1)[0]      # not its own call
    modules = {name: (KERNELS / f"{name}.py").read_text() for name in ("reference", "program_cases")}
    return (f"MODULES = {json.dumps(modules)}\n"
            f"CHECKS = {json.dumps(checks)}\nimport numpy as np\n" + BROWSER_CHECKS)


@pytest.mark.parametrize("flavour", ["simd", "relaxed"])
def test_kernels_match_numpy_in_chromium(dev_server, session_factory, flavour):
    s = session_factory(dev_server.url)
    page = s.open(f"index.html?kernels={flavour}")
    assert (page.text_content("#backend-info") ==
            f"wasm kernels: {'relaxed SIMD' if flavour == 'relaxed' else 'SIMD128'}")
    result = json.loads(s.run(browser_checks()))
    assert result["platform"] == "emscripten" and result["devices"] == ["numpy", "simd", "webgpu"]
    failed = {k: v for k, v in result["errors"].items() if not v <= 1.0}
    assert not failed, failed                      # each value: worst error / stated tolerance
    assert len(result["errors"]) > 30
    reason = s.run("import engine.threads\nengine.threads.describe()")
    assert ("relaxed-SIMD build" in reason) == (flavour == "simd")    # the pool's bits are relaxed SIMD's


def test_auto_picks_relaxed_simd_when_the_browser_has_it(dev_server, session_factory):
    page = session_factory(dev_server.url).open()
    assert page.input_value("[data-testid=backend-select]") == "simd"
    assert page.text_content("#backend-info") == "wasm kernels: relaxed SIMD"


def test_efficientnet_on_simd_equals_numpy_in_chromium(dev_server, session_factory, site):
    s = session_factory(dev_server.url)
    page = s.open("index.html#photo")
    page.click("[data-sample='coffee.png']")
    page.wait_for_function("document.querySelectorAll('[data-testid=image-top5] li').length === 5",
                           timeout=180_000)
    logits = s.run(
        "import numpy as np\nfrom engine.web.worker import pipeline\n"
        "pipe = pipeline('image-classification')\n"
        "x = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)\n"
        "[pipe.to('numpy').logits(x).tolist(), pipe.to('simd').logits(x).tolist()]")
    numpy_logits, simd_logits = np.array(logits[0]), np.array(logits[1])
    assert np.abs(numpy_logits - simd_logits).max() <= 1e-3, np.abs(numpy_logits - simd_logits).max()
    assert (np.argsort(-numpy_logits, 1)[:, :5] == np.argsort(-simd_logits, 1)[:, :5]).all()


def test_switching_backend_in_the_page(dev_server, session_factory):
    from tests.web.test_page import PREDICTION, draw
    s = session_factory(dev_server.url)
    page = s.open()
    page.select_option("[data-testid=backend-select]", "numpy")
    page.wait_for_function("location.search.includes('backend=numpy')")
    draw(page, "7")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '7'", timeout=15_000)
    page.wait_for_function("document.querySelector('[data-testid=digit-backend]').textContent === 'numpy'")
    page.select_option("[data-testid=backend-select]", "simd")
    page.click("[data-testid=digit-clear]")
    draw(page, "3")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3'", timeout=15_000)
    assert page.text_content("[data-testid=digit-backend]") == "simd"
