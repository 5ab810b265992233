"""Shared test helpers: one comparison with tolerances stated per dtype, and the one rule that
decides whether a missing dependency skips a test or fails it (need, need_import)."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import os
import shutil
import tempfile
from types import ModuleType

import numpy as np
import pytest

import engine

# (rtol, atol) by the dtype the engine computed in. Half types compute in float32,
# so their results are compared as float32 against torch fed the same values.
TOLERANCES = {
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-12),
    "exact": (0.0, 0.0),          # integers and bools
}


def to_numpy(x) -> np.ndarray:
    try:
        import torch
        if isinstance(x, torch.Tensor):
            x = x.detach()
            return (x.float() if x.dtype in (torch.bfloat16, torch.float16) else x).numpy()
    except ImportError:
        pass
    return x.numpy() if isinstance(x, engine.Tensor) else np.asarray(x)


def assert_close(actual, expected, *, rtol=None, atol=None, dtype=None):
    a, e = to_numpy(actual), to_numpy(expected)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    kind = dtype or ("exact" if a.dtype.kind in "biu" and e.dtype.kind in "biu" else
                     "float64" if a.dtype == np.float64 else "float32")
    r, t = TOLERANCES[kind]
    r, t = (r if rtol is None else rtol), (t if atol is None else atol)
    if kind == "exact":
        np.testing.assert_array_equal(a, e)
    else:
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=r, atol=t, equal_nan=True)


# --- Skip or fail: the one rule ---------------------------------------------------------------------
# A test whose dependency (a reference package such as torch, a tool such as chromium or nginx, a
# WebGPU adapter) is missing skips and says why on a developer's machine, and fails under CI, which
# must provide everything (scripts/test.sh installs it all). Every such check in the suite goes
# through need() or need_import(); nothing else calls pytest.skip/importorskip for a dependency.
OUR_PACKAGES = ("engine", "models", "buildtools", "wasm_kernels", "tests")
_TRUE = ("1", "true", "yes", "on")


def under_ci() -> bool:
    """Whether the suite runs under CI: the CI variable set to a true value ("true", "1", "yes",
    "on", any case), as CI services and .ci/run set it. "false", "0" or empty mean a developer."""
    return os.environ.get("CI", "").strip().lower() in _TRUE


def need(condition: bool, why: str) -> None:
    """Go on when `condition` holds; otherwise skip saying why, or fail under CI.
    Works in a test, a fixture, and at a module's top level (it then skips or fails the module)."""
    __tracebackhide__ = True                 # reports name the caller's line, not this one
    if condition:
        return
    if under_ci():
        pytest.fail(f"{why} (under CI every dependency must be present: scripts/test.sh installs them)",
                    pytrace=False)
    pytest.skip(why, allow_module_level=True)


def need_wasm_compiler() -> None:
    """The WebAssembly kernels' compiler (clang-19), under need()'s rule when it is missing."""
    __tracebackhide__ = True
    from wasm_kernels import build
    try:
        build.find_wasm_compiler()
    except build.BuildError as e:
        need(False, str(e))


def need_import(name: str, why: str = "") -> ModuleType:
    """Import a third-party module a test needs (e.g. `torch = need_import("torch")`), under need()'s
    rule when it is not installed. Our own packages are imported normally, never through this: an
    import error in our code is a failure, not a missing dependency."""
    __tracebackhide__ = True
    if name.partition(".")[0] in OUR_PACKAGES:
        raise ValueError(f"need_import({name!r}): import the project's own modules normally")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        need(False, f"{why or 'the test needs ' + repr(name)}: {e} (pip install -e .[test])")


def range_reply(data: bytes, start: int | None, end: int | None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a host that honours Range, for bytes [start, end) of `data`
    (the whole file when start is None): what in-memory fake transports answer."""
    if start is None:
        return 200, {}, data
    if start >= len(data):
        return 416, {"content-range": f"bytes */{len(data)}"}, b""
    last = min(end, len(data)) - 1
    return 206, {"content-range": f"bytes {start}-{last}/{len(data)}"}, data[start:last + 1]


@contextlib.contextmanager
def build_lock():
    """Held while a test builds a site from the shared download cache (.cache/): under pytest-xdist
    the workers build one at a time, so two builds never fill the same cache entry at once."""
    with open(os.path.join(tempfile.gettempdir(), f"engine-build-{run_key()}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


SHARED_SITE_PREFIX = "engine-site-shared-"      # + the run's key (tests/conftest.py removes it at the end)


def run_key() -> str:
    """The same for every xdist worker of one run (and for a run without xdist, its process)."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"


def shared_site() -> tuple:
    """(dist, build log lines) of the one full build of this checkout a test run makes, with the bench
    page's peers: the build tests read it, the browser tests serve it. The first worker to take the
    lock builds it (python build.py --peers, from the download cache in .cache/); the others reuse it.
    It lives in a world-readable temporary folder, not pytest's tmp_path (mode 0700), so nginx's
    workers (user "nobody" when started as root) can serve it."""
    import subprocess
    import sys
    from pathlib import Path
    scratch = Path(tempfile.gettempdir()) / f"{SHARED_SITE_PREFIX}{run_key()}"
    scratch.mkdir(mode=0o755, exist_ok=True)
    os.chmod(scratch, 0o755)
    log = scratch / "build.log"
    with build_lock():
        if not log.exists():
            root = Path(__file__).resolve().parents[1]
            r = subprocess.run([sys.executable, "build.py", "--peers", "--out", str(scratch / "dist")], cwd=root,
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
            log.write_text(r.stdout)
    return scratch / "dist", log.read_text().splitlines()


LINKED_BYTES = 16 << 20


def copy_site(site, target) -> None:
    """A copy of a built site in which files of LINKED_BYTES and more are hard links to the original
    (the LLMs' GGUF parts, the runtime's largest files): a test may damage the copy's smaller files
    in place, and replaces (unlinks first) any larger one it changes. A full copy is 2.4 GB, and a
    run that made a few of them filled CI's disk."""
    def link_or_copy(source, destination):
        if os.path.getsize(source) >= LINKED_BYTES:
            try:
                os.link(source, destination)
                return destination
            except OSError:                     # another filesystem: a plain copy
                pass
        return shutil.copy2(source, destination)
    shutil.copytree(site, target, symlinks=True, copy_function=link_or_copy)


def write_weight_formats(folder, arrays: dict) -> None:
    """The same tensors as model.safetensors, model.gguf (with a ~150 kB token list in its header,
    so that reading it takes more than one request) and model.pth, in `folder`."""
    import gguf
    import safetensors.numpy
    import torch
    safetensors.numpy.save_file(arrays, os.path.join(folder, "model.safetensors"))
    writer = gguf.GGUFWriter(os.path.join(folder, "model.gguf"), arch="test")
    writer.add_array("tokenizer.ggml.tokens", [f"token{i:06d}" for i in range(10_000)])
    for name, array in arrays.items():
        writer.add_tensor(name, array)
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file,
                 writer.close):
        step()
    torch.save({name: torch.from_numpy(array) for name, array in arrays.items()}, os.path.join(folder, "model.pth"))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
