// A bare Pyodide start, the yardstick for the site's own: in a worker, loadPyodide() from this
// site's pyodide/ folder, then loadPackage("numpy") and `import numpy`, and nothing else (no
// snapshot, no early fetches, no compiled archive beyond what the runtime's own files carry).
// Posts {ok, timings: {pyodide_ms, numpy_ms, import_ms, total_ms}} once numpy is imported; its
// times count from this worker's creation, like the site worker's (web/worker.js).
"use strict";

const BASE = new URL(".", self.location).href;
importScripts(BASE + "pyodide/pyodide.js");

(async () => {
  let t = performance.now();
  const timings = { worker_start_ms: t };
  const pyodide = await loadPyodide({ indexURL: BASE + "pyodide/" });
  timings.pyodide_ms = performance.now() - t;
  t = performance.now();
  await pyodide.loadPackage("numpy", { messageCallback: () => {} });
  timings.numpy_ms = performance.now() - t;
  t = performance.now();
  pyodide.runPython("import numpy");
  timings.import_ms = performance.now() - t;
  timings.total_ms = performance.now();
  self.postMessage({ ok: true, timings });
})().catch((err) => self.postMessage({ ok: false, error: String((err && err.message) || err) }));
