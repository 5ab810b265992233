// Compile the Python modules the page's worker imports at start (NumPy's and the engine's) to
// bytecode inside Pyodide itself (its CPython, so its magic number), for
// dist/pyodide/bytecode.zip (buildtools/bytecode.py says why).
//
//   node buildtools/bytecode.mjs DIST_PYODIDE_DIR OUT.zip MODULE PACKAGE...
//
// The packages are installed from DIST_PYODIDE_DIR's own lock and wheels, exactly as the page's
// worker installs them, then MODULE is imported: every module that import loaded from
// site-packages is compiled, so each compiled file matches the source the page will have.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [indexDir, out, module, ...packages] = process.argv.slice(2);
const { loadPyodide } = await import(pathToFileURL(path.join(indexDir, "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL: path.resolve(indexDir) + "/", stdout: () => {}, stderr: console.error });
await pyodide.loadPackage(packages, { messageCallback: () => {}, errorCallback: console.error });
pyodide.globals.set("MODULE", module);
const zipped = pyodide.runPython(`
import importlib, importlib.util, io, os, py_compile, sys, zipfile
importlib.import_module(MODULE)
site = next(p for p in sys.path if p.endswith("site-packages"))
sources = sorted({m.__file__ for m in list(sys.modules.values())
                  if (getattr(m, "__file__", None) or "").startswith(site + "/") and m.__file__.endswith(".py")})
buffer = io.BytesIO()
with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
    for source in sources:
        cached = importlib.util.cache_from_source(source)
        # checked against the source at import: a stale file is recompiled, never run
        py_compile.compile(source, cached, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        info = zipfile.ZipInfo(os.path.relpath(cached, site), date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(cached, "rb") as f:
            z.writestr(info, f.read(), compresslevel=9)
buffer.getvalue()
`);
fs.writeFileSync(out, zipped.toJs());
