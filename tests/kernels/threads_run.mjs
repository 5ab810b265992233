// The threaded kernels (engine_kernels.threads.wasm) on a pool of worker_threads, through
// web/kernel-pool.js exactly as the browser worker starts it. Relaxed SIMD on Node 20 needs
// `node --experimental-wasm-relaxed-simd`.
//
//   node threads_run.mjs run JOB.json       # calls the kernels on each thread count of the job
//   node threads_run.mjs bench WASM [THREADS...] [--shapes 1024x384x384,1x576x1536:cold]   # GEMM time per call
//   node threads_run.mjs stacks WASM     # two instances on one memory: does each use its own stack?
//   node threads_run.mjs trap WASM [THREADS...]   # a kernel that traps on the pool: an error, never a hang
//
// JOB: {wasm, helper (or one per helper), threads: [1, 2, 3], timeoutMs, stop: [helpers ended after start], out,
//       buffers: {name: {file} | {bytes}}, calls: [{name, args, outputs: [buffer names], scratch}]}
// An argument is a number, or {"buffer": name, "offset": bytes} for an address in that buffer.
// With scratch: true the call is made with (0, 0) for its last two arguments first, then with a
// scratch buffer of the size it asked for. Outputs are filled with 0xff (NaN) before each call and
// written to OUT/t<threads>/<call>_<name>.bin. Prints a JSON summary (per call: the scratch it asked
// for, and whether it split among threads: the pool's test-only count engine_pool_splits grew).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const EngineKernelPool = require(path.join(ROOT, "web", "kernel-pool.js"));
const HELPER = path.join(ROOT, "web", "kernel-helper.js");

// a bump allocator over the pool's heap, 64-byte aligned (a cache line per buffer)
function heap(pool) {
  let top = pool.heapBase;
  return (bytes) => {
    const at = Math.ceil(top / 64) * 64;
    top = at + Math.max(bytes, 4);
    if (top > pool.memory.buffer.byteLength) pool.grow(top - pool.memory.buffer.byteLength);
    return at;
  };
}

async function runJob(job) {
  const bytes = fs.readFileSync(job.wasm);
  const summary = [];
  for (const wanted of job.threads) {
    const started = performance.now();
    const workers = {};
    const spawn = (url, tid) => {
      const { Worker } = require("node:worker_threads");
      return (workers[tid] = new Worker(Array.isArray(job.helper) ? job.helper[tid - 1] : url));
    };
    const pool = await EngineKernelPool.start({ bytes, threads: wanted, helperUrl: job.helper || HELPER,
                                                timeoutMs: job.timeoutMs, spawn });
    const entry = { requested: wanted, threads: pool.threads, reason: pool.reason, heapBase: pool.heapBase,
                    startMs: performance.now() - started, calls: [] };
    if (job.stop) {                                   // helpers that die after the start
      await Promise.all(job.stop.map((tid) => workers[tid].terminate()));
      await new Promise((resolve) => setTimeout(resolve, 100));
      Object.assign(entry, { threadsAfterStop: pool.threads, reasonAfterStop: pool.reason });
    }
    summary.push(entry);
    const alloc = heap(pool);
    const address = {}, size = {};
    for (const [name, spec] of Object.entries(job.buffers || {})) {
      const data = spec.file ? fs.readFileSync(spec.file) : null;
      size[name] = data ? data.length : spec.bytes;
      address[name] = alloc(size[name]);
      if (data) new Uint8Array(pool.memory.buffer, address[name], data.length).set(data);
    }
    const folder = path.join(job.out || ".", `t${wanted}`);
    fs.mkdirSync(folder, { recursive: true });
    (job.calls || []).forEach((call, index) => {
      const fn = pool.exports[call.name];
      if (!fn) throw new Error(`no export ${call.name}`);
      const args = call.args.map((a) => (a && typeof a === "object" ? address[a.buffer] + (a.offset || 0) : a));
      for (const out of call.outputs) new Uint8Array(pool.memory.buffer, address[out], size[out]).fill(0xff);
      let result, scratch = 0;
      const splits = pool.exports.engine_pool_splits ? pool.exports.engine_pool_splits() : 0;
      if (call.scratch) {
        scratch = fn(...args.slice(0, -2), 0, 0) >>> 0;
        const at = alloc(scratch * 4);
        result = fn(...args.slice(0, -2), at, scratch);
      } else {
        result = fn(...args);
      }
      entry.calls.push({ name: call.name, result: result === undefined ? null : result >>> 0, scratch,
                         split: pool.exports.engine_pool_splits ? pool.exports.engine_pool_splits() > splits : null });
      for (const out of call.outputs) {
        fs.writeFileSync(path.join(folder, `${index}_${out}.bin`),
                         new Uint8Array(pool.memory.buffer, address[out], size[out]).slice());
      }
    });
    pool.close();
  }
  return summary;
}

// A kernel that traps on the pool (a GEMM whose output runs past the memory's end: the threads
// that write those rows trap, the caller's own first rows fit), through pool.guarded as the page's
// bridge calls it: it must throw, not hang, and the pool go on with the bits it had.
async function trap(wasm, counts) {
  const bytes = fs.readFileSync(wasm);
  const rows = [];
  for (const wanted of counts) {
    const pool = await EngineKernelPool.start({ bytes, threads: wanted, helperUrl: HELPER });
    const [m, k, n] = [256, 256, 256];
    const alloc = heap(pool);
    const a = alloc(m * k * 4), b = alloc(k * n * 4), c = alloc(m * n * 4);
    const f32 = new Float32Array(pool.memory.buffer);
    for (let i = 0; i < m * k; i++) f32[a / 4 + i] = Math.sin(i) * 0.5;
    for (let i = 0; i < k * n; i++) f32[b / 4 + i] = Math.cos(i) * 0.5;
    const gemm = pool.guarded("gemm_f32");
    const need = gemm(1, m, n, k, a, 0, k, 1, b, 0, n, 1, c, 0, n, 0, 0, 0, 0, 0, 0) >>> 0;
    const scratch = alloc(need * 4);
    const product = (out) => gemm(1, m, n, k, a, 0, k, 1, b, 0, n, 1, out, 0, n, 0, 0, 0, 0, scratch, need);
    const splits = () => pool.exports.engine_pool_splits();
    product(c);
    const before = new Uint8Array(pool.memory.buffer, c, m * n * 4).slice();
    const row = { requested: wanted, threads: pool.threads, splitBefore: splits() };
    const beyond = pool.memory.buffer.byteLength - 8 * n * 4;              // 8 rows fit
    const t = performance.now();
    try {
      product(beyond);
      row.error = null;
    } catch (err) {
      row.error = err.message;
    }
    row.ms = performance.now() - t;
    await new Promise((resolve) => setTimeout(resolve, 200));               // the helper's own report
    Object.assign(row, { threadsAfter: pool.threads, reasonAfter: pool.reason, splitsAtTrap: splits() });
    new Uint8Array(pool.memory.buffer, c, m * n * 4).fill(0xff);
    product(c);
    row.sameAfter = Buffer.compare(Buffer.from(before), Buffer.from(new Uint8Array(pool.memory.buffer, c, m * n * 4))) === 0;
    row.splitAfter = splits() > row.splitsAtTrap;
    rows.push(row);
    pool.close();
  }
  return rows;
}

// time per call of gemm_f32 (m x k times k x n, B row-major) on each thread count: back to back
// ("hot": the helpers still spinning from the last call), and 20 ms apart ("cold": asleep in
// memory.atomic.wait32, so each call pays the wake-up); the median of >= 1 s of calls
const SHAPES = [[1024, 384, 384, "hot"], [1024, 384, 1536, "hot"], [1, 576, 1536, "hot"], [1, 576, 1536, "cold"],
                [1, 256, 512, "hot"], [1, 256, 512, "cold"]];

async function bench(wasm, counts, shapes = SHAPES) {
  const bytes = fs.readFileSync(wasm);
  const pause = new Int32Array(new SharedArrayBuffer(4));
  const rows = [];
  for (const wanted of counts) {
    const pool = await EngineKernelPool.start({ bytes, threads: wanted, helperUrl: HELPER });
    for (const [m, k, n, mode] of shapes) {
      const alloc = heap(pool);
      const a = alloc(m * k * 4), b = alloc(k * n * 4), c = alloc(m * n * 4);
      const f32 = new Float32Array(pool.memory.buffer);
      for (let i = 0; i < m * k; i++) f32[a / 4 + i] = Math.sin(i) * 0.5;
      for (let i = 0; i < k * n; i++) f32[b / 4 + i] = Math.cos(i) * 0.5;
      const call = (s, size) => pool.exports.gemm_f32(1, m, n, k, a, 0, k, 1, b, 0, n, 1, c, 0, n, 0, 0, 0, 0, s, size);
      const need = call(0, 0) >>> 0;
      const scratch = alloc(need * 4);
      for (let i = 0; i < 3; i++) call(scratch, need);
      const times = [];
      const t0 = performance.now();
      while (times.length < 5 || (mode === "hot" ? performance.now() - t0 < 1000 : times.length < 50)) {
        if (mode === "cold") Atomics.wait(pause, 0, 0, 20);
        const t = performance.now();
        call(scratch, need);
        times.push(performance.now() - t);
      }
      times.sort((x, y) => x - y);
      const median = times[times.length >> 1];
      rows.push({ threads: pool.threads, shape: `${m}x${k}x${n}`, mode, medianUs: +(median * 1000).toFixed(1),
                  gflops: +((2 * m * n * k) / (median * 1e6)).toFixed(1), calls: times.length });
    }
    pool.close();
  }
  return rows;
}

// Two instances on one memory, as the pool makes them: the second calls a kernel (the GEMM, a
// quantized product, attention: all keep locals on the wasm stack) with or without its stack
// pointer moved to a region of its own, as kernel-helper.js moves it. Bytes changed in the
// caller's stack [0, 1 MiB) and in that region, per kernel and case.
function stacks(wasm) {
  const module = new WebAssembly.Module(fs.readFileSync(wasm));
  const rows = [];
  for (const own of [false, true]) {
    for (const kernel of ["gemm_f32", "linear_q_f32", "attention_f32"]) {
      const memory = new WebAssembly.Memory({ initial: 256, maximum: 65536, shared: true });
      const caller = new WebAssembly.Instance(module, { env: { memory } }).exports;
      const helper = new WebAssembly.Instance(module, { env: { memory } }).exports;
      const top = Math.ceil(caller.__heap_base.value / 16) * 16 + (1 << 20);
      memory.grow(64);
      if (own) helper.__stack_pointer.value = top;
      const bytes = new Uint8Array(memory.buffer), floats = new Float32Array(memory.buffer);
      const x = top, w = x + 16384, y = w + 65536, scratch = y + 16384;
      for (let i = 0; i < 65536; i++) bytes[w + i] = (i * 7) & 0x3f;
      for (let i = 0; i < 4096; i++) floats[x / 4 + i] = Math.sin(i);
      const region = () => [bytes.slice(0, 1 << 20), bytes.slice(top - (1 << 20), top)];
      const before = region();
      const q = [x, 256, 128, 16, 1];
      const result = {
        gemm_f32: () => helper.gemm_f32(1, 16, 16, 16, x, 0, 16, 1, x, 0, 16, 1, y, 0, 16, 0, 0, 0, 0, scratch, 200000),
        linear_q_f32: () => helper.linear_q_f32(8, 4, 16, 256, x, 256, w, 0, y, scratch, 200000),    // q8_0
        attention_f32: () => helper.attention_f32(1, 2, 2, 8, 8, 16, 16, ...q, ...q, ...q, 0, 0, 0, 0, 0, 0, 1, 0.25,
                                                  y, scratch, 200000),
      }[kernel]();
      const after = region();
      const changed = (i) => before[i].reduce((n, v, j) => n + (v !== after[i][j]), 0);
      rows.push({ kernel, ownStack: own, result: result >>> 0, callerStackChanged: changed(0), regionChanged: changed(1) });
    }
  }
  return rows;
}

const [command, ...rest] = process.argv.slice(2);
if (command === "run") {
  const job = JSON.parse(fs.readFileSync(rest[0], "utf8"));
  process.stdout.write(JSON.stringify(await runJob(job)) + "\n");
} else if (command === "bench") {       // [--shapes MxKxN[:cold],...] picks other products
  const at = rest.indexOf("--shapes");
  const shapes = at < 0 ? SHAPES : rest[at + 1].split(",").map((text) => {
    const [dims, mode = "hot"] = text.split(":");
    return [...dims.split("x").map(Number), mode];
  });
  const counts = rest.slice(1, at < 0 ? undefined : at).map(Number);
  process.stdout.write(JSON.stringify(await bench(rest[0], counts.length ? counts : [1, 2], shapes)) + "\n");
} else if (command === "stacks") {
  process.stdout.write(JSON.stringify(stacks(rest[0])) + "\n");
} else if (command === "trap") {
  process.stdout.write(JSON.stringify(await trap(rest[0], rest.slice(1).map(Number))) + "\n");
} else {
  process.stderr.write("usage: node threads_run.mjs run JOB.json | bench WASM [THREADS...] | stacks WASM | trap WASM [THREADS...]\n");
  process.exit(2);
}
