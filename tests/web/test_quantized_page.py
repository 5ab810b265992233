"""Quantized linear and embedding in headless Chromium on every backend (numpy, simd, webgpu on
SwiftShader): the native checks (tests/quant_checks.py) run in the page's worker, one page load
for the module and one Python call per backend; and the bench page's quantized-linear section."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests import quant_checks
from tests.web.conftest import Session

# JSON has no Infinity: a failed check comes back as 1e300 (still > 1)
CALL = ("\n_result = run({device!r})\n"
        "{{**_result, 'errors': {{k: min(v, 1e300) for k, v in _result['errors'].items()}}}}")


@pytest.fixture(scope="module")
def worker(browser, dev_server):
    s = Session(browser, dev_server.url)
    s.open("index.html?backend=numpy")
    yield s
    s.close()


@pytest.mark.parametrize("device", ["numpy", "simd", "webgpu"])
def test_quantized_linear_and_embedding_in_chromium(worker, device):
    source = Path(quant_checks.__file__).read_text() + CALL.format(device=device)
    result = worker.run(source)
    assert result["device"] == device
    if device == "webgpu":
        assert "swiftshader" in result["adapter"], result["adapter"]
    failed = {name: ratio for name, ratio in result["errors"].items() if not ratio <= 1.0}
    assert not failed, failed                      # each value: worst error / stated tolerance
    assert len(result["errors"]) == 12 * len(quant_checks.TYPES)
    assert worker.console_errors == []


def test_bench_page_quantized_linear_section(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open("bench.html?repeat=1&gemm=0&ops=0&effnet=0&minilm=0", ready=False)
    page.wait_for_function("document.body.dataset.done === 'true'", timeout=400_000)
    results = json.loads(page.text_content("[data-testid=bench-results]"))
    assert "error" not in results, results
    q = results["qlinear"]
    assert q["model"] == "qlinear" and q["devices"] == ["numpy", "simd", "webgpu"] and "table" not in q
    assert q["types"] == ["f32", "q4_0", "q4_1", "q8_0", "q4_k", "q6_k"] and q["rows"] == [1, 37]
    assert "swiftshader" in q["adapters"]["webgpu"], q["adapters"]
    timed = {(c["device"], c["type"]) for c in q["cases"]}
    for device in q["devices"]:                    # every backend, every type its kernels take
        types = ["f32"] if device in q["skipped"] else q["types"]
        assert {(device, t) for t in types} <= timed, device
    for c in q["cases"]:
        assert all(math.isfinite(c[k]) and c[k] > 0 for k in ("ms", "gbps", "gflops", "vs_f32")), c
    table = page.text_content("[data-testid=qlinear-table]")
    assert "GB/s" in table and "1536 -> 576" in table and "q6_k" in table
    assert page.text_content("#qlinear-status") == "done" and page.is_visible("#qlinear-card")
    assert s.console_errors == []
    assert q["skipped"] == {} and q["failed"] == [], (q["skipped"], q["failed"])   # every backend, every type
