"""The WebAssembly builds: both flavours compile with clang-19, export the ABI and import
nothing but memory and the relocation globals (no libc call slipped in); then, in Pyodide
under Node.js, they load with ctypes.CDLL exactly as the browser worker will load them and
pass tests/kernels/wasm_checks.py (the native tolerances; MNIST logits within 1e-4).

Skips with the reason when clang-19 or node is missing, except under CI (tests/helpers.need)."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import need
from wasm_kernels import build

ROOT = Path(__file__).resolve().parents[2]
FLAVOURS = {"simd": False, "relaxed": True}
ALLOWED_IMPORTS = {("env", "memory", "memory"), ("env", "__stack_pointer", "global"),
                   ("env", "__memory_base", "global"), ("env", "__table_base", "global")}


def _missing(what: str):
    need(False, what)


@pytest.fixture(scope="module")
def wasm_files(tmp_path_factory):
    try:
        build.find_wasm_compiler()
    except build.BuildError as e:
        _missing(str(e))
    out = tmp_path_factory.mktemp("kernels")
    return {name: build.build_wasm(out, relaxed) for name, relaxed in FLAVOURS.items()}


@pytest.mark.slow
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_wasm_build_exports_the_abi(wasm_files, flavour):
    path = wasm_files[flavour]
    assert path.name == f"engine_kernels.{flavour}.wasm"
    exports, imports = build.read_wasm_interface(path)
    assert set(build.EXPORTS) <= {name for name, kind in exports.items() if kind == "function"}
    assert set(imports) <= ALLOWED_IMPORTS, set(imports) - ALLOWED_IMPORTS
    data = path.read_bytes()
    assert b"dylink.0" in data                      # an emscripten side module: what dlopen/ctypes loads
    assert (b"relaxed-simd" in data) == (flavour == "relaxed") and b"simd128" in data


@pytest.mark.slow
def test_native_library_is_cached_by_source_hash(tmp_path):
    first = build.build_native(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert build.build_native(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert first.name == build.native_name(build.find_native_compiler())


def test_missing_compiler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("WASM_CC", raising=False)
    with pytest.raises(build.BuildError, match="no C compiler found"):
        build.build_native(tmp_path)
    if not Path("/usr/lib/llvm-19/bin/clang").exists():
        with pytest.raises(build.BuildError, match="clang-19 not found"):
            build.build_wasm(tmp_path, relaxed=False)


@pytest.fixture(scope="module")
def pyodide_dir(tmp_path_factory):
    if shutil.which("node") is None:
        _missing("node is not installed (needed to run Pyodide outside the browser)")
    from buildtools.fetch import npm_pack, pip_download
    from buildtools.runtime import PROVISA, PYODIDE, STDLIB, official_lock, shipped_lock, stdlib_zip, write_pyodide
    out = tmp_path_factory.mktemp("runtime")
    tgz = npm_pack(*PYODIDE)
    write_pyodide(out, tgz, pip_download(*PROVISA))
    (out / "pyodide" / STDLIB).write_bytes(stdlib_zip(tgz))
    (out / "pyodide" / "pyodide-lock.json").write_text(json.dumps(shipped_lock(official_lock(tgz), out / "pyodide")))
    return out / "pyodide"


@pytest.mark.slow
@pytest.mark.parametrize("flavour", FLAVOURS)
def test_kernels_in_pyodide(wasm_files, pyodide_dir, flavour):
    node = ["node"] + (["--experimental-wasm-relaxed-simd"] if flavour == "relaxed" else [])
    run = subprocess.run(node + [str(ROOT / "tests/kernels/pyodide_run.mjs"), str(pyodide_dir), str(ROOT),
                                 str(wasm_files[flavour]), str(ROOT / "tests/kernels/wasm_checks.py")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["platform"] == "emscripten" and result["flavour"] == flavour
    assert "simd" in result["devices"]
    failed = {name: ratio for name, ratio in result["errors"].items() if not ratio <= 1.0}
    assert not failed, failed
    assert len(result["errors"]) > 60
