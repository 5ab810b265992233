// The Detect card's hot path, in JavaScript (window.detectLive): a photo's or a camera frame's RGBA
// pixels to the worker, and the boxes, labels and skeletons it answers drawn on a canvas over the
// image or the video. The card's Python (cards/object_detection.py) wires the controls to it; a
// frame per call through MicroPython's FFI would cost more than the drawing itself.
//
// Live mode keeps one frame in flight and drops the rest: a frame is grabbed only when the answer
// for the previous one came back, so the overlay is never more than one analysed frame behind the
// video. Frames go as RGBA bytes: reading a 640x480 frame costs ~1 ms (VideoFrame.copyTo) to ~3 ms
// (a canvas), where a JPEG encode alone costs ~5-8 ms and its decode in the worker more
// (bench.html?yolo=1 measures them). The worker letterboxes, runs the model and its
// post-processing as natively (engine/tasks/object_detection.py).
"use strict";

// the worker's entry point for both tasks (engine/tasks/object_detection.py):
// detect_image(pixels, width, height, size, threshold, task) -> JSON {detections, timings: {pre,
// network, post} (ms), input: [h, w], device, ...}
const ENTRY = "detect_image";
const TASKS = ["object-detection", "pose-estimation"];

// COCO's 17 keypoints, by index, and the skeleton's limbs between them (ultralytics' pose drawing)
const KEYPOINTS = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
                   "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
                   "right_knee", "left_ankle", "right_ankle"];
const SKELETON = [[15, 13], [13, 11], [16, 14], [14, 12], [11, 12], [5, 11], [6, 12], [5, 6], [5, 7], [6, 8],
                  [7, 9], [8, 10], [1, 2], [0, 1], [0, 2], [1, 3], [2, 4], [3, 5], [4, 6]];
const LIMB_COLOURS = ["#3399ff", "#3399ff", "#3399ff", "#3399ff", "#ff33ff", "#ff33ff", "#ff33ff", "#ff8000",
                      "#ff8000", "#ff8000", "#ff8000", "#ff8000", "#00ff00", "#00ff00", "#00ff00", "#00ff00",
                      "#00ff00", "#00ff00", "#00ff00"];
const KEYPOINT_MIN_SCORE = 0.5;                     // a keypoint is drawn when visible (as ultralytics draws)
// ultralytics' 20-colour palette, by class index
const PALETTE = ["#ff3838", "#ff9d97", "#ff701f", "#ffb21d", "#cfd231", "#48f90a", "#92cc17", "#3ddb86",
                 "#1a9334", "#00d4bb", "#2c99a8", "#00c2ff", "#344593", "#6473ff", "#0018ec", "#8438ff",
                 "#520085", "#cb38ff", "#ff95c8", "#ff37c7"];

const colourOf = (label, labels) => {
  const at = labels ? labels.indexOf(label) : -1;
  let i = at >= 0 ? at : [...String(label)].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7);
  return PALETTE[i % PALETTE.length];
};

// The detections drawn on `canvas` (sized to the image's pixels: boxes come in its coordinates).
function draw(canvas, detections, task, labels = null) {
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const line = Math.max(2, Math.round(Math.max(canvas.width, canvas.height) / 320));
  const font = Math.max(12, line * 6);
  ctx.lineWidth = line;
  ctx.font = `${font}px system-ui, sans-serif`;
  ctx.textBaseline = "top";
  for (const d of detections) {
    const { xmin, ymin, xmax, ymax } = d.box;
    const name = d.label ?? "person";
    const colour = task === "pose-estimation" ? PALETTE[0] : colourOf(name, labels);
    ctx.strokeStyle = colour;
    ctx.strokeRect(xmin, ymin, xmax - xmin, ymax - ymin);
    const text = `${name} ${(d.score * 100).toFixed(0)}%`;
    const width = ctx.measureText(text).width + 2 * line;
    const top = ymin - font - line >= 0 ? ymin - font - line : ymin;
    ctx.fillStyle = colour;
    ctx.fillRect(xmin - line / 2, top, width, font + line);
    ctx.fillStyle = "#fff";
    ctx.fillText(text, xmin + line / 2, top + line / 2);
    if (d.keypoints) drawSkeleton(ctx, d.keypoints, line);
  }
}

function drawSkeleton(ctx, keypoints, line) {
  const seen = (k) => k && k.score >= KEYPOINT_MIN_SCORE;
  ctx.lineWidth = line;
  SKELETON.forEach(([a, b], i) => {
    const p = keypoints[a], q = keypoints[b];
    if (!seen(p) || !seen(q)) return;
    ctx.strokeStyle = LIMB_COLOURS[i];
    ctx.beginPath();
    ctx.moveTo(p.x, p.y);
    ctx.lineTo(q.x, q.y);
    ctx.stroke();
  });
  for (const k of keypoints) {
    if (!seen(k)) continue;
    ctx.fillStyle = "#00ff00";
    ctx.beginPath();
    ctx.arc(k.x, k.y, line * 1.5, 0, 2 * Math.PI);
    ctx.fill();
  }
}

// One call of the worker's entry point on RGBA pixels (their buffer is transferred to the worker);
// options: {size, threshold}.
async function detect(client, task, pixels, width, height, options) {
  if (!TASKS.includes(task)) throw new Error(`no detection task named ${task}`);
  const t = performance.now();
  const args = [pixels, width, height, Number(options.size) || 640, Number(options.threshold ?? 0.25), task];
  const reply = await client.call(ENTRY, { args }, [pixels.buffer]);
  const result = typeof reply === "string" ? JSON.parse(reply) : reply;
  result.wall_ms = performance.now() - t;             // the worker's time plus the messages both ways
  return result;
}

// The still image's pixels, as the browser decodes it (EXIF orientation applied, no colour
// management), drawn on `still` (sized to it); refused above maxPixels before reading them.
async function decode(blob, name, still, maxPixels) {
  if (!blob.size) throw new Error(`${name}: the file is empty`);
  const head = new Uint8Array(await blob.slice(0, 1 << 16).arrayBuffer());
  const declared = headerSize(head);
  if (declared && (!declared.width || !declared.height)) throw new Error(`${name}: the image is empty (0 pixels)`);
  if (declared && declared.width * declared.height > maxPixels) {
    throw new Error(`${name}: ${declared.width}x${declared.height} is too large (limit ${maxPixels.toLocaleString("en")} pixels)`);
  }
  // a browser shows what it could decode of a file cut short (the rest grey): refused here instead
  const tail = new Uint8Array(await blob.slice(Math.max(0, blob.size - 64)).arrayBuffer());
  const ends = (...bytes) => tail.some((_, i) => bytes.every((b, j) => tail[i + j] === b));
  if ((head[0] === 0xff && head[1] === 0xd8 && !ends(0xff, 0xd9)) ||
      (head[0] === 0x89 && head[1] === 0x50 && !ends(0x49, 0x45, 0x4e, 0x44))) {
    throw new Error(`${name}: the file is cut short (its end marker is missing): a truncated image`);
  }
  let bitmap;
  try {
    bitmap = await createImageBitmap(blob, { imageOrientation: "from-image", colorSpaceConversion: "none",
                                             premultiplyAlpha: "none" });
  } catch {
    throw new Error(`${name}: the browser cannot decode this file as an image`);
  }
  const { width, height } = bitmap;
  if (!width || !height) {
    bitmap.close();
    throw new Error(`${name}: the image is empty (0 pixels)`);
  }
  if (width * height > maxPixels) {
    bitmap.close();
    throw new Error(`${name}: ${width}x${height} is too large (limit ${maxPixels.toLocaleString("en")} pixels)`);
  }
  still.width = width;
  still.height = height;
  const ctx = still.getContext("2d", { willReadFrequently: true });
  ctx.drawImage(bitmap, 0, 0);
  bitmap.close();
  return ctx.getImageData(0, 0, width, height);
}

// What the card shows of an answer: the list (its detections also as JSON in data-result, for the
// tests), their count, the time a frame takes and its parts, frames/s in live mode.
function show(section, reply, times = null) {
  const $ = (name) => section.querySelector(`[data-testid=detect-${name}]`);
  const list = $("list");
  const escape = (text) => String(text).replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
  list.innerHTML = reply.detections.map((d) => `<li data-label="${escape(d.label ?? "person")}" ` +
    `data-score="${d.score}"><span>${escape(d.label ?? "person")}</span><span>${(d.score * 100).toFixed(1)}%</span></li>`)
    .join("");
  list.dataset.result = JSON.stringify(reply.detections);
  list.dataset.frames = String(times ? times.frames : 0);
  list.dataset.state = "done";
  $("count").textContent = String(reply.detections.length);
  $("backend").textContent = reply.device || "–";
  $("ms").textContent = (times ? times.frame_ms : reply.wall_ms ?? reply.ms).toFixed(0);
  $("fps").textContent = times ? times.fps.toFixed(1) : "–";
  const t = reply.timings || {};
  const part = (label, ms) => (ms === undefined || ms === null ? null : `${label} ${ms.toFixed(1)}`);
  const parts = [part("pre-processing", t.pre), part("network", t.network), part("post-processing", t.post),
                 part("in the worker", t.pre === undefined ? reply.ms : undefined),
                 times && part("frame grab", times.grab_ms), times && part("drawing", times.draw_ms)].filter(Boolean);
  $("split").textContent = parts.length ? `${parts.join(" · ")} ms` + (reply.input ? ` (input ${reply.input.join("x")})` : "") : "";
}

// The size a PNG, GIF or JPEG declares in its header ({width, height}), or null: read before the
// browser decodes it, so that a huge image is refused before its pixels are allocated.
function headerSize(b) {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  if (b.length >= 24 && view.getUint32(0) === 0x89504e47 && view.getUint32(12) === 0x49484452) {
    return { width: view.getUint32(16), height: view.getUint32(20) };                    // PNG's IHDR
  }
  if (b.length >= 10 && view.getUint32(0) === 0x47494638) {                                 // "GIF8"
    return { width: view.getUint16(6, true), height: view.getUint16(8, true) };
  }
  if (b.length >= 4 && view.getUint16(0) === 0xffd8) {                                      // JPEG: find its SOFn
    for (let at = 2; at + 9 < b.length;) {
      if (b[at] !== 0xff) return null;
      const marker = b[at + 1];
      if (marker === 0xff) { at += 1; continue; }
      if (marker >= 0xc0 && marker <= 0xcf && ![0xc4, 0xc8, 0xcc].includes(marker)) {
        return { width: view.getUint16(at + 7), height: view.getUint16(at + 5) };
      }
      at += 2 + view.getUint16(at + 2);
    }
  }
  return null;
}

// A frame of `source` (a video or a canvas, width x height) as RGBA, scaled by the browser
// (bilinear, ~1-3 ms) to fit size x size when it is larger, through an OffscreenCanvas kept in
// `cache`. Live frames are scaled here rather than by the worker's letterbox (OpenCV's fixed-point
// resize in NumPy, which ultralytics' results are compared against: 30-100 ms for 640x480 to 320 in
// Pyodide here); the worker then only pads them. A photo goes whole, as natively.
function readFrame(source, width, height, size, cache) {
  const r = Math.min(1, size / width, size / height);
  const w = Math.max(1, Math.round(width * r)), h = Math.max(1, Math.round(height * r));
  if (!cache.canvas || cache.canvas.width !== w || cache.canvas.height !== h) {
    cache.canvas = new OffscreenCanvas(w, h);
    cache.context = cache.canvas.getContext("2d", { willReadFrequently: true });
  }
  cache.context.drawImage(source, 0, 0, width, height, 0, 0, w, h);
  return { pixels: cache.context.getImageData(0, 0, w, h).data, width: w, height: h };
}

// The camera: frames from the card's <video> through an OffscreenCanvas to the worker, one at a
// time; each answer drawn on the overlay and shown (show). onError(message) when a call fails
// (the camera then stops).
class Live {
  // onNotice(reply): a reply that says the backend changed (a lost GPU), for the page to follow.
  constructor(client, section, onError, onNotice = null) {
    Object.assign(this, { client, section, onError, onNotice });
    this.video = section.querySelector("video");
    this.overlay = section.querySelector("canvas.overlay");
    this.running = false;
    this.loop = null;
    this.canvas = null;                               // where frames are read when VideoFrame cannot
    this.copyFrames = null;                           // whether VideoFrame.copyTo(RGBA) works here
    this.last = null;                                 // the last frame analysed: its pixels and answer
    this.frames = 0;
  }

  async start(options) {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error("this browser gives no camera to this page (a camera needs a page served over HTTPS or from localhost)");
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ video: { width: { ideal: 640 }, height: { ideal: 480 } },
                                                           audio: false });
    } catch (err) {
      const why = { NotAllowedError: "permission to use the camera was refused",
                    NotFoundError: "no camera was found", NotReadableError: "the camera is in use by another program" };
      throw new Error(`the camera could not start: ${why[err.name] || err.message || err}`);
    }
    this.video.srcObject = stream;
    this.video.muted = true;
    await this.video.play();
    this.options = options;
    this.running = true;
    this.frames = 0;
    this.intervals = [];
    this.loop = this.run();
    return { width: this.video.videoWidth, height: this.video.videoHeight };
  }

  // the task, size or threshold for the next frames
  set(options) { this.options = options; }

  // The video's current frame as RGBA, at most size x size (readFrame): a frame that needs no
  // scaling is copied out of a VideoFrame (~1 ms for 640x480 here) where the browser can.
  async grab(size) {
    const { videoWidth: width, videoHeight: height } = this.video;
    if (Math.max(width, height) <= size && this.copyFrames !== false && typeof VideoFrame === "function") {
      let frame = null;
      try {
        frame = new VideoFrame(this.video);
        const { width: w, height: h } = frame.visibleRect;
        const pixels = new Uint8ClampedArray(frame.allocationSize({ format: "RGBA" }));
        await frame.copyTo(pixels, { format: "RGBA" });
        this.copyFrames = true;
        return { pixels, width: w, height: h };
      } catch (err) {
        if (this.copyFrames) throw err;
        this.copyFrames = false;                      // this browser cannot convert a frame to RGBA
      } finally {
        if (frame) frame.close();
      }
    }
    return readFrame(this.video, width, height, size, this);
  }

  async run() {
    let previous = null;
    while (this.running) {
      if (this.video.readyState < 2 || !this.video.videoWidth) {
        await new Promise((resolve) => setTimeout(resolve, 30));
        continue;
      }
      const t0 = performance.now();
      const { pixels, width, height } = await this.grab(Number(this.options.size) || 640);
      const kept = pixels.slice();                     // the worker gets (and keeps) a copy
      const t1 = performance.now();
      const { task, ...options } = this.options;
      let reply;
      try {
        reply = await detect(this.client, task, kept, width, height, options);
      } catch (err) {
        this.running = false;
        this.stopCamera();
        this.onError(String(err.message || err));
        return;
      }
      const t2 = performance.now();
      if (reply.notice && this.onNotice) this.onNotice(reply);
      if (this.overlay.width !== width || this.overlay.height !== height) {
        this.overlay.width = width;
        this.overlay.height = height;
      }
      draw(this.overlay, reply.detections, task, reply.labels || null);
      const t3 = performance.now();
      this.last = { reply, task, pixels, width, height };
      this.frames += 1;
      const interval = previous === null ? t3 - t0 : t3 - previous;
      previous = t3;
      this.intervals.push(interval);
      if (this.intervals.length > 10) this.intervals.shift();
      const fps = (1000 * this.intervals.length) / this.intervals.reduce((a, b) => a + b, 0);
      show(this.section, reply, { grab_ms: t1 - t0, call_ms: t2 - t1, draw_ms: t3 - t2, frame_ms: interval, fps,
                                  frames: this.frames });
    }
  }

  stopCamera() {
    const stream = this.video.srcObject;
    if (stream) for (const track of stream.getTracks()) track.stop();
    this.video.srcObject = null;
  }

  // Stop after the frame in flight; the last analysed frame stays on `still` (the pixels the worker
  // saw) with its detections on the overlay. Gives its task, or null when no frame was analysed.
  async stop(still) {
    this.running = false;
    if (this.loop) await this.loop;
    this.loop = null;
    this.stopCamera();
    if (!this.last) return null;
    const { pixels, width, height } = this.last;
    still.width = width;
    still.height = height;
    still.getContext("2d").putImageData(new ImageData(pixels, width, height), 0, 0);
    return this.last.task;
  }
}

window.detectLive = { ENTRY, KEYPOINTS, draw, detect, decode, readFrame, show, Live };
