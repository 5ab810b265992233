// The bench page's YOLO section (bench.html?yolo=1): YOLOv10n and YOLO11n-pose, batch 1, at 640 and
// 320 (?yolo_sizes=640,320), the network alone on our backends (simd, and webgpu when the page has
// a real GPU; ?yolo=simd,webgpu picks) against ONNX Runtime Web on 1 thread (?yolo_ort=0 skips it) with the
// ultralytics ONNX exports (`python build.py --peers`), on the same square letterboxed inputs, in
// ?yolo_rounds=N interleaved rounds (the peer first in every other round; medians shown), its
// outputs checked against ours; then a live-camera-style loop at 320 on simd: ?yolo_frames=N frames
// of a fixed 640x480 image grabbed from a canvas as the camera path grabs them, sent to the worker
// (letterbox, network, NMS, as the Detect card calls them) and drawn, for frames/s end to end.
const SIZES = [640, 320];
const TASKS = ["object-detection", "pose-estimation"];
// the ultralytics exports the build places in peers/onnxruntime/ (buildtools/peers.py YOLO_ONNX), by
// our registry name and size: yolo11n_pose at 640 -> yolo11n-pose-640.onnx
const ORT_FILE = (model, size) => `${model.replace(/_/g, "-")}-${size}.onnx`;
const FRAME = { width: 640, height: 480 };          // what a webcam gives by default
const IMAGES = ["samples/detection/bus.jpg", "samples/astronaut.png"];    // the first the site has

const median = (list) => {
  const sorted = [...list].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length ? (sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2) : undefined;
};
const round = (x) => Math.round(x * 10) / 10;
const list = (text, fallback) => (text ? text.split(",").filter(Boolean) : fallback);

// A fixed "camera frame": the site's first sample image fitted into 640x480 (black bars), as RGBA.
async function cameraFrame() {
  for (const url of IMAGES) {
    const reply = await fetch(url).catch(() => null);
    if (!reply || !reply.ok) continue;
    const bitmap = await createImageBitmap(await reply.blob());
    const canvas = new OffscreenCanvas(FRAME.width, FRAME.height);
    const ctx = canvas.getContext("2d", { willReadFrequently: true });
    const r = Math.min(FRAME.width / bitmap.width, FRAME.height / bitmap.height);
    const w = Math.round(bitmap.width * r), h = Math.round(bitmap.height * r);
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, FRAME.width, FRAME.height);
    ctx.drawImage(bitmap, (FRAME.width - w) >> 1, (FRAME.height - h) >> 1, w, h);
    bitmap.close();
    return { url, canvas, ctx, image: ctx.getImageData(0, 0, FRAME.width, FRAME.height) };
  }
  throw new Error(`none of ${IMAGES.join(", ")} is on this site`);
}

// ONNX Runtime Web (bench-ort.js, a worker of its own) on 1 thread on every case.
function runOrt(cases, repeat) {
  const decode = (f) => {
    const bytes = Uint8Array.from(atob(f.base64), (c) => c.charCodeAt(0));
    return { type: f.type, dims: f.dims, data: new Float32Array(bytes.buffer) };
  };
  const jobs = Object.entries(cases).map(([name, c]) => ({
    name, model: ORT_FILE(name.slice(0, name.lastIndexOf("_")), name.slice(name.lastIndexOf("_") + 1)),
    feeds: Object.fromEntries(Object.entries(c.feeds).map(([k, f]) => [k, decode(f)])),
  }));
  return new Promise((resolve) => {
    const worker = new Worker("bench-ort.js", { type: "module" });
    const done = (result) => { worker.terminate(); resolve(result); };
    worker.onerror = (e) => done({ error: `the ONNX Runtime Web worker failed: ${e.message || "could not start"}` });
    worker.onmessage = ({ data }) => done(data.ok ? { version: data.version, cases: data.cases } : { error: data.error });
    worker.postMessage({ threads: 1, repeat, cases: jobs });
  });
}

// How far the peer's output is from ours, at our best anchors: raw (1, channels, anchors) outputs
// compared value by value (boxes in pixels, probabilities); an end-to-end export's (1, 300, 6) rows
// [x1, y1, x2, y2, score, class] matched to our anchors' boxes, above 0.25.
function check(theirs, ours) {
  const [, a, b] = theirs.dims;
  if (a === ours.channels) {
    let box = 0, score = 0;
    ours.anchors.forEach((anchor, i) => {
      for (let c = 0; c < ours.channels; c++) {
        const d = Math.abs(theirs.data[c * b + anchor] - ours.values[i][c]);
        if (c < 4) box = Math.max(box, d); else score = Math.max(score, d);
      }
    });
    return { max_box_diff: round(box * 100) / 100, max_score_diff: Math.round(score * 1e4) / 1e4 };
  }
  if (b === 6) {
    const rows = [];
    for (let i = 0; i < a; i++) if (theirs.data[i * 6 + 4] > 0.25) rows.push(theirs.data.slice(i * 6, i * 6 + 6));
    const iou = (p, q) => {
      const w = Math.max(0, Math.min(p[2], q[2]) - Math.max(p[0], q[0])), h = Math.max(0, Math.min(p[3], q[3]) - Math.max(p[1], q[1]));
      const inter = w * h;
      return inter / ((p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter);
    };
    let least = 1, score = 0;
    for (const row of rows) {
      let best = null, bestIou = -1;
      for (const v of ours.values) {
        const box = [v[0] - v[2] / 2, v[1] - v[3] / 2, v[0] + v[2] / 2, v[1] + v[3] / 2];
        const o = iou(row, box);
        if (o > bestIou) { bestIou = o; best = v; }
      }
      least = Math.min(least, bestIou);
      if (best) score = Math.max(score, Math.abs(row[4] - best[4 + row[5]]));
    }
    return { detections: rows.length, min_iou: Math.round(least * 1e4) / 1e4, max_score_diff: Math.round(score * 1e4) / 1e4 };
  }
  return { check: `output ${JSON.stringify(theirs.dims)}, ours (1, ${ours.channels}, anchors)` };
}

// The live loop: `frames` frames at `size`, each grabbed from the canvas as the card grabs a video
// frame, detected in the worker, drawn on an overlay; frames/s over the loop and each part's median.
async function liveLoop(client, frame, task, size, frames) {
  const overlay = new OffscreenCanvas(1, 1);
  const live = window.detectLive;
  const parts = { grab_ms: [], call_ms: [], pre_ms: [], network_ms: [], post_ms: [], draw_ms: [], jpeg_ms: [] };
  const cache = {};
  const grab = () => live.readFrame(frame.canvas, FRAME.width, FRAME.height, size, cache);   // as the card reads a video frame
  const first = grab();
  await live.detect(client, task, first.pixels, first.width, first.height, { size, threshold: 0.25 });     // untimed
  let found = 0;
  const start = performance.now();
  for (let i = 0; i < frames; i++) {
    const t0 = performance.now();
    const { pixels, width, height } = grab();
    const t1 = performance.now();
    const reply = await live.detect(client, task, pixels, width, height, { size, threshold: 0.25 });
    const t2 = performance.now();
    overlay.width = width;
    overlay.height = height;
    live.draw(overlay, reply.detections, task);
    const t3 = performance.now();
    found = reply.detections.length;
    parts.grab_ms.push(t1 - t0);
    parts.call_ms.push(t2 - t1);
    parts.draw_ms.push(t3 - t2);
    for (const k of ["pre", "network", "post"]) if (reply.timings && reply.timings[k] !== undefined) parts[`${k}_ms`].push(reply.timings[k]);
  }
  const seconds = (performance.now() - start) / 1000;
  // the other way to send a frame: a JPEG (its encoding alone, outside the loop)
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    await frame.canvas.convertToBlob({ type: "image/jpeg", quality: 0.9 });
    parts.jpeg_ms.push(performance.now() - t);
  }
  return { task, size, frames, fps: round(frames / seconds), frame_ms: round((seconds * 1000) / frames), detections: found,
           ...Object.fromEntries(Object.entries(parts).filter(([, v]) => v.length).map(([k, v]) => [k, round(median(v))])) };
}

// `info`: the worker's boot reply (its backends and the site's registry).
export async function benchYolo(client, results, params, info) {
  const devices = info.devices;
  const card = document.getElementById("yolo-card");
  const cardStatus = document.getElementById("yolo-status");
  card.hidden = false;
  const sizes = list(params.get("yolo_sizes"), SIZES).map(Number);
  const rounds = Number(params.get("yolo_rounds")) || 3;
  const repeat = Number(params.get("yolo_repeat")) || 5;
  const frames = Number(params.get("yolo_frames")) || 30;
  const withPeer = params.get("yolo_ort") !== "0";
  const asked = params.get("yolo");
  // by default webgpu only on a real GPU: SwiftShader (a CPU emulation) takes minutes here
  const gpu = devices.includes("webgpu") && !/swiftshader/i.test(String(info.adapter));
  const ours = (asked && asked !== "1" ? asked.split(",") : ["simd", ...(gpu ? ["webgpu"] : [])])
    .filter((d) => devices.includes(d));
  if (!window.detectLive) await import("./detect-live.js");
  cardStatus.textContent = "loading the models";
  await client.setBackend(ours[0] || "simd");
  const served = TASKS.filter((task) => info.registry.some((m) => m.tasks.includes(task)));
  if (!served.length) throw new Error("this site serves no YOLO model (build with --models yolov10n,yolo11n_pose)");
  for (const task of served) await client.loadTask(task);
  const frame = await cameraFrame();
  const pixels = () => frame.ctx.getImageData(0, 0, FRAME.width, FRAME.height).data;
  const out = results.yolo = { image: frame.url, frame: [FRAME.width, FRAME.height], sizes, rounds, repeat, ours: [], ort: [] };
  const reference = withPeer ? await client.python("bench_yolo_cases", pixels(), FRAME.width, FRAME.height, sizes) : null;
  const runOurs = async (round) => {
    for (const device of ours) {
      cardStatus.textContent = `round ${round + 1}: ours on ${device}`;
      await client.setBackend(device);
      const r = await client.python("bench_yolo", pixels(), FRAME.width, FRAME.height, sizes, repeat);
      out.ours.push({ round, device: r.device, cases: r.cases });
    }
  };
  const runPeer = async (round) => {
    cardStatus.textContent = `round ${round + 1}: ONNX Runtime Web, 1 thread`;
    const r = await runOrt(reference.cases, repeat);
    for (const c of r.cases || []) {             // its output checked against ours, then dropped (MBs each)
      if (c.output) c.check = check(c.output, reference.cases[c.name]);
      delete c.output;
    }
    out.ort.push({ round, ...r });
    out.ort_version ||= r.version || null;
  };
  for (let round = 0; round < rounds; round++) {
    for (const run of round % 2 && reference ? [runPeer, runOurs] : [runOurs, runPeer]) {
      if (run === runOurs || reference) await run(round);
    }
  }
  await client.setBackend(ours[0] || "simd");
  out.live = [];
  for (const task of served) {
    cardStatus.textContent = `live loop: ${task} at 320`;
    out.live.push(await liveLoop(client, frame, task, 320, frames));
  }
  document.getElementById("yolo-table").textContent = table(out, reference).join("\n");
  cardStatus.textContent = "done";
}

// One line per case: ours per backend, the peer, ours/peer (below 1 ours is faster), medians over
// the rounds; the peer's output checks; the live loops.
function table(out, reference) {
  const names = [...new Set(out.ours.flatMap((r) => Object.keys(r.cases)))];
  const devices = [...new Set(out.ours.map((r) => r.device))];
  const ms = (x) => (x === undefined ? "-" : x.toFixed(1)).padStart(9);
  const rounds = out.rounds > 1 ? `   medians of ${out.rounds} rounds` : "";
  const lines = [`${"case".padEnd(20)} ${devices.map((d) => `${d} ms`.padStart(11)).join(" ")} ${"ORT 1T ms".padStart(10)} ` +
                 `${"ours/ORT".padStart(9)}${rounds}`];
  out.ratios = [];
  for (const name of names) {
    const mine = devices.map((d) => median(out.ours.filter((r) => r.device === d && r.cases[name] !== undefined).map((r) => r.cases[name])));
    const theirs = median(out.ort.filter((r) => r.cases).map((r) => r.cases.find((c) => c.name === name))
      .filter((c) => c && c.median_ms !== undefined).map((c) => c.median_ms));
    const ratio = mine[0] !== undefined && theirs !== undefined ? mine[0] / theirs : undefined;
    if (ratio !== undefined) out.ratios.push({ case: name, device: devices[0], ours_ms: round(mine[0]), ort_ms: round(theirs), ratio: Math.round(ratio * 100) / 100 });
    lines.push(`${name.padEnd(20)} ${mine.map((m) => ms(m).padStart(11)).join(" ")} ${ms(theirs).padStart(10)} ` +
               `${(ratio === undefined ? "-" : ratio.toFixed(2) + "x").padStart(9)}`);
  }
  const first = out.ort.find((r) => r.cases);
  for (const r of out.ort) if (r.error) lines.push(`ONNX Runtime Web: ${r.error}`);
  if (first && reference) {
    out.checks = {};
    for (const c of first.cases) {
      if (c.error) { lines.push(`ONNX Runtime Web, ${c.name}: ${c.error}`); continue; }
      out.checks[c.name] = c.check;
      lines.push(`ONNX Runtime Web ${out.ort_version} against ours, ${c.name}: ${JSON.stringify(out.checks[c.name])}`);
    }
  }
  lines.push("", `live loop on ${out.frame.join("x")} frames of ${out.image} at 320 (grab scaled to fit 320, worker: ` +
                 "letterbox + network + NMS, draw):");
  for (const l of out.live) {
    lines.push(`${l.task.padEnd(18)} ${l.fps.toFixed(1)} frames/s, ${l.frame_ms.toFixed(1)} ms a frame: grab ${l.grab_ms} · ` +
               `worker call ${l.call_ms} (pre ${l.pre_ms ?? "-"} · network ${l.network_ms ?? "-"} · post ${l.post_ms ?? "-"}) · ` +
               `draw ${l.draw_ms} ms; ${l.detections} found; a JPEG encode of the frame instead: ${l.jpeg_ms} ms`);
  }
  return lines;
}
