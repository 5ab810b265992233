// The kernels on every core: engine_kernels.threads.wasm instantiated in the calling worker and in
// N-1 helper workers (kernel-helper.js), all on one shared WebAssembly.Memory. A kernel call
// splits its work inside the C code (wasm_kernels/pool.c), which wakes the helpers with
// memory.atomic.wait32/notify on a control block in that memory: no message per call.
//
// Loads as a classic worker script (importScripts: defines self.EngineKernelPool) and as a
// CommonJS module under Node.js (require: worker_threads helpers; the tests use it that way).
//
//   const pool = await EngineKernelPool.start({url | bytes | module, threads, helperUrl, timeoutMs});
//   pool.exports.gemm_f32(...)      // addresses in pool.memory, free memory from pool.heapBase on
//   pool.threads, pool.reason       // in effect; null or why fewer than asked
//   pool.guarded("gemm_f32")(...)   // the same call, throwing (never hanging) when a kernel traps
//
// A helper that fails to load, to instantiate or to answer within timeoutMs leaves fewer threads
// and a reason; start never waits longer than timeoutMs for helpers. One lost after the start
// leaves the calling thread alone (wasm_kernels/README.md, "Threads in the browser", has the API).
"use strict";

(function (root) {
  const PAGE = 65536;
  const isNode = typeof process === "object" && !!(process.versions && process.versions.node) &&
                 typeof importScripts !== "function";

  // Why no pool can run here, or null: shared memory needs cross-origin isolation in browsers.
  function unavailableReason() {
    if (typeof crossOriginIsolated === "boolean" && !crossOriginIsolated) {
      return "the page is not cross-origin isolated";
    }
    if (typeof SharedArrayBuffer !== "function" || typeof Atomics !== "object") {
      return "shared memory (SharedArrayBuffer, Atomics) is unavailable here";
    }
    return null;
  }

  // The memory the module imports: its (min pages, max pages | null, shared) from the import
  // section, so that the memory made here is large enough and of the right kind.
  function importedMemoryLimits(bytes) {
    const data = new Uint8Array(bytes.buffer || bytes, bytes.byteOffset || 0, bytes.byteLength);
    let pos = 8;
    const uleb = () => {
      let value = 0, shift = 0, byte;
      do { byte = data[pos++]; value += (byte & 0x7f) * 2 ** shift; shift += 7; } while (byte & 0x80);
      return value;
    };
    const skipName = () => { const n = uleb(); pos += n; };
    while (pos < data.length) {
      const section = data[pos++];
      const size = uleb();
      const end = pos + size;
      if (section === 2) {
        for (let count = uleb(); count > 0; count--) {
          skipName(); skipName();
          const kind = data[pos++];
          if (kind === 2) {
            const flags = uleb();
            const min = uleb();
            const max = flags & 1 ? uleb() : null;
            return { min, max, shared: !!(flags & 2) };
          }
          if (kind === 0) uleb();
          else if (kind === 1) { pos++; const f = uleb(); uleb(); if (f & 1) uleb(); }
          else if (kind === 3) pos += 2;
          else { pos++; uleb(); }
        }
      }
      pos = end;
    }
    throw new Error("the kernel module imports no memory (not engine_kernels.threads.wasm?)");
  }

  // A Web Worker or a worker_threads Worker, seen the same way: on(message | error), post, end.
  function defaultSpawn(url) {
    if (isNode) {
      const { Worker } = require("worker_threads");
      return new Worker(url);
    }
    return new Worker(url);
  }
  function listen(worker, url, onMessage, onError) {
    if (typeof worker.on === "function") {                 // Node.js
      worker.on("message", onMessage);
      worker.on("error", (err) => onError(err && err.message ? err.message : String(err)));
      worker.on("exit", (code) => onError(`exited (code ${code})`));
      if (typeof worker.unref === "function") worker.unref();   // a helper never keeps Node alive
    } else {
      worker.addEventListener("message", (event) => onMessage(event.data));
      worker.addEventListener("error", (event) => {
        event.preventDefault && event.preventDefault();
        onError(event.message || `could not load ${url}`);      // a script that fails to load has no message
      });
      worker.addEventListener("messageerror", () => onError("could not receive the module or memory"));
    }
  }

  async function compiled(options) {
    if (options.module instanceof WebAssembly.Module) {
      if (!options.bytes) throw new Error("start({module}) also needs {bytes} (to read the memory limits)");
      return options.module;
    }
    return WebAssembly.compile(options.bytes);
  }

  async function moduleBytes(options) {
    if (options.bytes) return options.bytes;
    if (!options.url) throw new Error("start() needs {url}, {bytes} or {module, bytes}");
    const response = await fetch(options.url);
    if (!response.ok) throw new Error(`${options.url}: HTTP ${response.status}`);
    return new Uint8Array(await response.arrayBuffer());
  }

  const align = (n, to) => Math.ceil(n / to) * to;

  // options: url | bytes (| module with bytes); threads (wanted, the caller included; default 1);
  // helperUrl (kernel-helper.js); timeoutMs (helpers' start, default 10000); stackBytes (each
  // helper's stack, default 1 MiB); initialBytes / maximumBytes (the memory; default: what the
  // module needs / 2 GiB); spawn(url, tid) -> Worker (default: a Web Worker, or worker_threads
  // under Node.js); onHelperError(tid, message) (a helper that failed after start).
  async function start(options) {
    const unavailable = unavailableReason();
    if (unavailable) throw new Error(`no kernel pool: ${unavailable}`);
    const wanted = Math.max(1, Math.floor(options.threads || 1));
    const timeoutMs = options.timeoutMs == null ? 10000 : options.timeoutMs;
    const stackBytes = align(options.stackBytes || 1 << 20, 16);
    const bytes = await moduleBytes(options);
    const limits = importedMemoryLimits(bytes);
    if (!limits.shared) throw new Error("the kernel module's memory is not shared (not the threads build?)");
    const module = await compiled(Object.assign({}, options, { bytes }));
    let maxPages = Math.min(limits.max == null ? 65536 : limits.max,
                              Math.ceil((options.maximumBytes || 2 ** 31) / PAGE));
    const initialPages = Math.max(limits.min, Math.ceil((options.initialBytes || 0) / PAGE));
    // a shared memory reserves its maximum up front, which a 32-bit or memory-tight browser may
    // refuse: then ask for half, down to 256 MiB
    let memory = null;
    for (let pages = maxPages; !memory; pages = Math.floor(pages / 2)) {
      try {
        memory = new WebAssembly.Memory({ initial: initialPages, maximum: pages, shared: true });
        maxPages = pages;
      } catch (err) {
        if (!(err instanceof RangeError) || pages / 2 < Math.max(initialPages, 4096)) throw err;
      }
    }
    const instance = await WebAssembly.instantiate(module, { env: { memory } });
    const exports = instance.exports;
    for (const name of ["__heap_base", "__stack_pointer", "engine_set_threads", "engine_threads_ready",
                        "engine_thread_main"]) {
      if (!(name in exports)) throw new Error(`the kernel module does not export ${name} (not the threads build?)`);
    }
    // helper t's stack: [stacks + (t-1) * stackBytes, stacks + t * stackBytes), growing down
    const stacks = align(exports.__heap_base.value, 16);
    const heapBase = stacks + (wanted - 1) * stackBytes;
    const grow = (size) => {
      const pages = Math.ceil(size / PAGE);
      if (pages <= 0) return memory.buffer.byteLength;
      try {
        return memory.grow(pages) * PAGE;
      } catch (err) {
        throw new RangeError(`cannot grow the kernels' memory by ${size} bytes past ` +
                             `${memory.buffer.byteLength} (maximum ${maxPages * PAGE}): ${err.message}`);
      }
    };
    if (memory.buffer.byteLength < heapBase) grow(heapBase - memory.buffer.byteLength);

    const helpers = [];                                  // {tid, worker, state: starting|entered|failed, why}
    const failures = [];
    let settle = null;
    const changed = () => settle && settle();
    // A helper lost after it entered the C pool may own a slot a job would be posted to, and the
    // caller would wait for it forever: from then on the kernels run on the calling thread only.
    let pool = null;
    let lostAfterEntering = false;
    let seenFaults = 0;                                  // helpers' traps already reported (guarded)
    const fail = (helper, why) => {
      if (helper.state === "failed") return;
      const wasEntered = helper.state === "entered";
      helper.state = "failed";
      helper.why = why;
      if (wasEntered) lostAfterEntering = true;
      if (wasEntered && pool && !pool.closed) {
        pool.limit = 1;
        pool.threads = exports.engine_set_threads(1);
        pool.reason = `helper worker ${helper.tid} stopped: ${why}; the kernels run on 1 thread`;
        if (options.onHelperError) options.onHelperError(helper.tid, why);
      }
      changed();
    };
    const spawn = options.spawn || defaultSpawn;
    for (let tid = 1; tid < wanted; tid++) {
      const helper = { tid, worker: null, state: "starting", why: null };
      helpers.push(helper);
      try {
        helper.worker = spawn(options.helperUrl, tid);
        listen(helper.worker, options.helperUrl, (message) => {
          if (!message || message.tid !== tid) return;
          if (message.type === "entering" && helper.state === "starting") helper.state = "entered";
          else if (message.type === "error") fail(helper, message.message);
          changed();
        }, (why) => fail(helper, why));
        helper.worker.postMessage({ module, memory, tid, stackTop: stacks + tid * stackBytes });
      } catch (err) {
        fail(helper, err && err.message ? err.message : String(err));
      }
    }

    // every helper entered engine_thread_main or failed, or the time is up
    const deadline = Date.now() + timeoutMs;
    const entered = () => helpers.filter((h) => h.state === "entered").length;
    while (helpers.some((h) => h.state === "starting") ||
           exports.engine_threads_ready() < entered()) {
      const left = deadline - Date.now();
      if (left <= 0) break;
      await new Promise((resolve) => {
        settle = resolve;
        setTimeout(resolve, Math.min(left, helpers.some((h) => h.state === "starting") ? left : 2));
      });
      settle = null;
    }
    for (const helper of helpers) {
      if (helper.state === "starting") {
        fail(helper, `did not start within ${timeoutMs} ms`);
        terminate(helper.worker);
      }
      if (helper.state === "failed") failures.push(`helper worker ${helper.tid} failed to start: ${helper.why}`);
    }
    const usable = lostAfterEntering ? 0 : Math.min(entered(), exports.engine_threads_ready());
    const threads = exports.engine_set_threads(1 + usable);
    let reason = null;
    if (threads < wanted) {
      reason = failures.length ? failures.join("; ")
             : `${wanted - threads} helper worker(s) did not enter the pool within ${timeoutMs} ms`;
    }
    pool = {
      memory, exports, module, heapBase, threads, requested: wanted, reason, limit: threads, closed: false,
      // the threads taking part from now on (at most those started): the count in effect
      setThreads(n) {
        this.threads = exports.engine_set_threads(Math.max(1, Math.min(Math.floor(n), this.limit)));
        return this.threads;
      },
      grow,
      // exports[name] with the pool's way out of a trap (wasm_kernels/pool.c): a trap on this
      // thread frees the pool, and a helper's trap during the call makes it throw too (its
      // result is void); either way the kernels run on this thread from then on
      guarded(name) {
        const fn = exports[name];
        if (typeof fn !== "function") throw new Error(`the kernel pool does not export ${name}`);
        const faults = exports.engine_pool_failed || (() => 0);
        const lost = (why) => {
          seenFaults = faults();
          this.limit = 1;
          this.threads = exports.engine_set_threads(1);
          this.reason = `${why}; the kernels run on 1 thread`;
          return new Error(`${name} on the kernel pool: ${why}; its result is void`);
        };
        return (...args) => {
          let result;
          try {
            result = fn(...args);
          } catch (err) {
            if (exports.engine_pool_release) exports.engine_pool_release();
            throw lost(`a kernel trapped (${err && err.message ? err.message : err})`);
          }
          if (faults() !== seenFaults) throw lost("a helper thread trapped inside the kernel");
          return result;
        };
      },
      close() {
        this.closed = true;
        exports.engine_set_threads(1);
        for (const helper of helpers) terminate(helper.worker);
      },
    };
    return pool;
  }

  function terminate(worker) {
    try { worker && worker.terminate(); } catch (err) { /* already gone */ }
  }

  const api = { start, unavailableReason, importedMemoryLimits };
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.EngineKernelPool = api;
})(typeof self !== "undefined" ? self : globalThis);
