// Run a Python file in Pyodide under Node.js with the WebAssembly kernels loaded the way the
// browser worker will load them: the .wasm bytes written to /lib/engine_kernels.so, then
// ctypes.CDLL through engine.backends.simd. The repository is mounted read-only at /repo.
//
//   node tests/kernels/pyodide_run.mjs PYODIDE_DIR REPO KERNELS.wasm SCRIPT.py [ARG]
//
// KERNELS.wasm "-": none written (as in a Pyodide page that is not ours; the script fetches them).
// Prints what the script's last expression evaluates to (a JSON string). Relaxed-SIMD builds
// need `node --experimental-wasm-relaxed-simd` on Node 20 (V8 11.3); Chromium has it on.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [indexDir, repo, wasm, script, arg = ""] = process.argv.slice(2);
const { loadPyodide } = await import(pathToFileURL(path.join(indexDir, "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL: path.resolve(indexDir) + "/", stdout: () => {}, stderr: console.error });
await pyodide.loadPackage("numpy", { messageCallback: () => {} });
pyodide.FS.mkdirTree("/repo");
pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: path.resolve(repo) }, "/repo");
if (wasm !== "-") pyodide.FS.writeFile("/lib/engine_kernels.so", fs.readFileSync(wasm));
pyodide.globals.set("SCRIPT_ARG", arg);
const result = await pyodide.runPythonAsync(fs.readFileSync(script, "utf8"));
process.stdout.write(String(result) + "\n");
