// The inference worker: boots Pyodide + NumPy + the engine wheel, then runs the
// Python in engine/web/worker.py for the page. Messages in: {id, cmd, ...};
// out: {id, ok, result | error}, {type: "progress", stage, loaded, total} and, while a chat
// answer or a streaming call's result is produced, {type: "piece", id, text}.
"use strict";

const BASE = new URL(".", self.location).href;
importScripts(BASE + "pyodide/pyodide.js");

let pyodide = null;
let api = null;
let exported = new Set();
const timings = {};

// Report download progress per stage by watching the runtime's own fetches.
const STAGES = [
  [/\/pyodide\/(pyodide\.asm\.wasm|python_stdlib\.zip)$/, "pyodide"],
  [/\/pyodide\/numpy-[^/]*\.whl$/, "numpy"],
  [/\/pyodide\/(engine-[^/]*\.whl|bytecode\.zip)$/, "engine"],
  [/\/kernels\/[^/]*\.wasm$/, "engine"],
];
const progress = {};
function report(stage, url, loaded, total) {
  const p = (progress[stage] ||= {});
  p[url] = [loaded, total];
  let sumLoaded = 0, sumTotal = 0;
  for (const [l, t] of Object.values(p)) { sumLoaded += l; sumTotal += t; }
  self.postMessage({ type: "progress", stage, loaded: sumLoaded, total: sumTotal });
}
const realFetch = self.fetch.bind(self);

// Fetches started before anyone asks: Pyodide would fetch its lock file, then the NumPy wheel
// once it has started (2-4 s of CPU), then the engine wheel. Here the lock file is fetched at
// once, the two wheels as soon as it names them, all while Pyodide's wasm downloads and compiles;
// the first fetch of the same URL with the same integrity takes the response. A wheel is fetched
// with the integrity Pyodide asks for (the lock's sha256), so the browser refuses a damaged one.
const early = new Map();
const wheels = {};                                   // package name -> {url, file, sha256}, from the lock
function fetchEarly(url, integrity = "") {
  const response = realFetch(url, integrity ? { integrity } : {});
  response.catch(() => {});                          // a failure is for the fetch that takes it
  early.set(url, { response, integrity });
  return response;
}
const sri = (hex) => "sha256-" + btoa(String.fromCharCode(...hex.match(/../g).map((b) => parseInt(b, 16))));
const lockFile = fetchEarly(BASE + "pyodide/pyodide-lock.json")
  .then((response) => response.clone().json())
  .then((lock) => {
    for (const name of ["numpy", "engine"]) {
      const entry = lock.packages[name];
      if (!entry || !entry.file_name || !/^[0-9a-f]{64}$/.test(entry.sha256)) continue;
      const url = new URL(entry.file_name, BASE + "pyodide/").href;
      wheels[name] = { url, file: `pyodide/${entry.file_name}`, sha256: entry.sha256 };
      fetchEarly(url, sri(entry.sha256));
    }
  })
  .catch(() => {});                                  // Pyodide fetches them itself, and says why

self.fetch = async (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input), BASE).href;
  const started = early.get(url);
  early.delete(url);
  const same = started && started.integrity === ((init && init.integrity) || "");
  const response = await (same ? started.response : realFetch(input, init).then((r) => keptIfFailed(url, r),
                                                                                (err) => keptIfFailed(url, null, err)));
  const match = STAGES.find(([re]) => re.test(new URL(url, BASE).pathname));
  if (!match || !response.ok || !response.body) return response;
  // Pyodide gets the host's own response and the progress reads a clone: V8 keeps the compiled
  // code of a wasm module streamed from a real response (by its URL) and reuses it on the next
  // visit, which a Response made here would not allow (a reload's NumPy stage: 0.50 -> 0.27 s)
  countProgress(match[1], url, response.clone());
  return response;
};

// Pyodide's wasm, which the service worker leaves to the network while the browser is online
// (web/sw-core.js: the HTTP cache's copy carries V8's optimized code), from the service worker's
// copy when the network cannot give it (the host gone).
const RUNTIME_WASM = BASE + "pyodide/pyodide.asm.wasm";
async function keptIfFailed(url, response, err = null) {
  if (url !== RUNTIME_WASM || (response && response.ok)) {
    if (response) return response;
    throw err;
  }
  const copy = await caches.match(url).catch(() => null);
  if (copy) return copy;
  if (response) return response;
  throw err;
}

async function countProgress(stage, url, response) {
  // an encoded body (the host sent the build's .gz) is counted decoded: its Content-Length is
  // the encoded size, so the file's size is known only when it ends
  const encoded = response.headers.get("Content-Encoding");
  const total = encoded ? 0 : Number(response.headers.get("Content-Length")) || 0;
  let loaded = 0;
  try {
    for (const reader = response.body.getReader();;) {
      const { done, value } = await reader.read();
      if (done) break;
      loaded += value.byteLength;
      if (total) report(stage, url, loaded, total);
    }
  } catch {
    return;                                          // the runtime's own read says why
  }
  report(stage, url, total || loaded, total || loaded);
}

// The SIMD kernels: the relaxed-SIMD build when this browser validates it, else plain SIMD128.
// `want` ("relaxed" / "simd") forces a flavour (tests check both); none usable: no simd backend.
async function loadKernels(want) {
  const order = want ? [want] : ["relaxed", "simd"];
  for (const flavour of order) {
    const response = await fetch(`${BASE}kernels/engine_kernels.${flavour}.wasm`);
    if (!response.ok) continue;
    const bytes = new Uint8Array(await response.arrayBuffer());
    if (!WebAssembly.validate(bytes)) continue;
    pyodide.FS.writeFile("/lib/engine_kernels.so", bytes);
    return flavour;
  }
  return null;
}

// Pyodide from a memory snapshot: a visit after the first restores the interpreter's memory as
// it stood when Pyodide had started and imported the standard-library modules the start needs,
// instead of starting it again. A first visit starts Pyodide plainly and answers first: the
// snapshot is taken afterwards by a worker of its own (snapshot-worker.js): the recording start it
// needs, its imports and copying and hashing 21 MB would delay the first answer (docs/benchmarks.md,
// "Cold start"). Kept in its own Cache API cache; Pyodide refuses one taken by another Pyodide
// build (its build id), which is then replaced. Pyodide 0.27's snapshot options are experimental
// (`_loadSnapshot`, `_makeSnapshot`).
const SNAPSHOT = { cache: "engine-pyodide-snapshot", url: BASE + "pyodide/memory-snapshot" };
const SNAPSHOT_DELAY_MS = 2000;                     // after the boot's answer, so that the first answers come first
const runtime = { start: null, snapshot_bytes: 0, snapshot_read_ms: 0, snapshot_stored: null, snapshot_error: null,
                  bytecode_bytes: 0, bytecode_error: null };

// The start-up Python (NumPy's and the engine's modules) compiled by the build
// (buildtools/bytecode.py): imported from it, a start skips compiling ~110 modules (~0.3 s of a
// reload, more on a first visit). Fetched at once, beside the runtime. Checked-hash .pyc files:
// one that does not match its source is compiled again, never run stale; without the archive
// (a failed fetch) the sources are compiled as before.
const BYTECODE = BASE + "pyodide/bytecode.zip";
let bytecode = self.fetch(BYTECODE)
  .then(async (response) => (response.ok ? new Uint8Array(await response.arrayBuffer()) : null))
  .catch(() => null);

// Every member is read whole (so its CRC is checked) and named as a __pycache__/*.pyc below
// site-packages before any is written: a damaged archive writes nothing (a .pyc cut short would
// not be recompiled: it would fail the import).
const UNPACK_BYTECODE = `
def _unpack_bytecode(data):
    import io, os, sys, zipfile
    site = next(p for p in sys.path if p.endswith("site-packages"))
    with zipfile.ZipFile(io.BytesIO(data.to_bytes())) as z:       # data: the JS Uint8Array
        files = [(info.filename, z.read(info)) for info in z.infolist()]
    for name, _ in files:
        parts = name.split("/")
        if name.startswith("/") or ".." in parts or parts[-2:-1] != ["__pycache__"] or not name.endswith(".pyc"):
            raise ValueError(f"unexpected member {name[:80]!r}")
    for name, body in files:
        path = os.path.join(site, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(body)
_unpack_bytecode`;

async function unpackBytecode() {
  const archive = await bytecode;
  bytecode = null;                                   // its 3 MB are not kept once unpacked
  if (!archive) return;
  const unpack = pyodide.runPython(UNPACK_BYTECODE);
  try {
    unpack(archive);
    runtime.bytecode_bytes = archive.length;
  } catch (err) {
    runtime.bytecode_error = pythonErrorText(err);
  } finally {
    unpack.destroy();
  }
}

// A package Pyodide could not install is an error naming its file and why, never a later
// "No module named ...". Pyodide reports it through errorCallback and goes on; a wheel whose
// bytes differ from the lock's sha256 only fails its fetch (the browser's integrity check says no
// more than "Failed to fetch"), so the file is fetched once more to tell the two apart.
async function loadPackage(name) {
  const errors = [];
  await pyodide.loadPackage(name, { messageCallback: () => {}, errorCallback: (text) => errors.push(text) });
  if (pyodide.loadedPackages[name]) return;
  await lockFile;
  const wheel = wheels[name];
  let why = errors.filter((text) => !text.startsWith("The following error")).join(" ") || "no reason given";
  if (wheel) {
    try {
      const response = await realFetch(wheel.url, { cache: "no-store" });
      const got = hex(await crypto.subtle.digest("SHA-256", await response.arrayBuffer()));
      if (response.ok && got !== wheel.sha256) {
        why = `its sha256 ${got} differs from pyodide-lock.json's ${wheel.sha256} (a damaged file, or a deploy caught half way)`;
      } else if (!response.ok) {
        why = `HTTP ${response.status}`;
      }
    } catch (err) {
      why = `${why}; fetching it again failed too: ${(err && err.message) || err}`;
    }
    throw new Error(`${wheel.file}: the ${name} package could not be installed: ${why}`);
  }
  throw new Error(`the ${name} package could not be installed: ${why}`);
}

async function snapshotCache() {
  try { return await caches.open(SNAPSHOT.cache); } catch { return null; }   // no Cache API here
}

const hex = (buffer) => Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");

// The stored snapshot's bytes, read and checked while Pyodide loads its script (Pyodide awaits
// them only before it creates its module): rejects when their SHA-256 differs from the one stored
// beside them (reading and hashing: 0.13-0.20 s here), since a damaged snapshot would not fail
// cleanly inside Pyodide's start (a truncated one leaves it waiting forever).
async function checkedSnapshot(stored) {
  const read = performance.now();
  const bytes = new Uint8Array(await stored.arrayBuffer());
  const whole = hex(await crypto.subtle.digest("SHA-256", bytes)) === stored.headers.get("X-Sha256");
  runtime.snapshot_read_ms = performance.now() - read;
  if (!whole) throw new Error("the stored snapshot was damaged");
  return bytes;
}

async function startPyodide() {
  const indexURL = BASE + "pyodide/";
  const cache = await snapshotCache();
  const stored = cache && await cache.match(SNAPSHOT.url).catch(() => null);
  if (stored) {
    const bytes = checkedSnapshot(stored);
    bytes.catch(() => {});                            // a failure is loadPyodide's, below
    try {
      const py = await loadPyodide({ indexURL, _loadSnapshot: bytes });
      Object.assign(runtime, { start: "snapshot", snapshot_bytes: (await bytes).length });
      return py;
    } catch (err) {                                   // damaged, or another Pyodide build's: start afresh
      runtime.snapshot_error = String((err && err.message) || err).split("\n")[0];
      await cache.delete(SNAPSHOT.url).catch(() => {});
    }
  }
  const py = await loadPyodide({ indexURL });
  runtime.start = "full";
  if (cache) runtime.snapshot_stored = "pending";    // taken after the boot (takeSnapshot)
  return py;
}

// The snapshot for the next visits, taken by a worker of its own once this one has answered;
// runtime says how it went (a later `init` returns it).
function takeSnapshot() {
  const taker = new Worker(BASE + "snapshot-worker.js");
  const done = (result) => {
    taker.terminate();
    runtime.snapshot_stored = result.ok;
    if (result.ok) runtime.snapshot_bytes = result.bytes;
    else runtime.snapshot_error = `not stored: ${result.error}`;
  };
  taker.onmessage = (event) => done(event.data);
  taker.onerror = (event) => {
    event.preventDefault();
    done({ ok: false, error: event.message || "its worker failed" });
  };
  taker.postMessage(SNAPSHOT);
}

// The kernels on `threads` threads (the page's wish; 1 when it is not cross-origin isolated): the
// threaded build on a shared memory in this worker and threads - 1 helpers (kernel-pool.js),
// started while Pyodide starts, then handed to the simd backend (engine/backends/simd/heap.py)
// through kernel-bridge.js. Any failure leaves the side module on one thread and says why:
// {requested, used, reason}.
let pool = null;
async function startPool(threads) {
  if (!(threads > 1)) return { pool: null, reason: null };
  if (self.crossOriginIsolated !== true) return { pool: null, reason: "the page is not cross-origin isolated" };
  try {
    importScripts(BASE + "kernel-pool.js", BASE + "kernel-bridge.js");
    const started = await self.EngineKernelPool.start({
      url: `${BASE}kernels/engine_kernels.threads.wasm`, threads, helperUrl: BASE + "kernel-helper.js",
      timeoutMs: 10000,
      onHelperError: (tid, why) => { threadInfo.reason = `helper worker ${tid} stopped: ${why}`; },
    });
    return { pool: started, reason: started.reason };
  } catch (err) {
    return { pool: null, reason: `the kernel pool could not start: ${(err && err.message) || err}` };
  }
}
const threadInfo = { requested: 1, used: 1, reason: null };

// The simd backend's heavy calls on the pool (1 thread and the side module when it did not start).
function usePool({ pool: started, reason }, flavour) {
  threadInfo.reason = reason;
  if (!started) return withoutPool();
  if (!flavour) {
    threadInfo.reason = "the simd kernels are not loaded";
  } else if (flavour !== "relaxed") {               // the pool's build is relaxed SIMD: other bits
    threadInfo.reason = "the kernel pool is the relaxed-SIMD build, and these are the SIMD128 kernels";
  } else if (started.threads > 1) {
    try {
      const bridge = self.EngineKernelBridge.connect(started, pyodide);
      const heap = pyodide.pyimport("engine.backends.simd.heap");
      const library = heap.start(bridge);
      pyodide.pyimport("engine.threads").register(library);     // engine.set_num_threads / get_num_threads
      threadInfo.used = library.threads;
      library.destroy();
      heap.destroy();
      pool = started;
      return;
    } catch (err) {
      threadInfo.reason = `the kernel pool could not be used: ${pythonErrorText(err)}`;
    }
  }
  started.close();
  withoutPool();
}

// engine.threads.describe() in this worker says why it runs on one thread
function withoutPool() {
  if (!threadInfo.reason) return;
  const heap = pyodide.pyimport("engine.backends.simd.heap");
  const threads = pyodide.pyimport("engine.threads");
  threads.register(heap.NoPool(threadInfo.reason));
  threads.destroy();
  heap.destroy();
}

async function boot(backend, kernels, tasks, threads) {
  let t = performance.now();
  timings.worker_start_ms = t;                       // since this worker was created
  threadInfo.requested = Math.max(1, Math.floor(Number(threads) || 1));
  const starting = startPool(threadInfo.requested);
  pyodide = await startPyodide();
  timings.pyodide_ms = performance.now() - t;
  t = performance.now();
  await loadPackage("numpy");
  timings.numpy_ms = performance.now() - t;
  t = performance.now();
  await loadPackage("engine");
  await unpackBytecode();
  const flavour = await loadKernels(kernels);
  const waited = performance.now();
  const started = await starting;
  timings.threads_ms = performance.now() - waited;   // what the pool's start added to the boot
  usePool(started, flavour);
  api = pyodide.pyimport("engine.web.worker");
  exported = new Set(api.EXPORTS.toJs());
  timings.engine_ms = performance.now() - t;
  const registry = JSON.parse(api.tasks());
  t = performance.now();
  const { available: devices, best, unavailable, adapter } = JSON.parse(await api.devices());
  timings.devices_ms = performance.now() - t;
  const device = devices.includes(backend) ? backend : best;
  t = performance.now();
  const weights = (loaded, total) =>
    self.postMessage({ type: "progress", stage: "weights", loaded, total });
  // the first model: the opened card's task (`tasks`, the page's cards with it first) that the site
  // serves, else the first card's (the registry in the page's order: engine.tasks.page_listing); other
  // cards load theirs when opened (loadTask)
  const served = new Set(registry.flatMap((model) => model.tasks));
  const task = (tasks || []).find((name) => served.has(name)) || registry[0].tasks[0];
  const info = JSON.parse(await api.load(task, device, BASE, weights));
  timings.weights_ms = performance.now() - t;
  if (runtime.snapshot_stored === "pending") setTimeout(takeSnapshot, SNAPSHOT_DELAY_MS);
  return { devices, requested: backend, device: info.device, task, model: info.model, weights: info.weights, timings,
           heap_bytes: info.heap_bytes,
           runtime,
           unavailable, registry,
           adapter, kernels: flavour, crossOriginIsolated: self.crossOriginIsolated === true,
           threads: { ...threadInfo } };
}

// `model`: another registry model of the task, or a GGUF's URL (null: the registry's first); the
// worker drops the task's model loaded before, so one model of a task is in memory at a time
async function loadTask(task, model = null) {
  const stage = `weights:${task}`;
  const weights = (loaded, total) => self.postMessage({ type: "progress", stage, loaded, total });
  const t = performance.now();
  const info = JSON.parse(await api.load(task, null, BASE, weights, model));
  timings[`${task}_ms`] = performance.now() - t;
  return { ...info, ms: performance.now() - t };
}

// Commands handled here; every other command is an entry point of engine/web/worker.py
// (its EXPORTS), called with the message's `args` and answering a JSON string. The tasks
// themselves come from the registry (engine/registry.py), never from a list kept here.
const COMMANDS = {
  init: (m) => boot(m.backend, m.kernels, m.tasks, m.threads),
  // the answer streams back as {type: "piece", id, text} messages before the reply
  chat: async (m) => JSON.parse(await api.chat(JSON.stringify(m.messages), JSON.stringify(m.options || {}),
                                               (text) => self.postMessage({ type: "piece", id: m.id, text }))),
  loadTask: (m) => loadTask(m.task, m.model || null),
  resources: () => resourceBytes(),
};

// A message with `stream: true` gives the entry point one more argument, a function that posts
// each piece it is called with to the page ({type: "piece", id, text}) before the reply.
async function callPython(m) {
  if (!exported.has(m.cmd)) throw new Error(`unknown command ${m.cmd}`);
  const args = [...(m.args || [])];
  if (m.stream) args.push((text) => self.postMessage({ type: "piece", id: m.id, text }));
  return JSON.parse(await api[m.cmd](...args));
}

// What this worker fetched (its own resource timing; the page has its own), in all and per stage
// (the STAGES above, and "weights" for models/): requests, bytes over the wire (transferSize:
// 0 when the service worker or the HTTP cache answered), as sent (encodedBodySize: gzipped where
// the host sent the build's .gz) and as stored (decodedBodySize).
function resourceBytes() {
  const entries = performance.getEntriesByType("resource");
  const total = (list) => ({
    requests: list.length,
    network_requests: list.filter((e) => e.transferSize > 0).length,
    transfer_bytes: list.reduce((n, e) => n + (e.transferSize || 0), 0),
    body_bytes: list.reduce((n, e) => n + (e.encodedBodySize || 0), 0),
    decoded_bytes: list.reduce((n, e) => n + (e.decodedBodySize || 0), 0),
  });
  const stageOf = (url) => {
    const path = new URL(url).pathname;
    const match = STAGES.find(([re]) => re.test(path));
    return match ? match[1] : path.includes("/models/") ? "weights" : "other";
  };
  const stages = {};
  for (const e of entries) (stages[stageOf(e.name)] ||= []).push(e);
  return { ...total(entries), stages: Object.fromEntries(Object.entries(stages).map(([k, v]) => [k, total(v)])) };
}

self.onmessage = async (event) => {
  const message = event.data;
  try {
    if (!["init", "resources"].includes(message.cmd) && !api) throw new Error("the engine is not loaded yet");
    const command = COMMANDS[message.cmd] || callPython;
    const result = await command(message);
    self.postMessage({ id: message.id, ok: true, result });
  } catch (err) {
    // Python errors arrive as PythonError whose message is the traceback; keep its last line(s)
    self.postMessage({ id: message.id, ok: false, error: pythonErrorText(err) });
  }
};

function pythonErrorText(err) {
  const text = String((err && err.message) || err);
  if (err && err.type) {                         // a pyodide.ffi.PythonError
    const lines = text.trim().split("\n");
    const at = lines.findIndex((l) => l.startsWith(err.type));
    return (at >= 0 ? lines.slice(at) : lines.slice(-1)).join("\n");
  }
  return text;
}
