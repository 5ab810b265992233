"""Cross-origin isolation on the three kinds of host, and the page's thread count.

A pool of threads needs a SharedArrayBuffer, which a page gets only when cross-origin isolated
(COOP same-origin + COEP require-corp). nginx and `build.py serve` send the headers; on a host
that cannot (served here by the dev server with isolation=False), the service worker adds them
to what it serves (web/sw-core.js), so the page is isolated from its next load on: the page
reloads itself once when the service worker first takes control, if nobody has used it yet.
The page asks the worker for `threads` in its init message (index.html's threadChoice):
?threads=N, else the Threads select's choice (localStorage), else min(4, cores); 1 when not
isolated, and it says why.
"""
from __future__ import annotations

from tests.web.conftest import start_dev_server
from tests.web.test_offline import draw_3

# every init message's `threads`, as the page posts it to its worker (the first one from
# index.html's first script, the others from engine-client.js's restart)
RECORD_INITS = """
window.initThreads = [];
const post = Worker.prototype.postMessage;
Worker.prototype.postMessage = function (message, ...rest) {
  if (message && message.cmd === "init") window.initThreads.push(message.threads);
  return post.call(this, message, ...rest);
};
"""
DEFAULT = "Math.min(4, navigator.hardwareConcurrency)"


def recording(session):
    session.context.add_init_script(RECORD_INITS)
    return session


def inits(page) -> list:
    return page.evaluate("window.initThreads")


def reported(page) -> dict:
    """The worker's answer: {requested, used, reason}; a worker without a pool reports none (1 used)."""
    return page.evaluate("window.engineClient.snapshot().info.threads") or {"used": 1}


def threads_text(page) -> str:
    return page.text_content("[data-testid=threads-info]")


def test_header_less_host_one_thread_then_isolated_by_the_service_worker_and_offline(site, session_factory):
    host = start_dev_server(site, isolation=False)            # GitHub Pages and the like: no COOP/COEP
    try:
        s = recording(session_factory(host.url))
        page = s.open("index.html?threads=2")                 # 2 on any machine (the default is min(4, cores))
        first = s.responses[0]
        assert first.url == host.url + "index.html?threads=2" and "cross-origin-opener-policy" not in first.headers
        assert page.evaluate("self.crossOriginIsolated") is False
        assert inits(page) == [1]                              # not isolated: one thread, whatever the cores
        isolation = page.text_content("[data-testid=isolation]")
        assert "not cross-origin isolated" in isolation and "one thread" in isolation
        assert "the host does not send the COOP/COEP headers" in isolation
        assert "service worker adds them" in isolation
        assert threads_text(page).startswith("1 thread")
        assert page.is_disabled("[data-testid=threads-select]")
        assert page.input_value("[data-testid=threads-select]") == "1"
        wanted = 2
        # the first service worker claims the page once it has kept every file; nobody has used
        # the page, so it reloads itself once, and is isolated by the service worker's headers
        with page.expect_navigation(timeout=120_000):
            pass
        s.wait_ready()
        assert page.evaluate("self.crossOriginIsolated") is True
        assert page.evaluate("navigator.serviceWorker.controller !== null") is True
        document = [r for r in s.responses if r.url == host.url + "index.html?threads=2"][-1]
        assert document.from_service_worker and document.headers["cross-origin-embedder-policy"] == "require-corp"
        assert inits(page) == [wanted]
        # the worker is isolated too (its script came from the service worker with the headers)
        assert "cross-origin isolated: precise timers" in page.text_content("[data-testid=isolation]")
        assert page.evaluate("window.engineClient.snapshot().info.crossOriginIsolated") is True
        assert not page.is_disabled("[data-testid=threads-select]")
        used = reported(page)["used"]
        assert threads_text(page).startswith(f"{used} thread")
        assert s.foreign_requests() == []
    finally:
        host.stop()
    # offline: the kept page, still with the isolation headers, and its threads
    s.context.set_offline(True)
    page.reload()
    s.wait_ready()
    assert page.evaluate("navigator.onLine") is False
    assert page.evaluate("self.crossOriginIsolated") is True
    assert inits(page) == [wanted]
    draw_3(page)
    assert s.console_errors == [], s.console_errors


def test_a_page_in_use_is_not_reloaded_but_offers_it(site, session_factory):
    host = start_dev_server(site, isolation=False)
    try:
        s = recording(session_factory(host.url))
        page = s.open("index.html?threads=2")
        page.click("[data-testid=engine-status]")              # someone is using the page
        page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=120_000)
        button = page.locator("[data-testid=isolation-reload]")
        button.wait_for(state="visible")
        wanted = 2
        assert button.text_content() == f"Reload to use {wanted} threads"
        assert page.evaluate("self.crossOriginIsolated") is False       # still the same page
        with page.expect_navigation():
            button.click()
        s.wait_ready()
        assert page.evaluate("self.crossOriginIsolated") is True
        assert inits(page) == [wanted]
    finally:
        host.stop()


def test_threads_from_the_url_and_the_select(dev_server, session_factory):
    s = recording(session_factory(dev_server.url))
    page = s.open("index.html?threads=2")
    assert page.evaluate("self.crossOriginIsolated") is True
    assert inits(page) == [2]
    assert page.input_value("[data-testid=threads-select]") == "2"
    assert page.is_hidden("[data-testid=threads-note]")
    assert threads_text(page).startswith(f"{reported(page)['used']} thread")
    if reported(page).get("requested") is not None:
        assert reported(page)["requested"] == 2

    # a bad count: said so, and the default sent
    bad = recording(session_factory(dev_server.url))
    page = bad.open("index.html?threads=abc")
    wanted = page.evaluate(DEFAULT)
    assert inits(page) == [wanted]
    note = page.text_content("[data-testid=threads-note]")
    assert page.is_visible("[data-testid=threads-note]")
    assert note == f"?threads=abc is not a thread count (a whole number from 1 to 16); using {wanted}"
    for wrong in ("0", "17"):
        page.goto(dev_server.url + f"index.html?threads={wrong}")
        bad.wait_ready()
        assert inits(page) == [wanted], wrong
        assert f"?threads={wrong} is not a thread count" in page.text_content("[data-testid=threads-note]")

    # the select: the worker starts again with the chosen count, kept for the next visit
    page.goto(dev_server.url + "index.html")
    bad.wait_ready()
    page.select_option("[data-testid=threads-select]", "1")
    page.wait_for_function("window.initThreads.length === 2")
    bad.wait_ready()
    assert inits(page) == [wanted, 1]
    assert threads_text(page) == "1 thread"
    assert page.evaluate("localStorage.getItem('engine-threads')") == "1"
    page.reload()
    bad.wait_ready()
    assert inits(page) == [1] and page.input_value("[data-testid=threads-select]") == "1"
    # ?threads= wins over the stored choice; choosing "auto" forgets it (and updates the address)
    page.goto(dev_server.url + "index.html?threads=3")
    bad.wait_ready()
    assert inits(page) == [3]
    page.select_option("[data-testid=threads-select]", "")
    page.wait_for_function("window.initThreads.length === 2")
    bad.wait_ready()
    assert inits(page) == [3, wanted]
    assert page.evaluate("localStorage.getItem('engine-threads')") is None
    assert "threads=" not in page.url
    assert bad.console_errors == [] and s.console_errors == []


def test_hosts_send_the_headers_on_every_response(server):
    """nginx (deploy/nginx.conf) and the dev server: pages, worker scripts, wasm, ranges,
    revalidations and errors all carry the isolation headers (a worker script without them
    would not be isolated, and could not share memory)."""
    import urllib.error
    import urllib.request

    def headers(path, **extra):
        try:
            with urllib.request.urlopen(urllib.request.Request(server.url + path, headers=extra), timeout=10) as r:
                return r.status, r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.headers
    weights = next(server.root.glob("models/mnist_cnn/*.safetensors")).relative_to(server.root).as_posix()
    status, first = headers("worker.js")
    asked = [("", {}, 200), ("worker.js", {}, 200), ("kernels/engine_kernels.simd.wasm", {}, 200),
             ("pyodide/pyodide.asm.wasm", {"Accept-Encoding": "br, gzip"}, 200),
             (weights, {"Range": "bytes=0-99"}, 206), ("worker.js", {"If-None-Match": first["ETag"]}, 304),
             ("no-such-file", {}, 404)]
    for path, extra, expected in asked:
        status, got = headers(path, **extra)
        assert status == expected, (path, status)
        assert got["Cross-Origin-Opener-Policy"] == "same-origin", path
        assert got["Cross-Origin-Embedder-Policy"] == "require-corp", path
        # our HTML documents stay ours; the rest is public (another origin installs and fetches it)
        html = (got["Content-Type"] or "").startswith("text/html")
        assert got["Cross-Origin-Resource-Policy"] == ("same-origin" if html else "cross-origin"), path
        assert got["Access-Control-Allow-Origin"] == "*", path
