"""The site offline: after a first visit the service worker (web/sw-core.js) keeps the page and its
runtime, the loader keeps the weights, and the page works with the host gone and the browser offline.
The worker (web/worker.js) keeps a memory snapshot of the started Pyodide: a reload starts from it,
and a damaged one is refused (a full start) and replaced."""
from __future__ import annotations

from tests.web.conftest import open_card, start_dev_server
from tests.web.test_image_card import browser_top5
from tests.web.test_page import PREDICTION, draw

# the worker's snapshot entry, once stored: its size
SNAPSHOT_SIZE = """async () => {
    const cache = await caches.open("engine-pyodide-snapshot");
    const [key] = await cache.keys();
    return key ? (await (await cache.match(key)).arrayBuffer()).byteLength : 0;
}"""
# keep the first half of the stored snapshot, with its headers (its SHA-256 among them)
TRUNCATE = """async () => {
    const cache = await caches.open("engine-pyodide-snapshot");
    const [key] = await cache.keys();
    const stored = await cache.match(key);
    const bytes = await stored.arrayBuffer();
    await cache.put(key, new Response(bytes.slice(0, bytes.byteLength >> 1), { headers: stored.headers }));
}"""


# the service worker's copy of the compiled start-up Python, cut to its first half
DAMAGE_BYTECODE = """async () => {
    const url = new URL("pyodide/bytecode.zip", location.href).href;
    for (const name of await caches.keys()) {
        const cache = await caches.open(name);
        const stored = await cache.match(url);
        if (stored) {
            const bytes = await stored.arrayBuffer();
            await cache.put(url, new Response(bytes.slice(0, bytes.byteLength >> 1), { headers: stored.headers }));
        }
    }
}"""


# the modules a start imported from site-packages that have no .pyc (compiled from source)
UNCOMPILED = """import os, sys
site = next(p for p in sys.path if p.endswith("site-packages"))
sorted(name for name, m in list(sys.modules.items())
       if (getattr(m, "__file__", None) or "").startswith(site) and m.__file__.endswith(".py")
       and not os.path.exists(m.__spec__.cached))"""


def runtime(page) -> dict:
    """How the worker's Pyodide started: {"start": "full" | "snapshot", "snapshot_error", ...}."""
    return page.evaluate("window.engineClient.snapshot().info.runtime")


def draw_3(page):
    open_card(page, "digit")
    page.click("[data-testid=digit-clear]")
    page.locator("[data-testid=digit-canvas]").scroll_into_view_if_needed()
    draw(page, "3")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3'", timeout=30_000)


def test_reload_draw_and_classify_offline(site, session_factory):
    host = start_dev_server(site)                 # its own host: this test stops it
    try:
        s = session_factory(host.url)
        page = s.open()
        assert runtime(page)["start"] == "full"
        # a first visit's start already runs compiled Python: the standard library's start-up
        # modules from the .pyc beside their sources in python_stdlib.zip, and every module the
        # start imported from site-packages from the archive's .pyc (buildtools/bytecode.py)
        assert runtime(page)["bytecode_bytes"] > 0 and runtime(page)["bytecode_error"] is None
        assert s.run(UNCOMPILED) == []
        assert s.run("import json, tarfile\n[json.__file__, tarfile.__file__]") == [
            "/lib/python312.zip/json/__init__.pyc", "/lib/python312.zip/tarfile.pyc"]
        open_card(page, "photo")
        page.click("[data-sample='chelsea.png']")               # caches the photo model's weights
        assert "cat" in browser_top5(page)[0][0]
        # the first version of the service worker claims this page once it has kept every file
        page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=120_000)
        page.wait_for_function(f"({SNAPSHOT_SIZE})().then((n) => n > 0)", timeout=30_000)
    finally:
        host.stop()
    s.context.set_offline(True)
    s.requests.clear()
    page.reload()
    s.wait_ready()
    assert page.evaluate("navigator.onLine") is False
    assert runtime(page)["start"] == "snapshot" and runtime(page)["snapshot_error"] is None
    # the start-up modules came from the archive the service worker kept (their .pyc files exist:
    # the worker never writes bytecode itself)
    assert runtime(page)["bytecode_bytes"] > 0 and runtime(page)["bytecode_error"] is None
    assert s.run(UNCOMPILED) == []
    draw_3(page)                                              # from the restored interpreter
    page.evaluate(DAMAGE_BYTECODE)                            # cut short: refused whole, sources compiled
    page.reload()
    s.wait_ready()
    assert runtime(page)["bytecode_bytes"] == 0 and "zip" in runtime(page)["bytecode_error"].lower()
    assert s.run("import os, sys\nos.path.exists(sys.modules['engine.tensor'].__spec__.cached)") is False
    draw_3(page)
    open_card(page, "photo")
    page.evaluate("document.querySelector('[data-testid=image-top5]').innerHTML = ''")
    page.click("[data-sample='chelsea.png']")
    assert "cat" in browser_top5(page)[0][0]

    # a damaged snapshot: a full start says why, answers the same, and stores a whole one again
    size = runtime(page)["snapshot_bytes"]
    page.evaluate(TRUNCATE)
    page.reload()
    s.wait_ready()
    assert runtime(page)["start"] == "full" and runtime(page)["snapshot_error"] == "the stored snapshot was damaged"
    draw_3(page)
    page.wait_for_function(f"({SNAPSHOT_SIZE})().then((n) => n === {size})", timeout=30_000)
    assert s.console_errors == [], s.console_errors
