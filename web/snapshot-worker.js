// Takes Pyodide's memory snapshot for the next visits, in a worker of its own, once the inference
// worker (worker.js) has answered: a snapshot needs a Pyodide started in its recording mode
// (`_makeSnapshot`, slower) and 21 MB copied and hashed, none of which the first visit's own start
// needs. Started by worker.js with {cache, url} (where the snapshot is kept); starts Pyodide,
// imports the standard-library modules the inference worker's start imports (so a restored start
// finds them already imported), takes the snapshot before any package loads (a package's wasm
// libraries live outside the snapshotted memory), stores it with its SHA-256 and answers
// {ok, bytes} or {ok: false, error}. Pyodide 0.27's snapshot options are experimental.
"use strict";

const BASE = new URL(".", self.location).href;
importScripts(BASE + "pyodide/pyodide.js");

const IMPORTS = ["__future__", "base64", "calendar", "csv", "ctypes", "dataclasses", "datetime",
  "email.message", "email.utils", "hashlib", "importlib.metadata", "json", "mmap", "numbers", "pickle",
  "platform", "tarfile"];

// Pyodide's wasm from the service worker's copy when the network cannot give it (web/sw-core.js
// leaves it to the network while the browser is online).
const WASM = BASE + "pyodide/pyodide.asm.wasm";
const realFetch = self.fetch.bind(self);
self.fetch = async (input, init) => {
  const url = new URL(input instanceof Request ? input.url : String(input), BASE).href;
  if (url !== WASM) return realFetch(input, init);
  const response = await realFetch(input, init).catch(() => null);
  if (response && response.ok) return response;
  return (await caches.match(WASM).catch(() => null)) || response || realFetch(input, init);
};

const hex = (buffer) => Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");

async function take({ cache: name, url }) {
  const py = await loadPyodide({ indexURL: BASE + "pyodide/", _makeSnapshot: true });
  py.runPython(`import importlib
for name in ${JSON.stringify(IMPORTS)}:
    try:
        importlib.import_module(name)
    except ImportError:
        pass`);
  const snapshot = py.makeMemorySnapshot();
  const digest = hex(await crypto.subtle.digest("SHA-256", snapshot));
  const cache = await caches.open(name);
  await cache.put(url, new Response(snapshot, {
    headers: { "Content-Type": "application/octet-stream", "X-Sha256": digest } }));
  return snapshot.length;
}

self.onmessage = (event) => take(event.data).then(
  (bytes) => self.postMessage({ ok: true, bytes }),
  (err) => self.postMessage({ ok: false, error: String((err && err.message) || err) }));
