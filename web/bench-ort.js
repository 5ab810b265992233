// The bench page's peer for EfficientNet and MiniLM: ONNX Runtime Web (WASM) in a module worker of
// its own, one worker per thread count (the runtime reads env.wasm.numThreads once, when its wasm
// starts, and has no per-session thread count). Everything comes from this site: the runtime from
// peers/onnxruntime/ (`python build.py --peers`; env.wasm.wasmPaths points there, so nothing is
// fetched from elsewhere) and the models exported there at build time from the weights ours reads.
// Message in: {threads, repeat, cases: [{name, model, feeds: {input: {type, data, dims}}}]}.
// Message out: {ok, threads, version (the runtime's own), cases: [{name, create_ms, warmup_ms, median_ms, runs_ms, output}]}
// or {ok: false, error}. Each case: its session created, one untimed run, then `repeat` runs.
const base = new URL("peers/onnxruntime/", self.location.href).href;

self.onmessage = async ({ data }) => {
  try {
    let ort;
    try {
      ort = await import(`${base}ort.wasm.min.mjs`);
    } catch (err) {
      throw new Error(`ONNX Runtime Web is not in peers/onnxruntime/ (build with python build.py --peers): ${err.message}`);
    }
    ort.env.wasm.wasmPaths = base;
    ort.env.wasm.numThreads = data.threads;
    ort.env.wasm.proxy = false;
    ort.env.logLevel = "error";
    const cases = [];
    for (const c of data.cases) cases.push(await runCase(ort, c, data.repeat));
    self.postMessage({ ok: true, threads: data.threads, version: ort.env.versions?.web, cases });
  } catch (err) {
    self.postMessage({ ok: false, error: String(err.message || err) });
  }
};

const median = (list) => {
  const sorted = [...list].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

async function runCase(ort, c, repeat) {
  const reply = await fetch(`${base}${c.model}`);
  if (!reply.ok) return { name: c.name, error: `peers/onnxruntime/${c.model}: HTTP ${reply.status} (its export was not built)` };
  const model = new Uint8Array(await reply.arrayBuffer());
  let t = performance.now();
  const session = await ort.InferenceSession.create(model, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
  const create_ms = performance.now() - t;
  const feeds = {};
  for (const [name, { type, data, dims }] of Object.entries(c.feeds)) feeds[name] = new ort.Tensor(type, data, dims);
  t = performance.now();
  await session.run(feeds);
  const warmup_ms = performance.now() - t;
  const runs = [];
  let out;
  for (let i = 0; i < repeat; i++) {
    t = performance.now();
    out = await session.run(feeds);
    runs.push(performance.now() - t);
  }
  const first = out[session.outputNames[0]];
  const output = { dims: first.dims, data: Array.from(first.data) };
  await session.release();
  return { name: c.name, create_ms, warmup_ms, median_ms: median(runs), runs_ms: runs, output };
}
