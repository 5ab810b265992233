// The threaded kernels (engine_kernels.threads.wasm) on a pool of worker_threads, through
// web/kernel-pool.js exactly as the browser worker starts it. Relaxed SIMD on Node 20 needs
// `node --experimental-wasm-relaxed-simd`.
//
//   node threads_run.mjs run JOB.json       # calls the kernels on each thread count of the job
//   node threads_run.mjs bench WASM [THREADS...]    # GEMM timings per call (1 and 2 threads)
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

// time per call of gemm_f32 (m x k times k x n, B row-major) on each thread count
async function bench(wasm, counts) {
  const bytes = fs.readFileSync(wasm);
  const shapes = [[1024, 384, 384], [1024, 384, 1536], [1, 576, 1536], [1, 1536, 576]];
  const rows = [];
  for (const wanted of counts) {
    const pool = await EngineKernelPool.start({ bytes, threads: wanted, helperUrl: HELPER });
    for (const [m, k, n] of shapes) {
      const alloc = heap(pool);
      const a = alloc(m * k * 4), b = alloc(k * n * 4), c = alloc(m * n * 4);
      const f32 = new Float32Array(pool.memory.buffer);
      for (let i = 0; i < m * k; i++) f32[a / 4 + i] = Math.sin(i) * 0.5;
      for (let i = 0; i < k * n; i++) f32[b / 4 + i] = Math.cos(i) * 0.5;
      const call = (s, size) => pool.exports.gemm_f32(1, m, n, k, a, 0, k, 1, b, 0, n, 1, c, 0, n, 0, 0, 0, 0, s, size);
      const need = call(0, 0) >>> 0;
      const scratch = alloc(need * 4);
      for (let i = 0; i < 3; i++) call(scratch, need);
      let calls = 0;
      const t0 = performance.now();
      let elapsed = 0;
      const times = [];
      while (elapsed < 1000 || calls < 5) {
        const t = performance.now();
        call(scratch, need);
        times.push(performance.now() - t);
        calls++;
        elapsed = performance.now() - t0;
      }
      times.sort((x, y) => x - y);
      const median = times[times.length >> 1];
      rows.push({ threads: pool.threads, shape: `${m}x${k}x${n}`, medianUs: +(median * 1000).toFixed(1),
                  gflops: +((2 * m * n * k) / (median * 1e6)).toFixed(1), calls });
    }
    pool.close();
  }
  return rows;
}

const [command, ...rest] = process.argv.slice(2);
if (command === "run") {
  const job = JSON.parse(fs.readFileSync(rest[0], "utf8"));
  process.stdout.write(JSON.stringify(await runJob(job)) + "\n");
} else if (command === "bench") {
  const counts = rest.slice(1).map(Number);
  process.stdout.write(JSON.stringify(await bench(rest[0], counts.length ? counts : [1, 2])) + "\n");
} else {
  process.stderr.write("usage: node threads_run.mjs run JOB.json | bench WASM [THREADS...]\n");
  process.exit(2);
}
