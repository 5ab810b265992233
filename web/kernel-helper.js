// A helper of the kernel pool (kernel-pool.js): a Web Worker, or a worker_threads Worker under
// Node.js. It gets {module, memory, tid, stackTop}, instantiates the threads build of the kernels
// on that shared memory with a stack of its own (the module's __stack_pointer is a global of each
// instance; the linker's value would be the caller's stack), says "entering" and runs
// engine_thread_main(tid): the C pool's loop, which waits on the memory and never returns, unless
// a kernel traps (then it lets a waiting caller go before it reports the error).
"use strict";

(function () {
  const isNode = typeof process === "object" && !!(process.versions && process.versions.node) &&
                 typeof importScripts !== "function";
  const port = isNode ? require("worker_threads").parentPort : self;
  const post = (message) => port.postMessage(message);

  async function run({ module, memory, tid, stackTop }) {
    let entered = null;
    try {
      const instance = await WebAssembly.instantiate(module, { env: { memory } });
      instance.exports.__stack_pointer.value = stackTop;
      post({ type: "entering", tid });
      entered = instance.exports;
      entered.engine_thread_main(tid);
      post({ type: "error", tid, message: "engine_thread_main returned" });
    } catch (err) {
      // a trap inside a kernel: the caller may be waiting for this helper's part; let it go
      // (wasm_kernels/pool.c, engine_pool_helper_failed), then say why
      if (entered && entered.engine_pool_helper_failed) entered.engine_pool_helper_failed();
      post({ type: "error", tid, message: err && err.message ? err.message : String(err) });
    }
  }

  if (isNode) port.once("message", run);
  else self.addEventListener("message", (event) => run(event.data), { once: true });
})();
