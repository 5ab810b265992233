// The service worker (sw.js, written by the build, sets self.SITE = {version, files} and imports
// this): after a first visit the page, its Python runtime and the models' JSON files come from
// the Cache API, so the site works with no network. Weights are the loader's: it keeps them in
// the Cache API itself (engine/site/browser.py), and their Range requests pass through untouched.
//
// One cache per build ("engine-site-<version>"). A new build is a new service worker: it fills
// its own cache, checking every file against the sha256 the build recorded, and takes over only
// when no page of the old version is open (no skipWaiting), so a page never mixes old and new
// files; activating it deletes the old caches. Only the very first version claims the open page
// at once: that page loaded the same files from the network.
//
// Cross-origin isolation on any host (the coi-serviceworker pattern): the pages and worker scripts
// this worker serves carry COOP/COEP/CORP, so on a host that cannot send them (GitHub Pages and
// the like) a page is isolated, and its workers can share memory (threads). The page this worker
// first claims was loaded without them: index.html reloads it once, if nobody has used it yet. The
// site makes no requests to other origins, so require-corp blocks nothing. Every other response
// (scripts, wasm, archives, weight ranges) is a same-origin subresource, which needs none of these
// headers: it is answered as before, the cache's own response (V8 keeps the code it compiled from
// a script with that entry; a copy made to change its headers would lose it).
"use strict";

const { version, files } = self.SITE;
const PREFIX = "engine-site-";
const CACHE = PREFIX + version;
const BASE = new URL("./", self.location).href;
const RUNTIME_WASM = BASE + "pyodide/pyodide.asm.wasm";
const KEPT = new Map(Object.entries(files).map(([rel, sha256]) => [new URL(rel, BASE).href, sha256]));
const ISOLATION = {
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Embedder-Policy": "require-corp",
  "Cross-Origin-Resource-Policy": "same-origin",
};
const NO_BODY = new Set([101, 204, 205, 304]);

// The response with the isolation headers (a new Response: a fetched one's headers are immutable).
function isolated(response) {
  if (response.type === "opaqueredirect" || response.status === 0) return response;   // a redirect: the browser follows it
  const headers = new Headers(response.headers);
  for (const [name, value] of Object.entries(ISOLATION)) headers.set(name, value);
  const body = NO_BODY.has(response.status) ? null : response.body;
  return new Response(body, { status: response.status, statusText: response.statusText, headers });
}

async function sha256Hex(buffer) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", buffer));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

// One file into the cache, as stored on the host (decoded: the body a page reads), verified.
async function keep(cache, url, sha256) {
  if (await cache.match(url)) return;                 // an install tried again: kept and verified
  const response = await fetch(url, { cache: "no-cache" });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const body = await response.arrayBuffer();
  const got = await sha256Hex(body);
  if (got !== sha256) throw new Error(`${url}: sha256 ${got}, this build's is ${sha256} (a deploy in progress?)`);
  const headers = new Headers(response.headers);
  headers.delete("Content-Encoding");                 // the body kept is the decoded one
  headers.set("Content-Length", String(body.byteLength));
  await cache.put(url, new Response(body, { status: 200, headers }));
}

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await Promise.all([...KEPT].map(([url, sha256]) => keep(cache, url, sha256)));
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    const names = (await caches.keys()).filter((name) => name.startsWith(PREFIX) && name !== CACHE);
    await Promise.all(names.map((name) => caches.delete(name)));
    if (names.length === 0) await self.clients.claim();     // first version: same files as the page
  })());
});

async function fromCache(request, url) {
  const cached = await (await caches.open(CACHE)).match(url);
  return cached || fetch(request);
}

// The models' JSON files: the host's current ones while online, the kept ones offline.
async function networkFirst(request, url) {
  try {
    return await fetch(request);
  } catch (error) {
    const cached = await (await caches.open(CACHE)).match(url);
    if (cached) return cached;
    throw error;
  }
}

// A page (a navigation) or a worker's script: what the isolation headers must come with.
const WORKERS = new Set(["worker", "sharedworker"]);
const isolating = (request) => request.mode === "navigate" || WORKERS.has(request.destination);

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET" || request.headers.has("Range")) return;
  const address = new URL(request.url);
  let url = address.origin + address.pathname;      // ?backend=... and #... name the same file
  if (request.mode === "navigate" && url === BASE) url = BASE + "index.html";
  if (!KEPT.has(url)) {                             // anything else goes to the network as usual,
    if (address.origin === self.location.origin && isolating(request)) {
      event.respondWith(fetch(request).then(isolated));   // a page not kept (the bench page) with the headers
    }
    return;
  }
  // Pyodide's wasm while online is the browser's own fetch: V8 keeps the runtime's optimized code
  // with the HTTP cache's copy, where earlier visits left it, and the copy kept here would start
  // a reload on baseline code (the first reload ~0.8 s of CPU slower). Offline, or when that
  // fetch fails, the workers take the copy kept here themselves (web/worker.js).
  if (url === RUNTIME_WASM && self.navigator.onLine) return;
  const answer = url.startsWith(BASE + "models/") ? networkFirst(request, url) : fromCache(request, url);
  event.respondWith(isolating(request) ? answer.then(isolated) : answer);
});
