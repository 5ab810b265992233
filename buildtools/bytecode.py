"""The worker's start-up Python, compiled: dist/pyodide/bytecode.zip and python_stdlib.zip.

Pyodide's standard library, its NumPy wheel and the engine's wheel ship Python sources only, so
every start of the page's worker compiled each module it imported before running it: Pyodide's
own start and the standard-library modules (~150), then NumPy's and the engine's (~130). In
Node on this machine, Pyodide's start went from 1.55 s to 0.62 s with its modules compiled, and
importing engine.web.worker from 0.54 s to 0.25 s. Both archives hold bytecode compiled by
Pyodide's own CPython under Node (buildtools/bytecode.mjs) from the very files the site ships,
as checked-hash .pyc files (PEP 552): the import system runs one only when the hash of the source
beside it is the one it was compiled from, so a stale file costs a recompilation, never stale code.

- bytecode.zip: NumPy's and the engine's start-up modules in `__pycache__` form. The worker
  fetches it beside the runtime and unpacks it into site-packages before the first import. It
  reads every member whole (CRC-checked) and checks every name before writing any: a damaged
  archive is refused whole and the sources are compiled as before (a .pyc cut short would fail
  its import).
- python_stdlib.zip: Pyodide's archive, every member as it was, with a .pyc beside each
  start-up module's source (zipimport prefers it, and checks it against that source). Tracebacks
  still show the source lines.

Both archives, and the wheels, are stored uncompressed: the host sends them brotli- or
gzip-encoded (buildtools/compress.py), and brotli over a whole archive shrinks it far more than
deflate per member (the standard library with its .pyc: 3.8 MB deflated, 2.7 MB as brotli), so a
first visit still moves under 10 MB. A host that sends neither encoding would move them as
stored: `python build.py --plain-host` keeps them deflated for such a host.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from .runtime import STDLIB
from .steps import BuildError

HERE = Path(__file__).resolve().parent
NAME = "bytecode.zip"
PACKAGES = ("numpy", "engine")               # loaded by the worker before it imports...
# ...its entry module (which imports every task module, engine/tasks/, for their entry points),
# then what its start imports on first use: the backends (the device probe), the kernel pool's side
# (engine.backends.simd.heap, engine.threads: the worker registers one, or says why not) and the loader (the
# first model's load). start_modules() adds what the registry decides: its model files and the
# first card's task. tests/web/test_offline.py checks that a start imports nothing else from
# site-packages.
GENERAL = ("engine.web.worker",
           "engine.backends.numpy.backend", "engine.backends.simd.backend", "engine.backends.webgpu.backend",
           "engine.backends.webgpu.browser", "engine.backends.simd.heap", "engine.threads",
           "engine.site.browser", "engine.site.folders", "engine.site.remote", "engine.site.manifest")


def start_modules() -> tuple[str, ...]:
    """The modules bytecode.mjs imports, so compiles, for the worker's start: GENERAL, every module
    of the model package (the worker's first answer describes every entry: finding the model
    files imports them all, helpers too),
    and the task modules of the first card's task (engine.tasks.page_listing), whose model the
    start loads. Other tasks' models, tokenizers and generation load, from source, when their
    card opens."""
    from engine import registry, tasks
    first = tasks.page_listing()[0]["tasks"][0]
    entry = registry.for_task(first)
    first_task = [tasks.module_for(entry.pipeline).__name__]
    own = tasks.modules().get(first.replace("-", "_"))       # the task's own commands and entry points
    if own is not None and own.__name__ not in first_task:
        first_task.append(own.__name__)
    return (*GENERAL, *registry.package_modules(), *first_task)


def __getattr__(name: str):
    if name == "MODULES":                    # the build's record of its inputs reads it
        return start_modules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def write_bytecode(out: Path, pyodide_dir: Path, stdlib: bytes, stored: bool = True) -> None:
    """out/pyodide/bytecode.zip and out/pyodide/python_stdlib.zip from the runtime and wheels in
    `pyodide_dir` (dist/pyodide/) and Pyodide's standard library archive `stdlib`; their members
    `stored` uncompressed, else deflated (for a host that sends no encoded copies)."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        raise BuildError("node is not installed (it compiles the worker's Python for the site): "
                         "`apt-get install nodejs npm`; ./scripts/serve.sh and ./scripts/test.sh install it")
    folder = out / "pyodide"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        original = Path(tmp) / STDLIB
        original.write_bytes(stdlib)
        r = subprocess.run([node, str(HERE / "bytecode.mjs"), str(pyodide_dir), str(original),
                            str(folder / NAME), str(folder / STDLIB), "stored" if stored else "deflated",
                            ",".join(start_modules()), *PACKAGES],
                           capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not (folder / NAME).is_file() or not (folder / STDLIB).is_file():
        raise BuildError(f"compiling the worker's Python in Pyodide failed: {(r.stderr or r.stdout)[-2000:]}")
