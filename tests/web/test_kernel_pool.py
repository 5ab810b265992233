"""web/kernel-pool.js in Chromium, as the inference worker uses it: a classic worker loads it with
importScripts and starts engine_kernels.threads.wasm on Web Workers (web/kernel-helper.js)
sharing one memory. A split GEMM gives the same bits on 1 and 3 threads; helpers whose script is
missing or throws give 1 thread and a reason, within the timeout; a page that is not
cross-origin isolated gets no pool and says why. The pool's own files only: no site build."""
from __future__ import annotations

import shutil
import time

import pytest

from tests.helpers import need_wasm_compiler
from tests.web.conftest import ROOT, start_dev_server
from wasm_kernels import build

# the classic worker: {threads, helperUrl} in; the pool's state and a 256 x 256 x 256 GEMM out
WORKER = """
importScripts("kernel-pool.js");
self.onmessage = async ({ data }) => {
  const started = performance.now();
  try {
    const pool = await EngineKernelPool.start({ url: "engine_kernels.threads.wasm", threads: data.threads,
                                               helperUrl: data.helperUrl, timeoutMs: 5000 });
    const n = 256, heap = pool.heapBase, f32 = new Float32Array(pool.memory.buffer);
    const a = heap, b = a + 4 * n * n, c = b + 4 * n * n, scratch = c + 4 * n * n;
    for (let i = 0; i < n * n; i++) { f32[a / 4 + i] = Math.sin(i); f32[b / 4 + i] = Math.cos(3 * i); }
    const call = (s, size) => pool.exports.gemm_f32(1, n, n, n, a, 0, n, 1, b, 0, n, 1, c, 0, n, 0, 0, 0, 0, s, size);
    const need = call(0, 0);
    if (scratch + 4 * need > pool.memory.buffer.byteLength) pool.grow(scratch + 4 * need - pool.memory.buffer.byteLength);
    const splits = pool.exports.engine_pool_splits();
    call(scratch, need);
    const out = new Float32Array(pool.memory.buffer, c, n * n).slice();
    self.postMessage({ threads: pool.threads, reason: pool.reason, split: pool.exports.engine_pool_splits() > splits,
                       ms: performance.now() - started, out: Array.from(new Uint32Array(out.buffer)) });
    pool.close();
  } catch (err) {
    self.postMessage({ error: String(err && err.message || err), ms: performance.now() - started });
  }
};
"""
PAGE = """<!doctype html><meta charset="utf-8"><script>
window.runPool = (threads, helperUrl) => new Promise((resolve) => {
  const worker = new Worker("pool-worker.js");
  worker.onmessage = (event) => { resolve(event.data); worker.terminate(); };
  worker.postMessage({ threads, helperUrl });
});
</script>"""


@pytest.fixture(scope="module")
def pool_site(tmp_path_factory):
    need_wasm_compiler()
    root = tmp_path_factory.mktemp("pool-site")
    build.build_wasm_threads(root)
    for name in ("kernel-pool.js", "kernel-helper.js"):
        shutil.copy(ROOT / "web" / name, root / name)
    (root / "pool-worker.js").write_text(WORKER)
    (root / "throwing-helper.js").write_text('throw new Error("this helper cannot start");\n')
    (root / "index.html").write_text(PAGE)
    return root


def _open(browser, root, isolation=True):
    served = start_dev_server(root, isolation=isolation)
    context = browser.new_context()
    page = context.new_page()
    page.goto(served.url + "index.html")

    def close():
        context.close()
        served.stop()
    return page, close


def test_same_bits_on_one_and_three_threads(browser, pool_site):
    page, close = _open(browser, pool_site)
    try:
        assert page.evaluate("self.crossOriginIsolated") is True
        one = page.evaluate("runPool(1, 'kernel-helper.js')")
        three = page.evaluate("runPool(3, 'kernel-helper.js')")
    finally:
        close()
    assert "error" not in one and "error" not in three, (one.get("error"), three.get("error"))
    assert (one["threads"], one["reason"], one["split"]) == (1, None, False)
    assert (three["threads"], three["reason"], three["split"]) == (3, None, True)
    assert three["out"] == one["out"]


@pytest.mark.parametrize("helper, why", [("missing-helper.js", "could not load missing-helper.js"),
                                         ("throwing-helper.js", "Uncaught Error: this helper cannot start")])
def test_helpers_that_cannot_start_give_one_thread_and_a_reason(browser, pool_site, helper, why):
    page, close = _open(browser, pool_site)
    try:
        started = time.monotonic()
        result = page.evaluate(f"runPool(3, '{helper}')")
        assert time.monotonic() - started < 15
    finally:
        close()
    assert "error" not in result, result.get("error")
    assert result["threads"] == 1 and not result["split"]
    assert result["reason"] == f"helper worker 1 failed to start: {why}; helper worker 2 failed to start: {why}"


def test_no_pool_without_cross_origin_isolation(browser, pool_site):
    page, close = _open(browser, pool_site, isolation=False)
    try:
        assert page.evaluate("self.crossOriginIsolated") is False
        result = page.evaluate("runPool(2, 'kernel-helper.js')")
    finally:
        close()
    assert result.get("error") == "no kernel pool: the page is not cross-origin isolated", result
