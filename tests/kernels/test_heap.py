"""The simd backend in Pyodide on the kernel pool (engine/backends/simd/heap.py): under Node.js,
Pyodide with the relaxed side module and web/kernel-pool.js on the threaded build (2 threads),
connected through web/kernel-bridge.js as the browser worker connects them. Every pooled export
gives the side module's bits, weights are copied once and leave with their array, and a captured
step replays its pool calls as prepared descriptors with the same bits (tests/kernels/heap_checks.py).
A call that fails in the bridge is a KernelFault, and a heap that cannot grow sends calls and a
captured step to the side module, with the same bits.
A pool whose module is missing leaves the side module on one thread, with the reason.

Skips with the reason when clang-19 or node is missing, except under CI (tests/helpers.need)."""
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import need_wasm_compiler
from tests.kernels.test_wasm import pyodide_dir  # noqa: F401 - the fixture
from wasm_kernels import build

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "kernels" / "pool_run.mjs"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    need_wasm_compiler()
    out = tmp_path_factory.mktemp("pool-kernels")
    return build.build_wasm(out, True), build.build_wasm_threads(out)


def _run(pyodide_dir, side, threads_wasm, script, threads=2):  # noqa: F811
    r = subprocess.run(["node", "--experimental-wasm-relaxed-simd", str(RUNNER), str(pyodide_dir), str(ROOT),
                        str(side), str(threads_wasm), str(threads), str(script)],
                       check=False, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_pooled_ops_equal_the_side_module(pyodide_dir, kernels):  # noqa: F811
    result = _run(pyodide_dir, *kernels, ROOT / "tests" / "kernels" / "heap_checks.py")
    assert result["threads"] == 2 and result["reason"] is None
    assert result["checks"] >= 40 and result["mismatches"] == []
    assert result["resident_copied"] >= 1 and result["evicted"]
    assert result["replayed"] and result["graph_same"] and result["graph_kinds"] == ["PoolProgram"]
    assert result["fault"] and result["fault"].startswith("the kernel pool failed: ")    # a KernelFault
    assert result["fault_threads"] == 1 and result["fault_same"]
    assert result["full_same"], result                       # a heap that cannot grow: one thread, same bits
    assert re.match(r"\w+: the kernel pool.s memory \(\d+ bytes\) cannot grow for \d+ more", result["full_message"])
    assert result["full_step_message"].startswith("a captured step's program: the kernel pool's memory")


def test_missing_pool_module_leaves_one_thread_with_the_reason(pyodide_dir, kernels, tmp_path):  # noqa: F811
    script = tmp_path / "no_pool.py"
    script.write_text("import json\njson.dumps({'bridge': KERNEL_BRIDGE is None, 'reason': POOL_REASON})\n")
    result = _run(pyodide_dir, kernels[0], tmp_path / "missing.wasm", script)
    assert result["bridge"] and "missing.wasm" in result["reason"]


def test_a_captured_decode_step_runs_whole_on_the_pool_with_the_side_modules_bits(pyodide_dir, kernels):  # noqa: F811
    result = _run(pyodide_dir, *kernels, ROOT / "tests" / "kernels" / "heap_program_checks.py")
    assert result["threads"] == 2
    assert result["kinds"] == ["PoolProgram"] and "pool" in result["segments"], (result["unplaced"], result["kinds"][:12])
    assert result["same"], (result["ids"], result["want_ids"])
    assert result["one_thread_same"] and result["switched_same"] and result["grown_same"]
    assert result["mirrored_caches"] > 0 and result["mirrors_left"] == 0      # dropped with their caches
    assert result["pass_kinds"] == ["PoolProgram"] and result["pass_same"]
