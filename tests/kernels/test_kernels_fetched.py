"""The simd kernels in a Pyodide program that is not our page: Pyodide under Node.js, with no
kernels written into its file system, fetches them from a site served by the dev server
(engine.backends.simd.library.ensure_kernels): real fetch, real WebAssembly.validate, real
ctypes load. Node 20 validates relaxed SIMD only with a flag: without it the plain SIMD128 build
is the one taken. Node has no JSPI here, so the blocking first use says which call to await."""
import json
import shutil
import subprocess
import threading

import pytest

from buildtools.devserver import make_server
from tests.kernels.test_wasm import ROOT, pyodide_dir, wasm_files  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def kernel_site(wasm_files, tmp_path_factory):  # noqa: F811
    site = tmp_path_factory.mktemp("site")
    (site / "kernels").mkdir()
    for path in wasm_files.values():
        shutil.copy(path, site / "kernels" / path.name)
    server = make_server(site, isolation=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
@pytest.mark.parametrize("relaxed", [False, True])
def test_kernels_fetched_from_the_site(kernel_site, pyodide_dir, relaxed):  # noqa: F811
    node = ["node"] + (["--experimental-wasm-relaxed-simd"] if relaxed else [])
    run = subprocess.run(node + [str(ROOT / "tests/kernels/pyodide_run.mjs"), str(pyodide_dir), str(ROOT), "-",
                                 str(ROOT / "tests/kernels/kernels_elsewhere_checks.py"), kernel_site],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["platform"] == "emscripten"
    # no site: the reason says what to pass, and the automatic choice warns before taking numpy
    assert "no site is known" in out["no_site"] and "site=URL" in out["no_site"]
    assert out["no_site_best"] == "numpy"
    assert any("running on numpy" in w and "simd: " in w and "site=URL" in w for w in out["no_site_warnings"])
    # failures name the URLs and why; nothing is left behind
    assert "http://127.0.0.1:9/kernels/engine_kernels.relaxed.wasm" in out["down"] and "CORS" in out["down"]
    assert "nothing-here/kernels/engine_kernels.simd.wasm: HTTP 404" in out["missing"]
    assert out["written_after_failures"] is False
    # blocking without JSPI: the awaitable form is named
    assert "await engine.pipeline_async(...)" in out["blocking"]
    # awaited: fetched, validated, loaded; the build this runtime validates
    assert out["ensure"] is None and out["reason_after"] is None
    assert out["flavour"] == ("relaxed" if relaxed else "simd")
    assert out["best"] == "simd"
    assert out["matmul_error"] < 1e-4 and "gemm_f32" in out["kernel_calls"]
    assert out["threads"][0] == 1 and "not cross-origin isolated" in out["threads"][1]
