// The browser benchmark: cold-start stages, bytes fetched, per-op times and MNIST and
// EfficientNet inference per backend (webgpu with its adapter's name; SwiftShader is a CPU
// emulation of a GPU, reported as such), and all-MiniLM-L6-v2 at 1x128 and 8x128 with the
// tokenizer's throughput, and quantized linear layers (GGML types against float32, per backend;
// engine/bench_quant.py, as `python -m engine bench qlinear`). Writes one JSON object into
// [data-testid=bench-results] when done.
// ?repeat=N, ?gemm=0, ?ops=0, ?effnet=0, ?minilm=0, ?qlinear=0 trim the run; ?qlinear=full runs
// the CLI's whole set (with the 576->49152 output head) instead of its quick set. ?llm=1 adds
// SmolLM2 chat (engine/bench_llm.py: the 37-token prompt, greedy, ?tokens=N new ones, default 128)
// on ?llm_devices=a,b (default simd): prefill/decode tokens/s, first token, the wasm heap.
import { EngineClient } from "./engine-client.js";

const params = new URLSearchParams(location.search);
const repeat = Number(params.get("repeat")) || 20;
const out = document.getElementById("bench-results");
const status = document.getElementById("bench-status");

async function main() {
  const start = performance.now();
  const client = new EngineClient();
  const state = await client.init(params.get("backend") || "auto");
  if (state.status !== "ready") throw new Error(state.error);
  const info = state.info;
  const results = {
    user_agent: navigator.userAgent,
    cross_origin_isolated: self.crossOriginIsolated === true,
    cold_start_ms: { ...roundAll(info.timings), total: round(performance.now() - start) },
    weights: info.weights,
    worker_downloads: await client.call("resources"),
    kernels: info.kernels,
    adapter: info.adapter,
    devices: info.devices,
    mnist: {},
    effnet: {},
  };
  if (params.get("gemm") !== "0") results.gemm = (await client.python("bench_gemm", Math.max(3, Math.round(repeat / 4)))).cases;
  if (params.get("ops") !== "0") results.ops = (await client.python("bench_ops", Math.max(3, Math.round(repeat / 4)))).cases;
  if (params.get("qlinear") !== "0") results.qlinear = await benchQlinear(client, params.get("qlinear") === "full");
  for (const device of info.devices) {
    await client.setBackend(device);
    results.mnist[device] = await client.python("bench_digit", repeat);
  }
  if (params.get("effnet") !== "0") {
    const t = performance.now();
    const loaded = await client.loadTask("image-classification");
    results.effnet_load = { ms: round(performance.now() - t), weights: loaded.weights };
    for (const device of info.devices) {
      await client.setBackend(device);
      results.effnet[device] = await client.python("bench_image", Math.max(3, Math.round(repeat / 4)));
    }
  }
  if (params.get("minilm") !== "0") {
    const t = performance.now();
    const loaded = await client.loadTask("sentence-embedding");
    results.minilm_load = { ms: round(performance.now() - t), weights: loaded.weights };
    results.minilm = {};
    for (const device of info.devices) {
      await client.setBackend(device);
      results.minilm[device] = await client.python("bench_text", Math.max(3, Math.round(repeat / 4)));
    }
  }
  if (params.get("llm") === "1") {
    const devices = (params.get("llm_devices") || "simd").split(",");
    await client.setBackend(devices[0]);        // loaded straight onto it (not moved from the GPU)
    const t = performance.now();
    const loaded = await client.loadTask("text-generation");
    results.llm_load = { ms: round(performance.now() - t), weights: loaded.weights };
    results.llm = {};
    for (const device of devices) {
      await client.setBackend(device);
      results.llm[device] = await client.python("bench_llm", Number(params.get("tokens")) || 128, 1);
    }
  }
  return results;
}

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
