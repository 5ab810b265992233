// Python's way to the kernel pool (web/kernel-pool.js): engine/backends/simd/heap.py writes a
// descriptor of the calls to make (the export, its arguments with addresses in the pool's heap,
// the bytes to copy in from Pyodide's memory and back out) into Pyodide's memory, and calls
// run(address): one crossing per call, or per replayed step. Layout (32-bit words, little-endian):
//
//   calls, then per call: export, argument count, copies in, copies out, the arguments
//   (floats as float32 where the export takes one), (from, to, bytes) per copy in, then per copy out
//
// A call that returns non-zero (a kernel asking for more scratch) stops the run there: its outputs
// are not copied back and run returns that value.
//
// Loads as a classic worker script (importScripts: defines self.EngineKernelBridge) and as a
// CommonJS module under Node.js (the tests).
"use strict";

(function (root) {
  // the float arguments of the pool's exports (their other arguments are i32)
  const FLOATS = { attention_f32: [29] };

  // pool: what EngineKernelPool.start resolved to; pyodide: the loaded Pyodide. The object
  // returned is what Python holds (engine.backends.simd.heap.HeapLibrary's `bridge`).
  function connect(pool, pyodide) {
    const module = pyodide._module;
    let table = [];
    let heap = new Uint8Array(pool.memory.buffer);
    const views = () => {
      if (heap.byteLength !== pool.memory.buffer.byteLength) heap = new Uint8Array(pool.memory.buffer);
      return heap;
    };

    // where a run's time goes, when profiling: copies in and out, the kernels (the split included)
    let profile = null;
    const now = () => performance.now();

    // one loop for plain and profiled runs: the profile's branches are per call, not per element
    function run(address) {
      const words = module.HEAPU32, ints = module.HEAP32, floats = module.HEAPF32, own = module.HEAPU8;
      const shared = views();
      let at = address >>> 2;
      const calls = words[at++];
      if (profile) profile.runs++;
      for (let c = 0; c < calls; c++) {
        const entry = table[words[at]];
        const count = words[at + 1], copiesIn = words[at + 2], copiesOut = words[at + 3];
        at += 4;
        const args = entry.args;
        for (let i = 0; i < count; i++) args[i] = ints[at + i];
        for (const i of entry.floats) args[i] = floats[at + i];
        at += count;
        const t = profile && now();
        for (let i = 0; i < copiesIn; i++, at += 3) {
          const from = words[at], to = words[at + 1], bytes = words[at + 2];
          shared.set(own.subarray(from, from + bytes), to);
          if (profile) count_bytes(entry.name, 0, bytes);
        }
        const copied = profile && now();
        const result = entry.fn.apply(null, args) || 0;
        if (profile) {
          const called = now();
          profile.copy_ms += copied - t;
          profile.kernel_ms += called - copied;
          (profile.by_export[entry.name] ||= [0, 0])[0] += called - copied;
          profile.by_export[entry.name][1]++;
          profile.calls++;
        }
        if (result) return result;
        const back = profile && now();
        for (let i = 0; i < copiesOut; i++, at += 3) {
          const from = words[at], to = words[at + 1], bytes = words[at + 2];
          own.set(shared.subarray(from, from + bytes), to);
          if (profile) count_bytes(entry.name, 1, bytes);
        }
        if (profile) profile.copy_ms += now() - back;
      }
      return 0;
    }

    // bytes copied in (direction 0) or out (1), in all and per export
    function count_bytes(name, direction, bytes) {
      profile[direction ? "bytes_out" : "bytes_in"] += bytes;
      (profile.bytes_by_export[name] ||= [0, 0])[direction] += bytes;
    }

    return {
      // profiling on (true: the counts start at 0) or off; stats() the counts as JSON
      profile(on) {
        profile = on ? { runs: 0, calls: 0, copy_ms: 0, kernel_ms: 0, bytes_in: 0, bytes_out: 0, by_export: {}, bytes_by_export: {} } : null;
      },
      stats: () => JSON.stringify(profile),
      // the exports a descriptor names by their index, in Python's order
      define(namesJson) {
        table = JSON.parse(namesJson).map((name) => {
          const fn = pool.guarded(name);              // throws, never hangs, when a kernel traps
          return { name, fn, floats: FLOATS[name] || [], args: new Array(pool.exports[name].length).fill(0) };
        });
      },
      run,
      // copies from Pyodide's memory into the heap: count, then (from, to, bytes) per copy
      copyIn(address) {
        const words = module.HEAPU32, own = module.HEAPU8, shared = views();
        let at = address >>> 2;
        for (let n = words[at++]; n > 0; n--, at += 3) {
          shared.set(own.subarray(words[at], words[at] + words[at + 2]), words[at + 1]);
        }
      },
      info: () => JSON.stringify({
        abi: pool.exports.engine_kernels_abi(), threads: pool.exports.engine_threads(), reason: pool.reason || null,
        heap_base: pool.heapBase, heap_end: pool.memory.buffer.byteLength,
      }),
      grow(bytes) {
        pool.grow(bytes);
        return views().byteLength;
      },
      setThreads: (n) => pool.setThreads(n),
      threads: () => pool.exports.engine_threads(),
      splits: () => (pool.exports.engine_pool_splits ? pool.exports.engine_pool_splits() : 0),   // calls split so far
      reason: () => pool.reason || null,
    };
  }

  const api = { connect };
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.EngineKernelBridge = api;
})(typeof self !== "undefined" ? self : globalThis);
