// The inference worker: boots Pyodide + NumPy + the engine wheel, then runs the
// Python in engine/web/worker.py for the page. Messages in: {id, cmd, ...};
// out: {id, ok, result | error}, {type: "progress", stage, loaded, total} and, while a chat
// answer is generated, {type: "piece", id, text}.
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
  [/\/pyodide\/engine-[^/]*\.whl$/, "engine"],
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
self.fetch = async (input, init) => {
  const response = await realFetch(input, init);
  const url = input instanceof Request ? input.url : String(input);
  const match = STAGES.find(([re]) => re.test(new URL(url, BASE).pathname));
  if (!match || !response.ok || !response.body) return response;
  const stage = match[1];
  // an encoded body (the host sent the build's .gz) is counted decoded: its Content-Length is
  // the encoded size, so the file's size is known only when it ends
  const encoded = response.headers.get("Content-Encoding");
  const total = encoded ? 0 : Number(response.headers.get("Content-Length")) || 0;
  let loaded = 0;
  const reader = response.body.getReader();
  const counted = new ReadableStream({
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) { report(stage, url, total || loaded, total || loaded); controller.close(); return; }
      loaded += value.byteLength;
      if (total) report(stage, url, loaded, total);
      controller.enqueue(value);
    },
    cancel(reason) { reader.cancel(reason); },
  });
  return new Response(counted, { status: response.status, statusText: response.statusText,
                                 headers: response.headers });
};

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

async function boot(backend, kernels) {
  let t = performance.now();
  pyodide = await loadPyodide({ indexURL: BASE + "pyodide/" });
  timings.pyodide_ms = performance.now() - t;
  t = performance.now();
  await pyodide.loadPackage("numpy", { messageCallback: () => {} });
  timings.numpy_ms = performance.now() - t;
  t = performance.now();
  await pyodide.loadPackage("engine", { messageCallback: () => {} });
  const flavour = await loadKernels(kernels);
  api = pyodide.pyimport("engine.web.worker");
  exported = new Set(api.EXPORTS.toJs());
  timings.engine_ms = performance.now() - t;
  const registry = JSON.parse(api.tasks());
  const { available: devices, best, unavailable, adapter } = JSON.parse(await api.devices());
  const device = devices.includes(backend) ? backend : best;
  t = performance.now();
  const weights = (loaded, total) =>
    self.postMessage({ type: "progress", stage: "weights", loaded, total });
  const info = JSON.parse(await api.load("digit-classification", device, BASE, weights));
  timings.weights_ms = performance.now() - t;
  return { devices, requested: backend, device: info.device, model: info.model, weights: info.weights, timings,
           unavailable, registry,
           adapter, kernels: flavour, crossOriginIsolated: self.crossOriginIsolated === true };
}

async function loadTask(task) {
  const stage = `weights:${task}`;
  const weights = (loaded, total) => self.postMessage({ type: "progress", stage, loaded, total });
  const t = performance.now();
  const info = JSON.parse(await api.load(task, null, BASE, weights));
  timings[`${task}_ms`] = performance.now() - t;
  return { ...info, ms: performance.now() - t };
}

// Commands handled here; every other command is an entry point of engine/web/worker.py
// (its EXPORTS), called with the message's `args` and answering a JSON string. The tasks
// themselves come from the registry (engine/registry.py), never from a list kept here.
const COMMANDS = {
  init: (m) => boot(m.backend, m.kernels),
  // the answer streams back as {type: "piece", id, text} messages before the reply
  chat: async (m) => JSON.parse(await api.chat(JSON.stringify(m.messages), JSON.stringify(m.options || {}),
                                               (text) => self.postMessage({ type: "piece", id: m.id, text }))),
  loadTask: (m) => loadTask(m.task),
  resources: () => resourceBytes(),
};

async function callPython(m) {
  if (!exported.has(m.cmd)) throw new Error(`unknown command ${m.cmd}`);
  return JSON.parse(await api[m.cmd](...(m.args || [])));
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
