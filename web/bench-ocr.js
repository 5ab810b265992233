// The bench page's OCR section (bench.html?ocr=1): PP-OCR (?ocr_model=pp-ocrv5: the v5 models) reads
// the site's 1280x960 screenshot sample in our worker on simd at each kernel thread count of
// ?ocr_threads=1,2, against ONNX Runtime Web (bench-ort.js, a worker per thread count) running the
// same three ONNX files (`python build.py --peers`: peers/onnxruntime/ppocrv4-det.onnx, ...) on the
// exact batches our pipeline fed its networks (engine/bench/ocr.py page_cases). The peer's pipeline
// time is its network time plus our pre- and post-processing time (our stage time less our network
// time, at the same thread count), so both sides have the same pre- and post-processing; ratios
// ours/peer for the whole pipeline and for the networks alone. ?ocr_rounds=N (2) interleaved rounds
// (the peer first in every other round; medians shown), ?ocr_repeat=N (3) runs per case after an
// untimed one, ?ocr_ort=0 without the peer, ?ocr_ort_threads=1,2 the peer's counts when they differ
// from ours'. The peer's outputs are checked against ours.
const STAGES = ["det", "cls", "rec"];
const IMAGE = "samples/ocr/screenshot.png";

const median = (list) => {
  const sorted = [...list].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length ? (sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2) : undefined;
};
const round = (x) => (x === undefined ? undefined : Math.round(x * 10) / 10);
const round2 = (x) => (x === undefined ? undefined : Math.round(x * 100) / 100);
const counts = (text, fallback) => {
  const list = (text || "").split(",").map(Number).filter((n) => Number.isInteger(n) && n >= 1);
  return list.length ? list : fallback;
};

// The thread counts this section runs ours and the peer at (bench.js starts the worker's pool with
// the largest when ?ocr= is on).
export function ocrThreads(params) {
  return counts(params.get("ocr_threads"), [1, 2]);
}

// Python in the worker through its `run` entry point (which holds the worker's lock, as page_cases
// and page_times expect): the value of `expression`, with engine.bench.ocr imported as _ocr.
const inWorker = (client, expression) => client.run(`import engine.bench.ocr as _ocr\n${expression}`);

// ONNX Runtime Web with `threads` threads on every captured batch (a case per batch: "<stage>_<i>"),
// in a worker of its own; per case its median, and how far its output is from ours.
function runOrt(threads, reference, model, repeat) {
  const decode = (f) => {
    const bytes = Uint8Array.from(atob(f.base64), (c) => c.charCodeAt(0));
    return { type: f.type, dims: f.dims, data: new Float32Array(bytes.buffer) };
  };
  const jobs = STAGES.flatMap((stage) => reference.feeds[stage].map((feeds, i) => ({
    name: `${stage}_${i}`, model: `${model.replace(/-/g, "")}-${stage}.onnx`,
    feeds: Object.fromEntries(Object.entries(feeds).map(([k, f]) => [k, decode(f)])),
  })));
  return new Promise((resolve) => {
    const worker = new Worker("bench-ort.js", { type: "module" });
    const done = (result) => { worker.terminate(); resolve(result); };
    worker.onerror = (e) => done({ threads, error: `the ONNX Runtime Web worker failed: ${e.message || "could not start"}` });
    worker.onmessage = ({ data }) => {
      if (!data.ok) return done({ threads, error: data.error });
      const cases = {};
      for (const c of data.cases) {
        if (c.error) { cases[c.name] = { error: c.error }; continue; }
        const [stage, i] = c.name.split("_");
        cases[c.name] = { median_ms: c.median_ms, create_ms: round(c.create_ms), check: check(stage, c.output, reference.checks[stage][Number(i)]) };
      }
      done({ threads, version: data.version, cases });
    };
    worker.postMessage({ threads, repeat, cases: jobs });
  });
}

// The peer's output against ours on one batch: the detector's pixels over the threshold and its sum
// of probabilities (relative difference), the classifier's largest difference, the recognizer's
// share of time steps with the same best class.
function check(stage, output, ours) {
  const data = output.data;
  if (stage === "det") {
    let over = 0, sum = 0;
    for (const p of data) { sum += p; if (p > ours.threshold) over++; }
    return { over, ours_over: ours.over, sum_rel_diff: Math.abs(sum - ours.sum) / Math.max(Math.abs(ours.sum), 1e-9) };
  }
  if (stage === "cls") {
    return { max_abs_diff: Math.max(...data.map((x, i) => Math.abs(x - ours[i]))) };
  }
  const classes = output.dims[output.dims.length - 1];
  let same = 0;
  for (let step = 0; step < ours.length; step++) {
    let best = 0;
    for (let c = 1; c < classes; c++) if (data[step * classes + c] > data[step * classes + best]) best = c;
    if (best === ours[step]) same++;
  }
  return { same_argmax: same / ours.length };
}

// `info`: the worker's boot reply (its registry).
export async function benchOcr(client, results, params, info) {
  const card = document.getElementById("ocr-card");
  const cardStatus = document.getElementById("ocr-status");
  card.hidden = false;
  const model = params.get("ocr_model") || "pp-ocrv4";
  const threads = ocrThreads(params);
  const peerThreads = counts(params.get("ocr_ort_threads"), threads);
  const rounds = Number(params.get("ocr_rounds")) || 2;
  const repeat = Number(params.get("ocr_repeat")) || 3;
  const withPeer = params.get("ocr_ort") !== "0";
  const image = params.get("ocr_image") || IMAGE;
  if (!info.registry.some((m) => m.name === model)) throw new Error(`this site serves no ${model} (build with --models ${model})`);
  cardStatus.textContent = `loading ${model}`;
  await client.setBackend("simd");
  await client.loadTask("ocr", model);
  const reference = await inWorker(client, `await _ocr.page_cases(${JSON.stringify(image)})`);
  const out = results.ocr = {
    model, image, image_shape: reference.image_shape, input: reference.stats.input, lines: reference.lines,
    batches: Object.fromEntries(STAGES.map((s) => [s, reference.feeds[s].map((f) => f.x.dims)])),
    threads, ort_threads: peerThreads, rounds, repeat, ours: [], ort: withPeer ? [] : null, ort_version: null,
  };
  const runOurs = async (round) => {
    for (const n of threads) {
      cardStatus.textContent = `round ${round + 1}: ours, ${n} thread${n > 1 ? "s" : ""}`;
      const set = await client.python("bench_threads", n);
      try {
        const times = await inWorker(client, `await _ocr.page_times(${JSON.stringify(image)}, ${repeat})`);
        out.ours.push({ round, requested: n, used: set.used, reason: set.reason, ...times });
      } catch (err) {                    // e.g. out of memory: said in the table, the other counts still run
        out.ours.push({ round, requested: n, used: set.used, reason: set.reason, error: String(err.message || err).split("\n").filter(Boolean).at(-1) });
      }
    }
  };
  const runPeer = async (round) => {
    for (const n of peerThreads) {
      cardStatus.textContent = `round ${round + 1}: ONNX Runtime Web, ${n} thread${n > 1 ? "s" : ""}`;
      if (n > 1 && self.crossOriginIsolated !== true) {
        out.ort.push({ round, threads: n, skipped: "the page is not cross-origin isolated: ONNX Runtime Web would run on 1 thread" });
        continue;
      }
      const r = await runOrt(n, reference, model, repeat);
      out.ort.push({ round, ...r });
      out.ort_version ||= r.version || null;
    }
  };
  for (let round = 0; round < rounds; round++) {
    for (const run of round % 2 && withPeer ? [runPeer, runOurs] : [runOurs, runPeer]) {
      if (run === runOurs || withPeer) await run(round);
    }
  }
  await client.python("bench_threads", Math.max(...threads));        // as the worker started
  summarize(out);
  document.getElementById("ocr-table").textContent = table(out).join("\n");
  cardStatus.textContent = "done";
}

// Per thread count and stage (and their total): ours' pipeline and network medians over the
// rounds, our pre/post (the difference), the peer's network (its batches' medians summed, then the
// median over the rounds) and its pipeline (its network + our pre/post); the ratios ours/peer.
function summarize(out) {
  out.summary = [];
  out.ratios = [];
  for (const n of [...new Set([...out.threads, ...out.ort_threads])].sort((a, b) => a - b)) {
    const ours = out.ours.filter((r) => r.requested === n && !r.error);
    const peer = (out.ort || []).filter((r) => r.threads === n && r.cases);
    const peerStage = (stage) => {
      const sums = peer.map((r) => {
        const cases = Object.entries(r.cases).filter(([name]) => name.startsWith(`${stage}_`)).map(([, c]) => c);
        return cases.every((c) => c.median_ms !== undefined) ? cases.reduce((s, c) => s + c.median_ms, 0) : undefined;
      }).filter((x) => x !== undefined);
      return median(sums);
    };
    const rows = {};
    for (const stage of [...STAGES, "total"]) {
      const pipeline = median(ours.map((r) => r.pipeline[stage]).filter((x) => x !== undefined));
      const network = median(ours.map((r) => r.network[stage]).filter((x) => x !== undefined));
      rows[stage] = { threads: n, used: ours[0]?.used, stage, ours_pipeline_ms: pipeline, ours_network_ms: network,
                      prepost_ms: pipeline !== undefined && network !== undefined ? pipeline - network : undefined };
    }
    if (peer.length) {
      for (const stage of STAGES) rows[stage].ort_network_ms = peerStage(stage);
      const parts = STAGES.map((s) => rows[s].ort_network_ms);
      rows.total.ort_network_ms = parts.every((x) => x !== undefined) ? parts.reduce((a, b) => a + b, 0) : undefined;
      for (const row of Object.values(rows)) {
        if (row.ort_network_ms === undefined || row.prepost_ms === undefined) continue;
        row.ort_pipeline_ms = row.ort_network_ms + row.prepost_ms;
        row.pipeline_ratio = row.ours_pipeline_ms / row.ort_pipeline_ms;
        row.network_ratio = row.ours_network_ms / row.ort_network_ms;
      }
    }
    for (const row of Object.values(rows)) {
      for (const key of Object.keys(row)) if (key.endsWith("_ms")) row[key] = round(row[key]);
      for (const key of ["pipeline_ratio", "network_ratio"]) if (row[key] !== undefined) row[key] = round2(row[key]);
      out.summary.push(row);
    }
    const t = rows.total;
    if (t.pipeline_ratio !== undefined) {
      out.ratios.push({ threads: n, used: t.used, ours_pipeline_ms: t.ours_pipeline_ms, ort_pipeline_ms: t.ort_pipeline_ms,
                        pipeline_ratio: t.pipeline_ratio, ours_network_ms: t.ours_network_ms, ort_network_ms: t.ort_network_ms,
                        network_ratio: t.network_ratio });
    }
  }
  const checked = (out.ort || []).find((r) => r.cases);
  if (checked) {
    out.checks = {};
    for (const stage of STAGES) {
      const cases = Object.entries(checked.cases).filter(([name]) => name.startsWith(`${stage}_`)).map(([, c]) => c.check).filter(Boolean);
      if (!cases.length) continue;
      out.checks[stage] = stage === "det" ? cases[0]
        : stage === "cls" ? { max_abs_diff: Math.max(...cases.map((c) => c.max_abs_diff)) }
        : { least_same_argmax: Math.min(...cases.map((c) => c.same_argmax)) };
    }
  }
}

function table(out) {
  const ms = (x) => (x === undefined ? "-" : x.toFixed(1)).padStart(9);
  const x = (r) => (r === undefined ? "-" : r.toFixed(2) + "x").padStart(9);
  const [h, w] = out.image_shape;
  const lines = [`${out.model} on ${out.image} (${w}x${h}, detector input ${out.input[1]}x${out.input[0]}, ${out.lines} lines), ` +
                 `ours on simd; medians of ${out.rounds} interleaved round${out.rounds > 1 ? "s" : ""} of ${out.repeat} runs (ms)`,
                 `${"threads".padStart(7)} ${"stage".padStart(5)} ${"ours".padStart(9)} ${"network".padStart(9)} ` +
                 `${"pre/post".padStart(9)} ${"ORT net".padStart(9)} ${"ORT pipe".padStart(9)} ${"pipeline".padStart(9)} ` +
                 `${"network".padStart(9)}`];
  for (const r of out.summary) {
    lines.push(`${String(r.threads).padStart(7)} ${r.stage.padStart(5)} ${ms(r.ours_pipeline_ms)} ${ms(r.ours_network_ms)} ` +
               `${ms(r.prepost_ms)} ${ms(r.ort_network_ms)} ${ms(r.ort_pipeline_ms)} ${x(r.pipeline_ratio)} ${x(r.network_ratio)}`);
  }
  lines.push("ours: the whole pipeline per stage; network: our networks alone on the batches the pipeline fed them; " +
             "ORT pipe = ONNX Runtime Web's network time on those batches + our pre/post; the ratios: ours / ORT " +
             "(below 1: ours is faster)");
  const said = new Set();
  const say = (line) => { if (!said.has(line)) { said.add(line); lines.push(line); } };
  for (const r of out.ours) if (r.used !== r.requested) say(`ours, ${r.requested} threads asked: ran on ${r.used} (${r.reason})`);
  for (const r of out.ours) if (r.error) say(`ours, ${r.requested} thread${r.requested > 1 ? "s" : ""}: ${r.error}`);
  for (const r of out.ort || []) {
    if (r.skipped || r.error) say(`ONNX Runtime Web, ${r.threads} threads: ${r.skipped || r.error}`);
    for (const [name, c] of Object.entries(r.cases || {})) if (c.error) say(`ONNX Runtime Web, ${name}: ${c.error}`);
  }
  if (out.checks) lines.push(`ONNX Runtime Web ${out.ort_version} against ours on the same batches: ${JSON.stringify(out.checks)}`);
  if (!out.ort) lines.push("no peer (?ocr_ort=0)");
  return lines;
}
