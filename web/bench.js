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
// ?yolo=1 adds YOLO detection and pose against ONNX Runtime Web, and a live-camera loop (bench-yolo.js).
// ?ocr=1 adds PP-OCR on the screenshot sample against ONNX Runtime Web at 1 and 2 threads (bench-ocr.js).
// ?structured=1 (or =NAME,...) adds decoding with a JSON Schema against free decoding on SmolLM2 and
// Qwen2.5-0.5B (benchStructured, engine/bench/structured.py).
// ?startup=N (1: 3 rounds) compares the site's start with a bare Pyodide start (bare-start.js) in this
// page, N rounds alternating which goes first (benchStartup). ?threads=1,2 times EfficientNet b1 and
// MiniLM 1x128/8x128 on simd at each kernel thread count (the scaling curve); ?ort=1 runs ONNX Runtime
// Web on the same cases and inputs with 1 and 2 threads (?ort_threads=1,2,4: other counts), for the
// ratios (benchThreads; `python build.py --peers`); ?thread_repeat=N: that section's repeats,
// ?thread_rounds=N: the whole section N times, interleaved. Each section's wall time goes into sections_ms.
// ?llm=<model> (a registry text-generation model, e.g. gemma-3-270m; with a backend beside it,
// ?llm=gemma-3-270m,simd) runs the plain-text case instead of SmolLM2's chat case: ~200 tokens of
// prose (engine.bench.llm.TEXT_PROMPT; ?prompt=TEXT another) continued greedy, ?tokens=N new ones
// (128), EOS ignored, at each kernel thread count of ?threads=1,2 (or ?llm_threads=; then ?threads=
// alone does not start the EfficientNet/MiniLM thread section), with ?peer=1 wllama on the same GGUF
// from this site at the same n_threads, ?llm_rounds=N (2) interleaved rounds (ours, peer; peer, ours),
// one untimed run of each first (?llm_warmup=0: none): prefill/decode tok/s, the ratios against the
// targets (decode >= 2x, prefill >= 3x wllama), and both greedy texts, in results.llm_text (benchLlmText);
// ?llm_profile=1: then ours' time per kernel (a prefill chunk, a decode step) at each count.
import { EngineClient } from "./engine-client.js";
import { benchYolo } from "./bench-yolo.js";
import { benchOcr, ocrThreads } from "./bench-ocr.js";

const params = new URLSearchParams(location.search);
const repeat = Number(params.get("repeat")) || 20;
const out = document.getElementById("bench-results");
const status = document.getElementById("bench-status");
// ?threads=1,2: our kernel thread counts to time (the worker starts with the largest);
// ?ort=1 (?ort_threads=...): ONNX Runtime Web's
const counts = (name) => (params.get(name) || "").split(",").map(Number).filter((n) => Number.isInteger(n) && n >= 1);
const threadCounts = counts("threads");
// ?llm=<model>: the plain-text LLM case on that registry model (benchLlmText), on the backends beside it
const BACKENDS = new Set(["numpy", "simd", "webgpu"]);
const llmParts = (params.get("llm") || "").split(",").filter((v) => v && v !== "0" && v !== "1");
const llmModel = llmParts.find((v) => !BACKENDS.has(v)) || null;
const llmThreads = counts("llm_threads").length ? counts("llm_threads") : llmModel ? threadCounts : [];
const ortThreads = params.has("ort") && params.get("ort") !== "0" ? (counts("ort_threads").length ? counts("ort_threads") : [1, 2]) : [];
// with ?llm=<model>, ?threads= is the LLM's counts: the thread section runs only when asked for besides
const ocrSection = params.has("ocr") && params.get("ocr") !== "0";
const threadSection = ortThreads.length > 0 || (threadCounts.length > 0 &&
  (!llmModel || counts("llm_threads").length > 0 || params.has("thread_cases")));

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
  const state = await client.init(params.get("backend") || "auto", null, null, threadsWanted());
  if (state.status !== "ready") throw new Error(state.error);
  const info = state.info;
  const readyMs = performance.now() - start;
  showThreads(info.threads);
  const workerDownloads = await client.call("resources");     // what the worker fetched to get here
  const results = {
    user_agent: navigator.userAgent,
    cross_origin_isolated: self.crossOriginIsolated === true,
    cold_start_ms: { ...roundAll(info.timings), total: round(readyMs) },
    cold_start: coldStart(info, workerDownloads, readyMs),
    weights: info.weights,
    worker_downloads: workerDownloads,
    kernels: info.kernels,
    threads: info.threads || NO_POOL,
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
  if (threadSection) await section("threads", () => benchThreads(client, results));
  if (llmModel) await section("llm", () => benchLlmText(client, results, llmModel));
  else if (params.has("llm") && params.get("llm") !== "0") await section("llm", () => benchLlm(client, results));
  if (params.has("structured") && params.get("structured") !== "0") {
    await section("structured", () => benchStructured(client, results));
  }
  if (params.has("speech") && params.get("speech") !== "0") await section("speech", () => benchSpeech(client, results));
  if (params.has("yolo") && params.get("yolo") !== "0") await section("yolo", () => benchYolo(client, results, params, info));
  if (ocrSection) await section("ocr", () => benchOcr(client, results, params, info));
  return results;
}

// The kernel threads the worker starts with: the largest of ?threads= (every section before the
// thread section runs on it) and of the OCR section's counts when it runs, else 1, so that the other sections' numbers stay one core's unless
// asked; 1 when the page is not cross-origin isolated (a pool needs a SharedArrayBuffer).
function threadsWanted() {
  const wanted = [...threadCounts, ...llmThreads, ...(ocrSection ? ocrThreads(params) : [])];
  return self.crossOriginIsolated === true && wanted.length ? Math.max(...wanted) : 1;
}

// The worker's kernel threads as its boot reports them ({requested, used, reason}); a worker without
// a thread pool reports none: one thread.
const NO_POOL = { requested: 1, used: 1, reason: "the worker reports no kernel thread pool" };

function showThreads(threads = NO_POOL, now = null) {
  const used = now ? now.used : threads.used;
  const reason = (now && now.reason) || threads.reason;
  document.getElementById("bench-threads").textContent =
    `kernel threads: ${used}${reason ? ` (${reason})` : ""}; ` +
    `cross-origin isolated: ${self.crossOriginIsolated === true ? "yes" : "no"}`;
}

const CASES = [                        // [name, label, our pipeline's task]; ?thread_cases=effnet_b1,...: some
  ["effnet_b1", "EfficientNet-Lite0 b1", "image-classification"],
  ["minilm_1x128", "MiniLM 1x128", "sentence-embedding"],
  ["minilm_8x128", "MiniLM 8x128", "sentence-embedding"],
].filter(([name]) => !params.get("thread_cases") || params.get("thread_cases").split(",").includes(name));
const ORT_MODELS = { effnet_b1: "efficientnet_lite0.onnx", minilm_1x128: "all-MiniLM-L6-v2.onnx",
                     minilm_8x128: "all-MiniLM-L6-v2.onnx" };

// The thread section: ours on simd at each of ?threads= (engine.set_num_threads between runs, through
// bench_threads; each row says the count in effect), then with ?ort=1 ONNX Runtime Web on the same
// cases and inputs (bench_peer_cases) at each of its counts, each in a worker of its own
// (web/bench-ort.js): median of the repeats after one untimed run, its outputs checked against ours.
// ?thread_rounds=N does all that N times, the peer first in every other round (the table shows the
// median over the rounds): on a machine whose load moves, neither side gets the quiet minutes.
async function benchThreads(client, results) {
  const card = document.getElementById("threads-card");
  const cardStatus = document.getElementById("threads-status");
  card.hidden = false;
  const quick = Number(params.get("thread_repeat")) || Math.max(3, Math.round(repeat / 4));
  const rounds = Number(params.get("thread_rounds")) || 1;
  await client.setBackend("simd");
  cardStatus.textContent = "loading the models";
  for (const task of new Set(CASES.map((c) => c[2]))) await client.loadTask(task);
  const ours = results.threads.runs = [];
  let reference = null;
  if (ortThreads.length) {
    reference = await client.python("bench_peer_cases");
    results.ort = { version: null, repeat: quick, rounds, runs: [] };
  }
  const runOurs = async (round) => {
    for (const n of threadCounts.length ? threadCounts : [results.threads.used]) {
      cardStatus.textContent = `round ${round + 1}: ours, ${n} thread${n > 1 ? "s" : ""}`;
      const set = await client.python("bench_threads", n);
      showThreads(results.threads, set);
      const tasks = new Set(CASES.map((c) => c[2]));
      const image = tasks.has("image-classification") ? await client.python("bench_image", quick) : {};
      const text = tasks.has("sentence-embedding") ? await client.python("bench_text", quick) : {};
      const times = { effnet_b1: image.batch1_ms, minilm_1x128: text.batch1x128_ms, minilm_8x128: text.batch8x128_ms };
      ours.push({ ...set, round, device: image.device || text.device,
                  ...Object.fromEntries(CASES.map(([name]) => [name, times[name]])) });
    }
  };
  const runPeer = async (round) => {
    for (const n of ortThreads) {
      cardStatus.textContent = `round ${round + 1}: ONNX Runtime Web, ${n} thread${n > 1 ? "s" : ""}`;
      results.ort.runs.push({ round, ...(n > 1 && self.crossOriginIsolated !== true
        ? { threads: n, skipped: "the page is not cross-origin isolated: ONNX Runtime Web would run on 1 thread" }
        : await runOrt(n, reference.cases, quick)) });
      results.ort.version ||= results.ort.runs.at(-1).version || null;
    }
  };
  for (let round = 0; round < rounds; round++) {
    for (const run of round % 2 && reference ? [runPeer, runOurs] : [runOurs, runPeer]) {
      if (run === runOurs || reference) await run(round);
    }
  }
  if (ours.length) showThreads(results.threads, await client.python("bench_threads", results.threads.used));  // as it started
  document.getElementById("threads-table").textContent = threadsTable(results).join("\n");
  cardStatus.textContent = "done";
}

// ONNX Runtime Web with `threads` threads on every case, in a new worker; per case its times and how
// far its output is from ours (logits: max |difference| and the same top-1; embeddings: least cosine).
function runOrt(threads, cases, repeat) {
  const decode = (f) => {
    const bytes = Uint8Array.from(atob(f.base64), (c) => c.charCodeAt(0));
    return { type: f.type, dims: f.dims, data: f.type === "int64" ? new BigInt64Array(bytes.buffer) : new Float32Array(bytes.buffer) };
  };
  const jobs = CASES.filter(([name]) => cases[name]).map(([name]) => ({
    name, model: ORT_MODELS[name], feeds: Object.fromEntries(Object.entries(cases[name].feeds).map(([k, f]) => [k, decode(f)])),
  }));
  return new Promise((resolve) => {
    const worker = new Worker("bench-ort.js", { type: "module" });
    const done = (result) => { worker.terminate(); resolve(result); };
    worker.onerror = (e) => done({ threads, error: `the ONNX Runtime Web worker failed: ${e.message || "could not start"}` });
    worker.onmessage = ({ data }) => {
      if (!data.ok) return done({ threads, error: data.error });
      const byCase = {};
      for (const c of data.cases) {
        if (c.error) { byCase[c.name] = { error: c.error }; continue; }
        byCase[c.name] = { median_ms: round(c.median_ms), create_ms: round(c.create_ms), warmup_ms: round(c.warmup_ms),
                           runs_ms: c.runs_ms.map(round), ...compare(c.name, c.output.data, cases[c.name].output) };
      }
      done({ threads, version: data.version, cases: byCase });
    };
    worker.postMessage({ threads, repeat, cases: jobs });
  });
}

function compare(name, theirs, ours) {
  if (theirs.length !== ours.length) return { check: `output size ${theirs.length}, ours ${ours.length}` };
  if (name.startsWith("effnet")) {
    const top = (v) => v.reduce((best, x, i) => (x > v[best] ? i : best), 0);
    return { max_abs_diff: Math.max(...theirs.map((x, i) => Math.abs(x - ours[i]))), same_top1: top(theirs) === top(ours) };
  }
  let least = 1;
  for (let row = 0; row < ours.length / 384; row++) {
    let dot = 0, a = 0, b = 0;
    for (let i = row * 384; i < (row + 1) * 384; i++) { dot += theirs[i] * ours[i]; a += theirs[i] ** 2; b += ours[i] ** 2; }
    least = Math.min(least, dot / Math.sqrt(a * b));
  }
  return { min_cosine: least };
}

// One line per case and thread count: ours, ONNX Runtime Web, ours/ORT (below 1 ours is faster),
// and our speed-up over our first count (medians over the rounds); then what was skipped and the
// output checks.
function threadsTable(results) {
  const ours = results.threads.runs, ort = results.ort ? results.ort.runs : [];
  const counts = [...new Set([...ours.map((r) => r.used), ...ort.map((r) => r.threads)])].sort((a, b) => a - b);
  const middle = (list) => (list.length ? median(list) : undefined);
  const oursAt = (n, name) => middle(ours.filter((r) => r.used === n && r.requested === n).map((r) => r[name]));
  const ortAt = (n, name) => middle(ort.filter((r) => r.threads === n && r.cases?.[name]?.median_ms !== undefined)
    .map((r) => r.cases[name].median_ms));
  const ms = (x) => (x === undefined ? "-" : x.toFixed(1)).padStart(9);
  const rounds = results.ort ? results.ort.rounds : 1;
  const lines = [`${"case".padEnd(22)} ${"threads".padStart(7)} ${"ours ms".padStart(9)} ${"ORT ms".padStart(9)} ` +
                 `${"ours/ORT".padStart(9)} ${"speed-up".padStart(9)}${rounds > 1 ? `   medians of ${rounds} rounds` : ""}`];
  results.ort_vs_ours = [];
  for (const [name, label] of CASES) {
    const base = ours.length ? oursAt(ours[0].used, name) : undefined;
    for (const n of counts) {
      const mine = oursAt(n, name), theirs = ortAt(n, name);
      const ratio = mine !== undefined && theirs !== undefined ? mine / theirs : undefined;
      if (ratio !== undefined) results.ort_vs_ours.push({ case: name, threads: n, ours_ms: round(mine), ort_ms: round(theirs), ratio: round2(ratio) });
      lines.push(`${label.padEnd(22)} ${String(n).padStart(7)} ${ms(mine)} ${ms(theirs)} ` +
                 `${(ratio === undefined ? "-" : ratio.toFixed(2) + "x").padStart(9)} ` +
                 `${(mine === undefined || base === undefined ? "-" : (base / mine).toFixed(2) + "x").padStart(9)}`);
    }
  }
  const said = new Set();
  const say = (line) => { if (!said.has(line)) { said.add(line); lines.push(line); } };
  for (const r of ours) if (r.used !== r.requested) say(`ours, ${r.requested} threads asked: ran on ${r.used} (${r.reason})`);
  for (const r of ort) {
    if (r.skipped || r.error) say(`ONNX Runtime Web, ${r.threads} threads: ${r.skipped || r.error}`);
    for (const [name, c] of Object.entries(r.cases || {})) {
      if (c.error) say(`ONNX Runtime Web, ${r.threads} threads, ${name}: ${c.error}`);
    }
  }
  const checked = ort.find((r) => r.cases);
  if (checked) {
    const notes = Object.entries(checked.cases).filter(([, c]) => !c.error).map(([name, c]) => (c.min_cosine !== undefined
      ? `${name} least cosine ${c.min_cosine.toFixed(6)}` : `${name} max |logit difference| ${c.max_abs_diff.toExponential(1)}` +
        `${c.same_top1 ? ", same top-1" : ", OTHER top-1"}`));
    lines.push(`ONNX Runtime Web ${checked.version} (WASM) against our outputs on the same inputs: ${notes.join("; ")}`);
  }
  return lines;
}

const median = (list) => {
  const sorted = [...list].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

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
      lines.push(...deviceStep(`${model} ${device}`, r.device_step));
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
  const bare = median(runs.bare.map((r) => r.ms)), site = median(runs.site.map((r) => r.ms));
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
  for (const device of devices) lines.push(...deviceStep(device, results.llm[device].device_step));
  document.getElementById("llm-table").textContent = lines.join("\n");
  cardStatus.textContent = "done";
}

// A device's decode step (engine.bench.llm.device_step): submissions, bytes read back and kernels
// recorded from Python per step, as `python -m engine bench llm --device webgpu` prints them.
function deviceStep(name, step) {
  if (!step) return [];
  const where = step.selected_on_device === false ? "on the host" : "on the device";
  return [`${name} per decode step: ${step.submits} submission(s), ${step.read_bytes} bytes read back, ` +
          `${step.recorded} kernels recorded from Python, ${step.calls} bridge crossings (token chosen ${where})`];
}

// The structured-output section: each model loaded in turn on simd, then engine.bench.structured's
// measure (decoding with a JSON Schema against free decoding, interleaved) in the worker.
async function benchStructured(client, results) {
  const listed = (params.get("structured") || "").split(",").filter((v) => v && v !== "1");
  const models = listed.length ? listed : ["SmolLM2-135M-Instruct", "Qwen2.5-Coder-0.5B-Instruct"];
  const tokens = Number(params.get("tokens")) || 48;
  const status = document.getElementById("structured-status");
  document.getElementById("structured-card").hidden = false;
  await client.setBackend("simd");
  results.structured = {};
  for (const model of models) {
    status.textContent = `loading ${model}`;
    await client.loadTask("text-generation", model);
    status.textContent = `running ${model}`;
    results.structured[model] = await client.python("bench_structured", tokens, 2);
  }
  const lines = [`greedy, up to ${tokens} tokens, six schema cases interleaved (decode tokens/s)`,
                 `${"model".padEnd(30)} ${"free".padStart(8)} ${"schema".padStart(8)} ${"ratio".padStart(7)} ` +
                 `${"ms/step".padStart(8)} ${"masked".padStart(7)}`];
  for (const model of models) {
    const r = results.structured[model];
    lines.push(`${model.padEnd(30)} ${r.free_tok_s.toFixed(1).padStart(8)} ${r.schema_tok_s.toFixed(1).padStart(8)} ` +
               `${r.ratio.toFixed(3).padStart(7)} ${r.constraint_ms_per_step.toFixed(3).padStart(8)} ` +
               `${(100 * r.masked_share).toFixed(1).padStart(6)}%`);
  }
  document.getElementById("structured-table").textContent = lines.join("\n");
  status.textContent = "done";
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

// The plain-text LLM case (?llm=<model>): ours and wllama on the same GGUF file from this site
// (models/<model>/manifest.json names it; its byte parts are joined into one Blob for wllama), the
// same prompt text (each side tokenizes it as the file says: the token counts are reported), greedy,
// `tokens` new ones, EOS ignored, no prompt cache. Per thread count (ours: engine.threads through
// bench_threads; wllama: n_threads, loaded once per count) one untimed run of each, then `rounds`
// rounds, ours first in even rounds and the peer first in odd ones. Medians over the rounds and
// ours/wllama ratios against the targets in results.llm_text and the card's table.
const TARGETS = { prefill: 3, decode: 2 };

async function benchLlmText(client, results, model) {
  const device = llmParts.find((v) => BACKENDS.has(v)) || "simd";
  const tokens = Number(params.get("tokens")) || 128;
  const rounds = Number(params.get("llm_rounds")) || 2;
  const warmup = params.get("llm_warmup") !== "0";
  const prompt = params.get("prompt") || "";                 // "": engine.bench.llm.TEXT_PROMPT
  const withPeer = params.get("peer") === "1";
  const card = document.getElementById("llm-card");
  const cardStatus = document.getElementById("llm-status");
  card.hidden = false;
  document.getElementById("llm-title").textContent = `Text generation (${model})`;
  cardStatus.textContent = `loading ${model}`;
  await client.setBackend(device);
  const manifestReply = await fetch(`models/${model}/manifest.json`);
  if (!manifestReply.ok) throw new Error(`models/${model}/manifest.json: HTTP ${manifestReply.status}`);
  const manifest = await manifestReply.json();
  if (!manifest.gguf) throw new Error(`${model} is not a GGUF model`);
  const t = performance.now();
  const loaded = await client.loadTask("text-generation", model);
  const out = results.llm_text = {
    model, device, file: manifest.gguf.file, file_bytes: manifest.gguf.size, new_tokens: tokens, rounds, warmup,
    load_ms: round(performance.now() - t), weights: loaded.weights, targets: TARGETS,
    threads: llmThreads.length ? llmThreads : [results.threads.used], ours: [],
    peer: withPeer ? { name: "wllama", version: WLLAMA_VERSION, runs: [] } : null,
  };
  let blob = null;
  for (const n of out.threads) {
    cardStatus.textContent = `${n} thread${n > 1 ? "s" : ""}: setting ours`;
    const set = await client.python("bench_threads", n);
    showThreads(results.threads, set);
    let peer = null;
    if (withPeer) {
      if (n > 1 && self.crossOriginIsolated !== true) {
        out.peer.runs.push({ threads: n, skipped: "the page is not cross-origin isolated: wllama would run on 1 thread" });
      } else {
        cardStatus.textContent = `${n} thread${n > 1 ? "s" : ""}: loading wllama`;
        blob ||= await ggufBlob(model, manifest);
        peer = await startWllama(blob, n, tokens);
        out.peer.load_ms ||= peer.load_ms;
      }
    }
    for (let r = 0; r < rounds; r++) {
      for (const side of r % 2 && peer ? ["peer", "ours"] : ["ours", "peer"]) {
        const first = r === 0 && warmup;
        cardStatus.textContent = `${n} thread${n > 1 ? "s" : ""}, round ${r + 1}: ${side === "ours" ? "ours" : "wllama"}`;
        if (side === "ours") {
          const { prompt: text, ...res } = await client.python("bench_llm_text", prompt, tokens, 1, first);
          out.prompt ??= text;                        // the text both sides continue
          out.ours.push({ ...res, requested: set.requested, used: set.used, reason: set.reason, round: r });
        } else if (peer) {
          if (first) await peer.run(out.prompt);      // untimed
          out.peer.runs.push({ ...(await peer.run(out.prompt)), round: r });
        }
      }
    }
    if (peer) await peer.exit();
    if (params.get("llm_profile") === "1") {          // where ours spends it, per kernel, at this count
      cardStatus.textContent = `${n} thread${n > 1 ? "s" : ""}: profiling ours`;
      (out.profile ||= {})[n] = await client.python("bench_llm_profile", prompt);
    }
  }
  if (out.ours.length && out.threads.length) await client.python("bench_threads", Math.max(...out.threads));
  summarizeLlmText(out);
  document.getElementById("llm-table").textContent = llmTextTable(out).join("\n");
  cardStatus.textContent = "done";
}

// The GGUF as one Blob: its byte parts fetched from this site (as the worker reads them) and joined.
async function ggufBlob(model, manifest) {
  const parts = [];
  for (const part of manifest.gguf.parts) {
    const reply = await fetch(`models/${model}/${part.file}`);
    if (!reply.ok) throw new Error(`models/${model}/${part.file}: HTTP ${reply.status}`);
    parts.push(await reply.blob());
  }
  const blob = new Blob(parts);
  if (blob.size !== manifest.gguf.size) throw new Error(`${manifest.gguf.file}: ${blob.size} bytes, the manifest says ${manifest.gguf.size}`);
  return blob;
}

// wllama with `threads` threads on the GGUF: run(prompt) -> llama.cpp's own timings of one
// greedy completion of `tokens` tokens (EOS ignored, the whole prompt evaluated each time).
async function startWllama(blob, threads, tokens) {
  const base = new URL("peers/wllama/", location.href);
  const { Wllama } = await import(new URL("index.js", base).href);
  const quiet = { debug() {}, log() {}, info() {}, warn: console.warn, error: console.error };
  const wllama = new Wllama({ default: new URL("wllama.wasm", base).href }, { logger: quiet, suppressNativeLog: true });
  const t = performance.now();
  await wllama.loadModel([blob], { n_threads: threads, n_gpu_layers: 0, n_ctx: 1024, n_batch: 512 });
  const load_ms = round(performance.now() - t);
  const used = wllama.getNumThreads();
  return {
    load_ms,
    async run(prompt) {
      const started = performance.now();
      const r = await wllama.createCompletion({ prompt, max_tokens: tokens, temperature: 0, ignore_eos: true,
                                                cache_prompt: false });
      const x = r.timings;
      return { threads: used, requested: threads, prompt_tokens: x.prompt_n, new_tokens: x.predicted_n,
               prefill_tok_s: round(x.prompt_per_second), decode_tok_s: round(x.predicted_per_second),
               wall_ms: round(performance.now() - started), text: r.choices[0].text };
    },
    exit: () => wllama.exit(),
  };
}

// Per thread count: the medians over the rounds of both sides, ours/wllama, whether the targets are
// met; and whether the greedy texts agree (the same text, else how many characters they share).
function summarizeLlmText(out) {
  const middle = (list) => (list.length ? median(list) : undefined);
  out.ratios = [];
  for (const n of out.threads) {
    const ours = out.ours.filter((r) => r.requested === n);
    const peer = out.peer ? out.peer.runs.filter((r) => r.requested === n && !r.skipped && !r.error) : [];
    const row = { threads: n, used: ours[0]?.used,
                  ours_prefill_tok_s: middle(ours.map((r) => r.prefill_tok_s)), ours_decode_tok_s: middle(ours.map((r) => r.decode_tok_s)),
                  ours_prompt_tokens: ours[0]?.prompt_tokens, ours_new_tokens: ours[0]?.new_tokens };
    if (peer.length) {
      Object.assign(row, { peer_threads: peer[0].threads, peer_prefill_tok_s: middle(peer.map((r) => r.prefill_tok_s)),
                           peer_decode_tok_s: middle(peer.map((r) => r.decode_tok_s)),
                           peer_prompt_tokens: peer[0].prompt_tokens, peer_new_tokens: peer[0].new_tokens });
      row.prefill_ratio = round2(row.ours_prefill_tok_s / row.peer_prefill_tok_s);
      row.decode_ratio = round2(row.ours_decode_tok_s / row.peer_decode_tok_s);
      row.prefill_target_met = row.prefill_ratio >= TARGETS.prefill;
      row.decode_target_met = row.decode_ratio >= TARGETS.decode;
      const a = ours.at(-1).text, b = peer.at(-1).text;
      let shared = 0;
      while (shared < Math.min(a.length, b.length) && a[shared] === b[shared]) shared++;
      row.texts = { ours: a, peer: b, same: a === b, common_prefix_chars: shared };
    }
    out.ratios.push(row);
  }
  out.prompt_tokens = out.ours[0]?.prompt_tokens;
}

function llmTextTable(out) {
  const f = (x) => (x === undefined ? "-" : x.toFixed(1)).padStart(9);
  const x = (r) => (r === undefined ? "-" : r.toFixed(2) + "x").padStart(7);
  const lines = [`${out.model} (${out.file}), ${out.prompt_tokens}-token prompt, ${out.new_tokens} new tokens, greedy, ` +
                 `${out.device}; medians of ${out.rounds} interleaved round${out.rounds > 1 ? "s" : ""} (tokens/s)`,
                 `${"threads".padStart(7)} ${"prefill".padStart(9)} ${"wllama".padStart(9)} ${"ratio".padStart(7)} ` +
                 `${"decode".padStart(9)} ${"wllama".padStart(9)} ${"ratio".padStart(7)}`];
  for (const r of out.ratios) {
    lines.push(`${String(r.threads).padStart(7)} ${f(r.ours_prefill_tok_s)} ${f(r.peer_prefill_tok_s)} ${x(r.prefill_ratio)} ` +
               `${f(r.ours_decode_tok_s)} ${f(r.peer_decode_tok_s)} ${x(r.decode_ratio)}`);
  }
  lines.push(`targets: prefill >= ${TARGETS.prefill}x, decode >= ${TARGETS.decode}x wllama at the same thread count` +
             (out.peer ? ` (@wllama/wllama ${out.peer.version}, this run)` : " (no peer: ?peer=1)"));
  for (const r of out.ratios) {
    if (r.used !== undefined && r.used !== r.threads) lines.push(`ours, ${r.threads} threads asked: ran on ${r.used}`);
    if (r.peer_threads !== undefined && r.peer_threads !== r.threads) lines.push(`wllama, ${r.threads} threads asked: ran on ${r.peer_threads}`);
    if (r.ours_prompt_tokens !== r.peer_prompt_tokens && r.peer_prompt_tokens !== undefined)
      lines.push(`${r.threads} threads: prompt ${r.ours_prompt_tokens} tokens ours, ${r.peer_prompt_tokens} wllama's`);
    if (r.texts) lines.push(`${r.threads} threads: greedy texts ${r.texts.same ? "the same" : `agree on the first ${r.texts.common_prefix_chars} characters`}`);
  }
  for (const r of out.peer ? out.peer.runs : []) if (r.skipped) lines.push(`wllama, ${r.threads} threads: ${r.skipped}`);
  for (const [n, prof] of Object.entries(out.profile || {})) {
    lines.push(`ours, ${n} thread${n > 1 ? "s" : ""}:`, ...prof.prefill, ...prof.decode);
  }
  return lines;
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
const round2 = (x) => Math.round(x * 100) / 100;
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
