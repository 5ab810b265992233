// The browser benchmark: cold-start stages, bytes fetched, per-op times and MNIST and
// EfficientNet inference per backend (webgpu with its adapter's name; SwiftShader is a CPU
// emulation of a GPU, reported as such), and all-MiniLM-L6-v2 at 1x128 and 8x128 with the
// tokenizer's throughput, and quantized linear layers (GGML types against float32, per backend;
// engine/bench/quant.py, as `python -m engine bench qlinear`). Writes one JSON object into
// [data-testid=bench-results] when done.
// ?repeat=N, ?gemm=0, ?ops=0, ?effnet=0, ?minilm=0, ?qlinear=0 trim the run; ?gemm_max=512: only the
// GEMMs of at most 512**3 multiply-adds; ?effnet=simd,numpy
// (or ?minilm=...) runs that section on those backends only; ?qlinear=full runs the CLI's whole
// set (with the 576->49152 output head) instead of its quick set. ?llm=1 adds SmolLM2 chat
// (engine/bench/llm.py: the 37-token prompt, greedy, ?tokens=N new ones, default 128) on simd, or
// ?llm=simd,webgpu on those: prefill/decode tokens/s, first token, the wasm heap; with ?peer=1 (and
// `python build.py --peers`) the same case on llama.cpp in WebAssembly in this page, for the ratios.
// ?speech=1 (or ?speech=simd,webgpu) adds Whisper's real-time factor on the 28 s speech sample (benchSpeech).
// ?startup=N (1: 3 rounds) compares the site's start with a bare Pyodide start (bare-start.js) in this
// page, N rounds alternating which goes first (benchStartup). Each section's wall time goes into sections_ms.
import { EngineClient } from "./engine-client.js";

const params = new URLSearchParams(location.search);
const repeat = Number(params.get("repeat")) || 20;
const out = document.getElementById("bench-results");
const status = document.getElementById("bench-status");

// The cold start's breakdown: which visit this is ("navigate": a first visit when the caches are
// empty; "reload"), whether the service worker answered, and per stage the worker's time, requests
// and bytes (over the wire, as sent, as stored), plus the page's own files.
function coldStart(info, worker, totalMs) {
  const entries = performance.getEntriesByType("resource").concat(performance.getEntriesByType("navigation"));
  const sum = (key) => entries.reduce((n, e) => n + (e[key] || 0), 0);
  const page = { requests: entries.length, network_requests: entries.filter((e) => e.transferSize > 0).length,
                 transfer_bytes: sum("transferSize"), body_bytes: sum("encodedBodySize"),
                 decoded_bytes: sum("decodedBodySize") };
  const stages = {};
  for (const [name, counts] of Object.entries(worker.stages)) {
    const ms = info.timings[`${name}_ms`];
    stages[name] = ms === undefined ? counts : { ms: round(ms), ...counts };
  }
  return {
    visit: performance.getEntriesByType("navigation")[0]?.type,
    service_worker: navigator.serviceWorker?.controller != null,
    runtime: info.runtime,                    // Pyodide started in full or from the memory snapshot
    total_ms: round(totalMs),
    transfer_bytes: page.transfer_bytes + worker.transfer_bytes,
    stages, page,
  };
}

async function main() {
  const start = performance.now();
  const client = new EngineClient();
  const state = await client.init(params.get("backend") || "auto");
  if (state.status !== "ready") throw new Error(state.error);
  const info = state.info;
  const readyMs = performance.now() - start;
  const workerDownloads = await client.call("resources");     // what the worker fetched to get here
  const results = {
    user_agent: navigator.userAgent,
    cross_origin_isolated: self.crossOriginIsolated === true,
    cold_start_ms: { ...roundAll(info.timings), total: round(readyMs) },
    cold_start: coldStart(info, workerDownloads, readyMs),
    weights: info.weights,
    worker_downloads: workerDownloads,
    kernels: info.kernels,
    adapter: info.adapter,
    devices: info.devices,
    mnist: {},
    effnet: {},
  };
  results.sections_ms = {};
  const section = async (name, run) => {          // each section's wall time, for the reader
    const t = performance.now();
    await run();
    results.sections_ms[name] = round(performance.now() - t);
  };
  // first, while nothing else has run in this page since its own start
  if (params.has("startup") && params.get("startup") !== "0") await section("startup", async () => {
    results.startup = await benchStartup(Number(params.get("startup")) > 1 ? Number(params.get("startup")) : 3);
  });
  const quick = Math.max(3, Math.round(repeat / 4));
  if (params.get("gemm") !== "0") await section("gemm", async () => {
    const largest = Number(params.get("gemm_max")) || null;
    results.gemm = (await client.python("bench_gemm", quick, largest)).cases;
  });
  if (params.get("ops") !== "0") await section("ops", async () => {
    results.ops = (await client.python("bench_ops", quick)).cases;
  });
  if (params.get("qlinear") !== "0") await section("qlinear", async () => {
    results.qlinear = await benchQlinear(client, params.get("qlinear") === "full");
  });
  await section("mnist", async () => {
    for (const device of info.devices) {
      await client.setBackend(device);
      results.mnist[device] = await client.python("bench_digit", repeat);
    }
  });
  if (params.get("effnet") !== "0") await section("effnet", async () => {
    const t = performance.now();
    const loaded = await client.loadTask("image-classification");
    results.effnet_load = { ms: round(performance.now() - t), weights: loaded.weights };
    for (const device of devicesFor("effnet", info.devices)) {
      await client.setBackend(device);
      results.effnet[device] = await client.python("bench_image", quick);
    }
  });
  if (params.get("minilm") !== "0") await section("minilm", async () => {
    const t = performance.now();
    const loaded = await client.loadTask("sentence-embedding");
    results.minilm_load = { ms: round(performance.now() - t), weights: loaded.weights };
    results.minilm = {};
    for (const device of devicesFor("minilm", info.devices)) {
      await client.setBackend(device);
      results.minilm[device] = await client.python("bench_text", quick);
    }
  });
  if (params.has("llm") && params.get("llm") !== "0") await section("llm", () => benchLlm(client, results));
  if (params.has("speech") && params.get("speech") !== "0") await section("speech", () => benchSpeech(client, results));
  return results;
}

// The speech section: each Whisper model (?speech_models=, default tiny.en and base) on each backend
// (?speech=simd,webgpu; 1: simd) transcribes the site's 28 s speech sample: real-time factor, the
// encoder's and the decoder's seconds, tokens/s and the worker's heap (engine/bench/speech.py, as
// `python -m engine bench whisper`), shown in its card. ?speech_seconds=300: the sample repeated to 5
// minutes (the heap a long recording takes); ?speech_repeat=0: one run, not one untimed then one timed;
// ?speech_profile=1: the time per kernel too.
async function benchSpeech(client, results) {
  const devices = devicesFor("speech", ["simd"]);
  const models = (params.get("speech_models") || "whisper-tiny.en,whisper-base").split(",");
  const card = document.getElementById("speech-card");
  const cardStatus = document.getElementById("speech-status");
  card.hidden = false;
  const reply = await fetch("samples/speech/gettysburg-en.wav");
  if (!reply.ok) throw new Error(`samples/speech/gettysburg-en.wav: HTTP ${reply.status}`);
  const audio = new Uint8Array(await reply.arrayBuffer());
  results.speech = {};
  const lines = [`${"model".padEnd(16)} ${"backend".padEnd(8)} ${"seconds".padStart(8)} ${"RTF".padStart(7)} ` +
                 `${"encoder".padStart(8)} ${"decoder".padStart(8)} ${"tokens".padStart(6)} ${"tok/s".padStart(6)}  heap`];
  for (const model of models) {
    results.speech[model] = {};
    for (const device of devices) {
      cardStatus.textContent = `loading ${model} on ${device}`;
      await client.setBackend(device);
      const t = performance.now();
      await client.python("speech_model", model);
      const loadMs = round(performance.now() - t);
      cardStatus.textContent = `running ${model} on ${device}`;
      const r = results.speech[model][device] = { load_ms: loadMs, ...(await client.python("bench_speech", audio, params.has("speech_repeat") ? Number(params.get("speech_repeat")) : 1,
                                                         params.get("speech_profile") === "1",
                                                         Number(params.get("speech_seconds")) || 0)) };
      lines.push(`${model.padEnd(16)} ${device.padEnd(8)} ${r.seconds.toFixed(2).padStart(8)} ` +
                 `${r.real_time_factor.toFixed(3).padStart(7)} ${r.encode_s.toFixed(2).padStart(8)} ` +
                 `${r.decode_s.toFixed(2).padStart(8)} ${String(r.tokens).padStart(6)} ${r.decode_tok_s.toFixed(1).padStart(6)}  ` +
                 `${(r.heap_bytes / 2 ** 20).toFixed(0)} MiB`);
      if (r.profile) lines.push(...r.profile);
      document.getElementById("speech-table").textContent = lines.join("\n");
    }
  }
  cardStatus.textContent = "done";
}

// The start-up section: this site's start (a new worker.js booted by a new client, to ready)
// against a bare Pyodide start (bare-start.js: loadPyodide(), loadPackage("numpy"), `import numpy`),
// each from its worker's creation, `rounds` times, alternating which goes first; medians and the
// ratio. Both start as a reload would: the runtime's files are in the HTTP cache after this page's
// own start, and the site's worker finds the memory snapshot (waited for here: a first start takes
// it after its answer). A first visit needs a fresh browser profile for each start, which a page
// cannot make: scripts/startup_bench.py does that over a real host.
async function benchStartup(rounds) {
  const snapshot = await waitForSnapshot(60_000);
  const runs = { bare: [], site: [] };
  for (let i = 0; i < rounds; i++) {
    for (const which of i % 2 ? ["site", "bare"] : ["bare", "site"]) {
      runs[which].push(await (which === "bare" ? bareStart() : siteStart()));
    }
  }
  const median = (list) => {
    const sorted = list.map((r) => r.ms).sort((a, b) => a - b);
    const mid = sorted.length >> 1;
    return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  };
  const bare = median(runs.bare), site = median(runs.site);
  return { rounds, snapshot_stored: snapshot, bare_ms: round(bare), site_ms: round(site),
           ratio: Math.round((site / bare) * 100) / 100, runs };
}

function bareStart() {
  return new Promise((resolve, reject) => {
    const t = performance.now();
    const worker = new Worker("bare-start.js");
    worker.onmessage = (event) => {
      const ms = performance.now() - t;
      worker.terminate();
      if (event.data.ok) resolve({ ms: round(ms), stages: roundAll(event.data.timings) });
      else reject(new Error(`bare start: ${event.data.error}`));
    };
    worker.onerror = (event) => { worker.terminate(); reject(new Error(`bare start: ${event.message}`)); };
  });
}

async function siteStart() {
  const t = performance.now();
  const client = new EngineClient();
  const state = await client.init(params.get("backend") || "auto");
  const ms = performance.now() - t;
  client.worker.terminate();
  if (state.status !== "ready") throw new Error(`site start: ${state.error}`);
  return { ms: round(ms), start: state.info.runtime.start, stages: roundAll(state.info.timings) };
}

// whether the worker's memory snapshot is stored (within `ms`)
async function waitForSnapshot(ms) {
  for (const end = performance.now() + ms; performance.now() < end;) {
    const cache = await caches.open("engine-pyodide-snapshot").catch(() => null);
    if (!cache) return false;
    if ((await cache.keys()).length) return true;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return false;
}

// The chat section: SmolLM2 loaded straight onto the first backend asked for (moved there from
// the GPU it would keep a second copy), then prefill/decode tokens/s per backend, shown in its card.
async function benchLlm(client, results) {
  const devices = devicesFor("llm", ["simd"]);
  const tokens = Number(params.get("tokens")) || 128;
  const card = document.getElementById("llm-card");
  const cardStatus = document.getElementById("llm-status");
  card.hidden = false;
  cardStatus.textContent = "loading";
  await client.setBackend(devices[0]);
  const t = performance.now();
  const loaded = await client.loadTask("text-generation");
  results.llm_load = { ms: round(performance.now() - t), weights: loaded.weights };
  results.llm = {};
  for (const device of devices) {
    cardStatus.textContent = `running on ${device}`;
    await client.setBackend(device);
    results.llm[device] = await client.python("bench_llm", tokens, 1);
  }
  let peer = PEER_NOTES;
  if (params.get("peer") === "1") {
    cardStatus.textContent = "running the peer";
    peer = results.llm_peer = await benchPeer(results.llm[devices[0]].prompt, tokens);
  }
  const row = (name, r) => `${name.padEnd(10)} ${r.prefill_tok_s.toFixed(1).padStart(9)} ${r.decode_tok_s.toFixed(1).padStart(9)} ` +
    `${r.ttft_s === undefined ? "" : (r.ttft_s * 1e3).toFixed(0).padStart(9) + " ms"}`;
  const lines = [`${tokens} new tokens after the ${results.llm[devices[0]].prompt_tokens}-token chat prompt, greedy (tokens/s)`,
                 `${"".padEnd(10)} ${"prefill".padStart(9)} ${"decode".padStart(9)} ${"1st token".padStart(12)}  heap, vs the peer`];
  for (const device of devices) {
    const r = results.llm[device];
    lines.push(`${row(device, r)} ${(r.heap_bytes / 2 ** 20).toFixed(0).padStart(6)} MiB  decode ` +
               `${(r.decode_tok_s / peer.decode_tok_s).toFixed(2)}x, prefill ${(r.prefill_tok_s / peer.prefill_tok_s).toFixed(2)}x`);
  }
  lines.push(`${row("llama.cpp", peer)}    ${peer.source}`);
  document.getElementById("llm-table").textContent = lines.join("\n");
  cardStatus.textContent = "done";
}

// The peer on the same case in this page: llama.cpp in WebAssembly (npm @wllama/wllama, built into
// dist/peers/ by `python build.py --peers`), one thread, no GPU, the same GGUF from this site, the
// same prompt text, greedy, end of sequence ignored; one untimed run first, as for ours. Its own
// timings (llama.cpp's prompt and predicted tokens per second).
async function benchPeer(prompt, tokens) {
  const base = new URL("peers/wllama/", location.href);
  const { Wllama } = await import(new URL("index.js", base).href);
  const quiet = { debug() {}, log() {}, info() {}, warn: console.warn, error: console.error };
  const wllama = new Wllama({ default: new URL("wllama.wasm", base).href }, { logger: quiet, suppressNativeLog: true });
  const manifest = await (await fetch("models/SmolLM2-135M-Instruct/manifest.json")).json();
  if (manifest.gguf.parts.length !== 1) throw new Error("the peer needs the GGUF served whole (build without --max-shard-kb)");
  const t = performance.now();
  await wllama.loadModelFromUrl(new URL(`models/SmolLM2-135M-Instruct/${manifest.gguf.file}`, location.href).href,
                                { n_threads: 1, n_gpu_layers: 0, n_ctx: 512, useCache: false });
  const load_ms = round(performance.now() - t);
  const runs = [];
  for (let i = 0; i < 2; i++) {
    const started = performance.now();
    const r = await wllama.createCompletion({ prompt, max_tokens: tokens, temperature: 0, ignore_eos: true,
                                              cache_prompt: false });
    runs.push({ ...r.timings, wall_ms: performance.now() - started, text: r.choices[0].text });
  }
  const threads = wllama.getNumThreads();
  await wllama.exit();
  const [first, timed] = runs;
  return {
    source: `@wllama/wllama ${WLLAMA_VERSION}, ${threads} thread, this run`, load_ms, threads,
    prompt_tokens: timed.prompt_n, new_tokens: timed.predicted_n, prefill_tok_s: round(timed.prompt_per_second),
    decode_tok_s: round(timed.predicted_per_second), ttft_s: undefined, answer_start: timed.text.slice(0, 60),
    first_run: { prefill_tok_s: round(first.prompt_per_second), decode_tok_s: round(first.predicted_per_second) },
  };
}

// Without ?peer=1: llama.cpp in WebAssembly on the same GGUF and case, as measured on a 2-core
// x86-64 VM on 2026-11-23 with ?peer=1, not in this run.
const WLLAMA_VERSION = "3.8.1";
const PEER_NOTES = { prefill_tok_s: 19, decode_tok_s: 12.3, source: `@wllama/wllama ${WLLAMA_VERSION}, measured 2026-11-23 (not this run)` };

// The quantized-linear section: its table in the page's card, its numbers (less the table) in the results.
async function benchQlinear(client, full) {
  const card = document.getElementById("qlinear-card");
  const cardStatus = document.getElementById("qlinear-status");
  card.hidden = false;
  cardStatus.textContent = "running";
  const { table, ...result } = await client.python("bench_qlinear", Math.max(3, Math.round(repeat / 4)), full);
  document.getElementById("qlinear-table").textContent = table;
  cardStatus.textContent = "done";
  return result;
}

// ?effnet=, ?minilm=, ?llm=: "1" (or absent) runs the section on its default backends, a
// comma-separated list on those
function devicesFor(name, fallback) {
  const value = params.get(name);
  return value && value !== "1" ? value.split(",") : fallback;
}

const round = (x) => Math.round(x * 10) / 10;
const roundAll = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, round(v)]));

main().then((results) => {
  out.textContent = JSON.stringify(results, null, 2);
  status.textContent = "done";
  document.body.dataset.done = "true";
}).catch((err) => {
  out.textContent = JSON.stringify({ error: String(err.message || err) });
  status.textContent = "failed";
  document.body.dataset.done = "true";
});
