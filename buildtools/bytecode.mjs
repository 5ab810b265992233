// Compile the Python modules the page's worker imports at start inside Pyodide itself (its
// CPython, so its magic number), for dist/pyodide/ (buildtools/bytecode.py says why):
// - BYTECODE_OUT: NumPy's and the engine's modules, as __pycache__/*.pyc below site-packages;
// - STDLIB_OUT: the standard library archive STDLIB_IN, uncompressed, with a .pyc beside the
//   source of every module a start imports from it (Pyodide's own start included).
//
//   node buildtools/bytecode.mjs DIST_PYODIDE_DIR STDLIB_IN BYTECODE_OUT STDLIB_OUT stored|deflated MODULE,... PACKAGE...
//
// The archives' members are stored uncompressed (for a host that sends them brotli- or
// gzip-encoded), or deflated.
//
// Pyodide starts on STDLIB_IN, the packages are installed from DIST_PYODIDE_DIR's own lock and
// wheels, exactly as the page's worker installs them, then the MODULEs are imported: every module
// loaded on the way is compiled, so each compiled file matches the source the page will have.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [indexDir, stdlibIn, bytecodeOut, stdlibOut, method, modules, ...packages] = process.argv.slice(2);
const { loadPyodide } = await import(pathToFileURL(path.join(indexDir, "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL: path.resolve(indexDir) + "/", stdLibURL: path.resolve(stdlibIn),
                                    stdout: () => {}, stderr: console.error });
await pyodide.loadPackage(packages, { messageCallback: () => {}, errorCallback: console.error });
pyodide.globals.set("MODULES", modules.split(","));
pyodide.globals.set("STORED", method === "stored");
const [bytecode, stdlib] = pyodide.runPython(`
import importlib, sys
for name in MODULES:
    importlib.import_module(name)
# what a start imported (before this script imports its own tools)
files = [m.__file__ for m in list(sys.modules.values()) if (getattr(m, "__file__", None) or "").endswith(".py")]

import importlib.util, io, os, py_compile, zipfile
from importlib._bootstrap_external import _code_to_hash_pyc
site = next(p for p in sys.path if p.endswith("site-packages"))
archive = next(p for p in sys.path if p.endswith(".zip"))            # /lib/python312.zip

def add(z, name, date_time, data):
    info = zipfile.ZipInfo(name, date_time)
    info.compress_type = zipfile.ZIP_STORED if STORED else zipfile.ZIP_DEFLATED
    z.writestr(info, data, compresslevel=9)

# checked-hash .pyc (PEP 552): the import system runs one only when the hash of the source beside
# it is the one it was compiled from, so a stale file is recompiled, never run
buffer = io.BytesIO()
with zipfile.ZipFile(buffer, "w") as z:
    for source in sorted({f for f in files if f.startswith(site + "/")}):
        cached = importlib.util.cache_from_source(source)
        py_compile.compile(source, cached, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        with open(cached, "rb") as f:
            add(z, os.path.relpath(cached, site), (1980, 1, 1, 0, 0, 0), f.read())
bytecode = buffer.getvalue()

# The standard library stays one archive, every member as it was. A module found in it as
# name.pyc and name.py runs the .pyc after checking it against the .py (zipimport), and its code
# names the .py, so tracebacks still show the source lines.
started = {f.removeprefix(archive + "/") for f in files if f.startswith(archive + "/")}
buffer = io.BytesIO()
with zipfile.ZipFile(archive) as original, zipfile.ZipFile(buffer, "w") as z:
    for info in original.infolist():
        data = original.read(info)
        add(z, info.filename, info.date_time, data)
        if info.filename in started:
            code = compile(data, f"{archive}/{info.filename}", "exec", dont_inherit=True)
            add(z, info.filename + "c", info.date_time,
                bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data), checked=True)))
bytecode, buffer.getvalue()
`).toJs();
fs.writeFileSync(bytecodeOut, bytecode);
fs.writeFileSync(stdlibOut, stdlib);
