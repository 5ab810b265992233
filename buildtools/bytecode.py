"""dist/pyodide/bytecode.zip: the worker's start-up Python, compiled, for visits after the first.

Pyodide's NumPy wheel and the engine's ship Python sources only, so each start of the page's
worker compiles every module it imports (NumPy's and the engine's: ~110 files) before running
them: ~0.3 s of a reload (Node, this machine: importing engine.web.worker 0.54 s from source,
0.25 s from this archive plus 0.03 s to unpack it). The archive holds those modules' bytecode in
`__pycache__` form, compiled by Pyodide's own CPython under Node (buildtools/bytecode.mjs) from
the very wheels in dist/pyodide/. Each file is a checked-hash .pyc (PEP 552): the import system
uses it only when its source hash equals that of the source beside it, so a stale archive (an
old build's, from a cache) costs a recompilation, never stale code.

The worker unpacks it when the Cache API already holds it (the service worker keeps it after a
first visit), so a first visit does not download its ~1 MB before the first answer. It reads
every member whole (CRC-checked) and checks every name before writing any: a damaged archive is
refused whole and the sources are compiled as before (a .pyc cut short would fail its import).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .steps import BuildError

HERE = Path(__file__).resolve().parent
NAME = "bytecode.zip"
PACKAGES = ("numpy", "engine")               # loaded by the worker before it imports...
MODULE = "engine.web.worker"                 # ...its entry module


def write_bytecode(out: Path, pyodide_dir: Path) -> None:
    """out/pyodide/bytecode.zip from the runtime and wheels in `pyodide_dir` (dist/pyodide/)."""
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        raise BuildError("node is not installed (it compiles the worker's Python for the site): "
                         "`apt-get install nodejs npm`; ./scripts/serve.sh and ./scripts/test.sh install it")
    target = out / "pyodide" / NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([node, str(HERE / "bytecode.mjs"), str(pyodide_dir), str(target), MODULE, *PACKAGES],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0 or not target.is_file():
        raise BuildError(f"compiling the worker's Python in Pyodide failed: {(r.stderr or r.stdout)[-2000:]}")
