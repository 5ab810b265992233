// The page's handle on the inference worker: promise-based calls, progress state,
// restart after a failure. Exposed as window.engineClient (for the Python page
// logic) and window.engine.run(source) (for people at the console and for tests).
const STAGE_NAMES = ["pyodide", "numpy", "engine", "weights"];

class EngineClient {
  // `started`: a worker the page started before this module loaded, already booting (index.html:
  // {worker, init: {backend, kernels, tasks, threads}, held: its messages and errors so far}); the first
  // init(), called with those same arguments, takes that boot's reply instead of booting again.
  constructor(workerUrl = new URL("worker.js", import.meta.url).href, started = null) {
    this.workerUrl = workerUrl;
    this.listeners = new Set();
    // OpenAI's shape, as WebLLM offers it: client.chat.completions.create({messages, stream, ...});
    // client.chat(messages, options, onPiece) stays the card's own call
    const chat = (messages, options, onPiece) => this.call("chat", { messages, options }, [], onPiece);
    chat.completions = { create: (request) => this.createCompletion(request) };
    this.chat = chat;
    this.start(started);
  }

  start(started = null) {
    this.nextId = 1;
    this.pending = new Map();
    this.tasks = new Map();                          // task -> its load (engine-client loadTask)
    this.models = new Map();                         // task -> the model asked for or loaded (name or URL)
    this.progress = Object.fromEntries(STAGE_NAMES.map((s) => [s, { loaded: 0, total: 0 }]));
    this.state = { status: "starting", error: null, info: null };
    this.worker = started ? started.worker : new Worker(this.workerUrl);
    this.worker.onmessage = (e) => this.receive(e.data);
    this.worker.onerror = (e) => this.fail(new Error(`worker failed: ${e.message || "could not start"}`));
    this.startedReply = null;
    if (started) {                                   // its init went out as message 0
      this.startedReply = new Promise((resolve, reject) => this.pending.set(0, { resolve, reject }));
      this.startedReply.catch(() => {});             // init() takes the failure
      for (const held of started.held) {
        if (held.type === "error") this.worker.onerror(held);
        else this.receive(held.data);
      }
    }
  }

  receive(message) {
    if (message.type === "piece") {                 // a piece of a streaming call (chat, speech), before its reply
      const waiter = this.pending.get(message.id);
      if (waiter && waiter.onPiece) waiter.onPiece(message.text);
      return;
    }
    if (message.type === "progress") {
      this.progress[message.stage] = { loaded: message.loaded, total: message.total };
      this.emit();
      return;
    }
    const waiter = this.pending.get(message.id);
    if (!waiter) return;
    this.pending.delete(message.id);
    if (message.ok) waiter.resolve(message.result);
    else waiter.reject(new Error(message.error));
  }

  fail(error) {
    for (const waiter of this.pending.values()) waiter.reject(error);
    this.pending.clear();
    this.state = { ...this.state, status: "error", error: error.message };
    this.emit();
  }

  call(cmd, fields = {}, transfer = [], onPiece = null) {
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      this.pending.set(id, { resolve, reject, onPiece });
      this.worker.postMessage({ id, cmd, ...fields }, transfer);
    });
  }

  // `tasks`: the task whose model the worker loads as it starts (the page's opened card), then the
  // ones to try if the site does not serve it; none: the first card's task. `threads`: how many
  // threads its kernels should run on (1 unless the page is cross-origin isolated); the boot's reply
  // says how many it got (`threads: {requested, used, reason}`).
  async init(backend, kernels = null, tasks = null, threads = 1) {
    this.state = { status: "loading", error: null, info: null };
    this.backendWanted = backend;
    this.kernelsWanted = kernels;
    this.tasksWanted = tasks;
    this.threadsWanted = threads;
    this.tasks = new Map();
    this.models = new Map();
    this.emit();
    try {
      const reply = this.startedReply || this.call("init", { backend, kernels, tasks, threads });
      this.startedReply = null;
      const info = await reply;
      if (info.task) {                                                     // loaded as it started
        this.tasks.set(info.task, Promise.resolve(info));
        this.models.set(info.task, info.model);
      }
      this.state = { status: "ready", error: null, info };
    } catch (err) {
      this.state = { status: "error", error: err.message, info: null };
    }
    this.emit();
    return this.state;
  }

  restart(backend = this.backendWanted, tasks = this.tasksWanted, threads = this.threadsWanted) {
    this.worker.terminate();
    this.fail(new Error("restarted"));
    this.start();
    return this.init(backend, this.kernelsWanted, tasks, threads);
  }

  // An entry point of engine/web/worker.py with RGBA pixels first (a copy is transferred).
  callWithPixels(cmd, imageData, ...args) {
    const pixels = new Uint8ClampedArray(imageData.data);
    return this.call(cmd, { args: [pixels, imageData.width, imageData.height, ...args] }, [pixels.buffer]);
  }

  // Any entry point of engine/web/worker.py: python("embed_texts", ["a", "b"]).
  python(cmd, ...args) { return this.call(cmd, { args }); }

  // Load a task's model once (its weights stream in with progress under stage "weights:<task>").
  // `model`: a registry model of the task or a GGUF's URL, which replaces the task's model unless it
  // is the one loaded or loading (the worker drops the old one first); none: the task's model as it
  // is, else the registry's first. A failed load can be retried.
  loadTask(task, model = null) {
    if (!this.tasks.has(task) || (model && model !== this.models.get(task))) {
      const loading = this.call("loadTask", model ? { task, model } : { task });
      this.tasks.set(task, loading);
      this.models.set(task, model);
      loading.then((info) => {
        if (this.tasks.get(task) === loading) this.models.set(task, model || info.model);
      }, () => {
        if (this.tasks.get(task) !== loading) return;
        this.tasks.delete(task);
        this.models.delete(task);
      });
    }
    return this.tasks.get(task);
  }

  // Continue a plain text prompt (a base model: no chat template), streamed as chat() streams;
  // the promise gives what chat() gives. stopChat() ends it too.
  complete(prompt, options, onPiece) {
    return this.call("complete_text", { args: [prompt, JSON.stringify(options || {})], stream: true }, [], onPiece);
  }

  // chat(messages, options, onPiece) (set in the constructor): answer a conversation [{role,
  // content}, ...], onPiece(text) with each piece as it comes; the promise gives {text, stats,
  // device, heap_bytes}. stopChat() ends it before its next token.
  stopChat() { return this.python("chat_stop"); }

  // chat.completions.create(request): OpenAI's request (messages, temperature, max_tokens, stop,
  // seed, response_format, tools, tool_choice, logprobs, n, ...) answered in the worker by
  // engine.chat.completions.create, the same Python as natively. `model`: a registry model or a
  // GGUF's URL, loaded first (none: the one loaded). Without stream, the promise gives the
  // completion; with stream: true, an async iterator of its chunks (leaving the loop early stops
  // the answer), whose `engine` holds the run's stats once it ends.
  async createCompletion(request) {
    await this.loadTask("text-generation", request.model || null);
    const body = JSON.stringify({ ...request, model: undefined });
    if (!request.stream) return this.call("chat_completion", { args: [body] });
    const queue = [];
    let wake = null, finished = false, failure = null;
    const stream = { engine: null };
    const reply = this.call("chat_completion", { args: [body], stream: true }, [], (text) => {
      queue.push(JSON.parse(text));
      if (wake) wake();
    });
    reply.then((result) => { stream.engine = result.engine; }, (error) => { failure = error; })
      .finally(() => { finished = true; if (wake) wake(); });
    const client = this;
    stream[Symbol.asyncIterator] = async function* chunks() {
      let done = false;
      try {
        for (;;) {
          if (queue.length) { yield queue.shift(); continue; }
          if (failure) throw failure;
          if (finished) { done = true; return; }
          await new Promise((resolve) => { wake = resolve; });
          wake = null;
        }
      } finally {
        if (!done && !finished) await client.stopChat();       // the loop was left early
      }
    };
    return stream;
  }

  setBackend(backend) { return this.python("set_device", backend); }
  run(source) { return this.python("run", source); }

  subscribe(fn) { this.listeners.add(fn); fn(this.snapshot()); return () => this.listeners.delete(fn); }
  snapshot() { return { ...this.state, progress: this.progress }; }
  emit() { const s = this.snapshot(); for (const fn of this.listeners) fn(s); }
}

export { EngineClient, STAGE_NAMES };
