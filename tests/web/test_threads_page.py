"""The inference worker on the kernel pool in headless Chromium (web/worker.js, web/kernel-pool.js,
engine/backends/simd/heap.py): started with `threads: 2` on an isolated page, each model gives the
same answers, bit for bit, on 1 thread (the side module) and 2 (the pool; whole passes and decode
steps as programs there): MNIST's and EfficientNet-Lite0's logits, MiniLM's embeddings, YOLOv10n's
detections, Whisper's transcript, SmolLM2's greedy tokens. Not isolated, or with the pool's module
missing, it runs on 1 thread and says why.

The worker is driven with its own messages from a page of the site's origin (the page itself is
tests/web/test_page.py's and test_isolation.py's)."""
from __future__ import annotations

import pytest

from tests.web.conftest import start_dev_server

pytestmark = pytest.mark.slow

WORKER = """() => {
  window.worker = new Worker('worker.js');
  const pending = {};
  let id = 0;
  worker.onmessage = (e) => { const m = e.data; if (m.id && pending[m.id]) { pending[m.id](m); delete pending[m.id]; } };
  window.send = (message) => new Promise((resolve) => { const i = ++id; pending[i] = resolve; worker.postMessage({ ...message, id: i }); });
  return self.crossOriginIsolated;
}"""

# the answers of one task on the thread count in effect (graphs captured afresh)
ANSWERS = {
    "digit-classification": """
from engine.tasks import state
import numpy as np
pipe = state.loaded("digit-classification")
x = np.random.default_rng(0).random((16, 1, 28, 28), dtype=np.float32)
np.asarray(pipe.logits(x)).argmax(-1).tolist()
""",
    "image-classification": """
from engine.tasks import state
from engine.web.bench import image_inputs
import numpy as np
pipe = state.loaded("image-classification")
logits = np.concatenate([np.asarray(pipe.logits(x)) for x in image_inputs((1, 4)).values()])
[logits.argmax(-1).tolist(), logits.ravel()[:50].tolist()]
""",
    "sentence-embedding": """
from engine.tasks import state
from engine.web.bench import text_inputs
import numpy as np
pipe = state.loaded("sentence-embedding")
batch = text_inputs(((3, 128),))[(3, 128)]
await pipe.fetch_rows(batch["input_ids"])
e = pipe.embed(batch)
np.asarray(e.numpy() if hasattr(e, "numpy") else e).tolist()
""",
    "object-detection": """
from engine.tasks import state
from pyodide.http import pyfetch
import numpy as np
pipe = state.loaded("object-detection")
import hashlib
image = await (await pyfetch("samples/astronaut.png")).bytes()     # a PNG: the engine decodes it
found = pipe.detect(image)
raw = pipe.raw(np.random.default_rng(0).random((3, 640, 640), dtype=np.float32))
[found["boxes"].tolist(), found["scores"].tolist(), found["classes"].tolist(),
 hashlib.sha256(np.ascontiguousarray(raw).tobytes()).hexdigest()]   # the network's whole output
""",
    "speech-recognition": """
from engine.tasks import state
from pyodide.http import pyfetch
pipe = state.loaded("speech-recognition")
audio = await (await pyfetch("samples/speech/gettysburg-en.wav")).bytes()
pipe(audio)["text"]
""",
    "text-generation": """
from engine.tasks import state
from engine.generation import GenerationConfig
pipe = state.loaded("text-generation")
g = pipe.generator
g.steps.clear()
g.reset()
ids = list(g.tokens(pipe.prompt_ids("What is the capital of France?"), GenerationConfig(max_new_tokens=10)))
g.reset()
ids
""",
}
POOL_CALLS = "from engine.backends.simd import library\nlibrary.get().pool_calls"


def start(page, url: str, threads: int, task: str):
    page.goto(url + "build-info.json")
    isolated = page.evaluate(WORKER)
    boot = page.evaluate("(m) => send(m)", {"cmd": "init", "backend": "simd", "tasks": [task], "threads": threads})
    assert boot["ok"], boot.get("error")
    return isolated, boot["result"]


def python(page, source: str):
    reply = page.evaluate("(src) => send({cmd: 'run', args: [src]})", source)
    assert reply["ok"], reply.get("error")
    return reply["result"]


def on_threads(page, n: int, source: str):
    python(page, f"engine.set_num_threads({n})")
    assert python(page, "engine.get_num_threads()") == n
    return python(page, source)


def test_each_model_answers_the_same_on_1_and_2_threads(dev_server, browser):
    page = browser.new_page()
    try:
        isolated, boot = start(page, dev_server.url, 2, "image-classification")
        assert isolated and boot["threads"] == {"requested": 2, "used": 2, "reason": None}
        assert python(page, "engine.threads.describe()") == "2 threads"
        for task, source in ANSWERS.items():
            if task != "image-classification":
                reply = page.evaluate("(t) => send({cmd: 'loadTask', task: t})", task)
                assert reply["ok"], reply.get("error")
            one = on_threads(page, 1, source)
            before = python(page, POOL_CALLS)
            two = on_threads(page, 2, source)
            assert python(page, POOL_CALLS) > before, f"{task} never ran on the pool"
            assert one == two, task          # the same bits: logits, embeddings, boxes, tokens, text
            assert task != "object-detection" or one[0], "no detections to compare"
    finally:
        page.close()


def test_not_isolated_runs_on_one_thread_and_says_why(site, browser):
    served = start_dev_server(site, isolation=False)
    page = browser.new_page()
    try:
        isolated, boot = start(page, served.url, 2, "digit-classification")
        assert not isolated
        assert boot["threads"] == {"requested": 2, "used": 1, "reason": "the page is not cross-origin isolated"}
        assert python(page, "engine.get_num_threads()") == 1
        assert python(page, "engine.threads.describe()") == "1 thread (the page is not cross-origin isolated)"
    finally:
        page.close()
        served.stop()


def test_a_missing_pool_module_falls_back_to_one_thread(dev_server, browser):
    context = browser.new_context()
    context.route("**/engine_kernels.threads.wasm", lambda route: route.fulfill(status=404, body="gone"))
    page = context.new_page()
    try:
        _, boot = start(page, dev_server.url, 2, "digit-classification")
        threads = boot["threads"]
        assert threads["used"] == 1 and "could not start" in threads["reason"] and "404" in threads["reason"]
        assert len(python(page, ANSWERS["digit-classification"])) == 16         # and the model answers
    finally:
        context.close()
