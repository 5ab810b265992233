// tests/kernels/pyodide_run.mjs with the kernel pool beside it: Pyodide under Node.js with the
// side module loaded as the browser worker loads it, plus web/kernel-pool.js started on the
// threaded build (helpers are worker_threads) and web/kernel-bridge.js connected; the script
// finds the bridge in the global KERNEL_BRIDGE (null when the pool failed: POOL_REASON says why).
//
//   node tests/kernels/pool_run.mjs PYODIDE_DIR REPO SIDE.wasm THREADS.wasm THREADS SCRIPT.py [ARG]
//
// Prints what the script's last expression evaluates to (a JSON string).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(import.meta.url);
const [indexDir, repo, side, threadsWasm, threads, script, arg = ""] = process.argv.slice(2);
const { loadPyodide } = await import(pathToFileURL(path.join(indexDir, "pyodide.mjs")).href);
const pyodide = await loadPyodide({ indexURL: path.resolve(indexDir) + "/", stdout: () => {}, stderr: console.error });
await pyodide.loadPackage("numpy", { messageCallback: () => {} });
pyodide.FS.mkdirTree("/repo");
pyodide.FS.mount(pyodide.FS.filesystems.NODEFS, { root: path.resolve(repo) }, "/repo");
pyodide.FS.writeFile("/lib/engine_kernels.so", fs.readFileSync(side));

const web = path.join(path.resolve(repo), "web");
const EngineKernelPool = require(path.join(web, "kernel-pool.js"));
const EngineKernelBridge = require(path.join(web, "kernel-bridge.js"));
let bridge = null, reason = null, pool = null;
try {
  pool = await EngineKernelPool.start({ bytes: fs.readFileSync(threadsWasm), threads: Number(threads),
                                        helperUrl: path.join(web, "kernel-helper.js"), timeoutMs: 10000 });
  bridge = EngineKernelBridge.connect(pool, pyodide);
  reason = pool.reason;
} catch (err) {
  reason = String((err && err.message) || err);
}
pyodide.globals.set("KERNEL_BRIDGE", bridge);
pyodide.globals.set("POOL_REASON", reason);
pyodide.globals.set("SCRIPT_ARG", arg);
let status = 0;
try {
  const result = await pyodide.runPythonAsync(fs.readFileSync(script, "utf8"));
  process.stdout.write(String(result) + "\n");
} catch (err) {                                     // the Python traceback, not Pyodide's source
  process.stderr.write(String((err && err.message) || err).slice(-4000) + "\n");
  status = 1;
}
if (pool) pool.close();
process.exit(status);
