"""Where the engine runs, and the few things that depend on it: the one module that asks.

- `in_browser()`: inside Pyodide (`sys.platform == "emscripten"`, a page or its worker), else native
  CPython; `can_block()`: whether synchronous code can wait for the browser here (JavaScript
  Promise Integration, entered asynchronously); `page_url()`, `cross_origin_isolated()`, `heap()`:
  what the page says about itself.
- `wait(awaitable, hint)`: the one way synchronous code waits for an awaitable.
- `load_packages(names)`: Pyodide packages beyond the engine's (jinja2 for chat templates), from
  the lock of the Pyodide that runs us; natively nothing.
- The page's site (`set_site`, `known_site`, `site_url`): the base URL of the built site the
  engine's files come from, in the browser (default weights, the simd kernels).
- `transport()`: the one way the engine fetches over HTTP, weights and kernels alike: the
  browser's `fetch` in Pyodide (`JsFetchTransport`), urllib in a thread natively
  (`UrllibTransport`). A transport's `get(url, start=None, end=None)` answers (status, headers
  with lower-case names, body); bytes [start, end) when start is given.

Nothing else in the engine reads `sys.platform`, and `js` and `pyodide` are imported only here,
in the browser glue (engine.web, engine.site.browser) and in the backends' device layers
(tests/test_layers.py checks both). This module sits at the bottom: it imports nothing of the
engine but its errors.
"""
from __future__ import annotations

import asyncio
import sys
import urllib.parse

from .errors import EngineError, FetchError, NeedsAwait, WeightsError

# --- where we run ---------------------------------------------------------------------------------


def in_browser() -> bool:
    """Inside Pyodide: the browser's fetch, Cache API and WebAssembly memory, no threads of Python's
    own. Read on every call (tests set `sys.platform` to Pyodide's to run those paths natively)."""
    return sys.platform == "emscripten"


def can_block() -> bool:
    """Whether synchronous code can wait for the browser here: natively always; in Pyodide only
    with JavaScript Promise Integration and Python entered asynchronously (our worker's calls)."""
    if not in_browser():
        return True
    from pyodide.ffi import can_run_sync
    return bool(can_run_sync())


def page_url() -> str | None:
    """The address of the page (or worker) running this, in the browser; None natively."""
    if not in_browser():
        return None
    import js
    return str(js.location.href)


def cross_origin_isolated() -> bool:
    """Whether the page may share memory with its workers (COOP and COEP sent); False natively,
    where the question does not arise."""
    if not in_browser():
        return False
    try:
        import js
    except ImportError:
        return False
    return getattr(js, "crossOriginIsolated", False) is True


WASM32_CEILING = 4 << 30


def heap() -> tuple[int, int] | None:
    """(ceiling, size now) in bytes of this page's WebAssembly heap; None natively."""
    try:
        import pyodide_js
    except ImportError:
        return None
    module = pyodide_js._module
    try:
        ceiling = int(module._emscripten_get_heap_max())
    except Exception:                       # an Emscripten build without it: wasm32's limit
        ceiling = WASM32_CEILING
    return ceiling, int(module.HEAPU8.length)


# --- waiting --------------------------------------------------------------------------------------

def wait(awaitable, hint: str, *, thread: bool = False):
    """Run `awaitable` to its end from synchronous code, the one way the engine does.

    In Pyodide through JSPI (`pyodide.ffi.run_sync`); where that cannot be done (no JSPI, or Python
    was not entered asynchronously) NeedsAwait, naming `hint`, the awaitable form to use instead.
    Natively in a fresh event loop; inside a running one (a notebook's), in a thread of its own
    when `thread` (the awaitable holds nothing of the running loop: a pipeline being built),
    else NeedsAwait naming `hint`."""
    if in_browser():
        if not can_block():
            _discard(awaitable)
            raise NeedsAwait("this call cannot wait for the browser here (this runtime has no JavaScript "
                             "Promise Integration, or the call was not entered asynchronously): "
                             f"use `{hint}` instead")
        from pyodide.ffi import run_sync
        return run_sync(asyncio.ensure_future(awaitable))
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    if thread:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, awaitable).result()
    _discard(awaitable)
    raise NeedsAwait(f"this call cannot block inside a running event loop: use `{hint}` instead")


def _discard(awaitable) -> None:
    """Close a coroutine that will not run (no "never awaited" warning); a future is left alone."""
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()


# --- packages beyond the engine's ---------------------------------------------------------------------

async def load_packages(names) -> None:
    """Pyodide packages that are not importable yet, installed from the lock of the Pyodide that
    runs us (`pyodide.loadPackage`: on our site, its own wheels, each checked against the lock's
    sha256; jinja2 for chat templates). Natively nothing: pip installs them. An EngineError
    naming the package and why when one cannot be installed."""
    import importlib
    import importlib.util
    names = [name for name in names if importlib.util.find_spec(name) is None]
    if not names or not in_browser():
        return
    import pyodide_js
    from pyodide.ffi import create_proxy, to_js
    errors: list[str] = []
    report, quiet = create_proxy(lambda text: errors.append(str(text))), create_proxy(lambda text: None)
    try:
        await pyodide_js.loadPackage(to_js(names), js_object({"messageCallback": quiet, "errorCallback": report}))
    finally:
        report.destroy()
        quiet.destroy()
    importlib.invalidate_caches()
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise EngineError(f"the {', '.join(missing)} package could not be installed from this Pyodide's "
                          f"pyodide-lock.json: {' '.join(errors) or 'no reason given'}")


# --- the page's site ------------------------------------------------------------------------------

_site: dict = {"url": None}


def set_site(url: str) -> None:
    """The site's base URL, in the browser (our page's worker sets it; `engine.pipeline(task,
    site=URL)` sets it in any other page where none is set): default weights and the simd
    kernels come from there."""
    _site["url"] = url if url.endswith("/") else url + "/"


def known_site() -> str | None:
    """The site's base URL when one is set, else None."""
    return _site["url"]


def site_url() -> str:
    """The site's base URL; a WeightsError saying what to do when none is set."""
    if _site["url"] is None:
        raise WeightsError("this page has no site to load models from: pass site=URL, the base URL of a built "
                           "site (engine.pipeline(task, site=URL)), or call engine.runtime.set_site(URL)")
    return _site["url"]


# --- fetching -------------------------------------------------------------------------------------

def transport(**options):
    """The fetch transport for this runtime: the browser's fetch in Pyodide, urllib natively.
    `options` go to its constructor (JsFetchTransport: stall_timeout, headers; UrllibTransport:
    timeout)."""
    return JsFetchTransport(**options) if in_browser() else UrllibTransport(**options)


class Unexplained(ConnectionError):
    """A failed request whose message is already the whole reason a person needs (the browser's
    refusal of a cross-origin request, which it does not explain)."""


def http_get(url: str, start: int | None = None, end: int | None = None,
             timeout: float = 60.0) -> tuple[int, dict, bytes]:
    """GET `url` natively with urllib, bytes [start, end) when start is given: the status, the
    headers (lower-case names) and the body. A 200 to a Range request is the whole file, which is
    not downloaded just to fail: its body is empty. urllib is imported here, on first use: it takes
    ~0.2 s to import in Pyodide, which fetches through the browser instead."""
    import http.client
    import urllib.error
    import urllib.request
    headers = {"Accept-Encoding": "identity"}      # ranges address the raw bytes
    if start is not None:
        headers["Range"] = f"bytes={start}-{end - 1}"
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            lower = {k.lower(): v for k, v in response.headers.items()}
            skip = start is not None and response.status != 206
            return response.status, lower, b"" if skip else response.read()
    except urllib.error.HTTPError as e:
        try:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, b""
        finally:
            e.close()
    except http.client.HTTPException as e:   # IncompleteRead, BadStatusLine...
        raise ConnectionError(f"{type(e).__name__}: {e}") from None


class UrllibTransport:
    """The transport of CPython: urllib in a worker thread (not for Pyodide: no threads)."""

    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout

    async def get(self, url, start=None, end=None):
        return await asyncio.to_thread(http_get, url, start, end, self.timeout)


STALL_SECONDS = 20.0        # a request that delivers less than STALL_BYTES in this long is aborted
STALL_BYTES = 1024

# One fetch, its body read on the JS side: a watchdog aborts it when it stalls (no time limit on
# a download that progresses, however large), a body that is not wanted is never downloaded,
# and the bytes cross into Python once.
_HELPER = r"""
({
  async get(url, headers, stallMs, stallBytes, headersOnly) {
    const controller = new AbortController();
    let mark = performance.now(), since = 0, stalled = false;
    const progress = (n) => { since += n; if (since >= stallBytes) { since = 0; mark = performance.now(); } };
    const watchdog = setInterval(() => {
      if (performance.now() - mark >= stallMs) { stalled = true; controller.abort(); }
    }, Math.max(25, Math.min(1000, stallMs / 4)));
    const failed = (err) => new Error(stalled
      ? `the download stalled: less than ${stallBytes} bytes in ${stallMs / 1000} s`
      : `the connection failed (${err && err.name}: ${err && err.message})`);
    try {
      let response;
      try {
        // no-store: the Cache API keeps the verified bytes; the HTTP cache would hold them twice
        // (and completes a partial entry with Range requests of its own)
        response = await fetch(url, { headers, signal: controller.signal, cache: "no-store" });
      } catch (err) { throw failed(err); }
      progress(stallBytes);                             // the headers count as progress
      const found = {};
      response.headers.forEach((value, name) => { found[name] = value; });
      const ranged = "Range" in headers;
      const encoded = (found["content-encoding"] || "identity") !== "identity";
      // a whole file for a range, a compressed range, an error page: the caller reads no body
      if (headersOnly || !response.ok || (ranged && (response.status !== 206 || encoded)) || !response.body) {
        controller.abort();
        return { status: response.status, headers: found, body: new Uint8Array(0) };
      }
      let body = new Uint8Array(encoded ? 0 : Number(found["content-length"]) || 0), at = 0;
      const reader = response.body.getReader();
      for (;;) {
        let part;
        try { part = await reader.read(); } catch (err) { throw failed(err); }
        if (part.done) break;
        const chunk = part.value;
        if (at + chunk.byteLength > body.length) {      // no or a wrong Content-Length: grow
          const grown = new Uint8Array(Math.max(2 * body.length, at + chunk.byteLength));
          grown.set(body.subarray(0, at));
          body = grown;
        }
        body.set(chunk, at);
        at += chunk.byteLength;
        progress(chunk.byteLength);
      }
      return { status: response.status, headers: found, body: body.subarray(0, at) };
    } finally {
      clearInterval(watchdog);
    }
  },
})
"""
_helper = None


def js_object(value):
    """`value` (dicts, lists, scalars) as a JS object, in Pyodide."""
    import js
    from pyodide.ffi import to_js
    return to_js(value, dict_converter=js.Object.fromEntries)


def other_origin(url: str) -> str | None:
    """`url`'s origin (scheme://host:port) when it is not this page's, else None (natively: None)."""
    if not in_browser():
        return None
    import js
    here = getattr(getattr(js, "location", None), "origin", None)
    parts = urllib.parse.urlsplit(urllib.parse.urljoin(str(js.location.href), url) if here else url)
    origin = f"{parts.scheme}://{parts.netloc}"
    return origin if here and origin != str(here) else None


class JsFetchTransport:
    """The transport of Pyodide, over `fetch`. A request that delivers less than `stall_bytes` in
    `stall_timeout` seconds (the wait for the headers included) is aborted and fails as a
    ConnectionError, which the loader retries; a slow download that keeps moving is never cut
    short. A request another origin refuses (CORS), which the browser does not explain, fails as
    Unexplained naming the likely cause."""

    def __init__(self, stall_timeout: float | None = None, headers: dict[str, str] | None = None,
                 stall_bytes: int = STALL_BYTES):
        self.stall_timeout = STALL_SECONDS if stall_timeout is None else stall_timeout
        self.stall_bytes = stall_bytes
        self.headers = dict(headers or {})

    async def _fetch(self, url: str, headers: dict, headers_only: bool = False):
        global _helper
        from pyodide.ffi import JsException
        if _helper is None:
            from pyodide.code import run_js
            _helper = run_js(_HELPER)
        try:
            result = await _helper.get(url, js_object(headers), int(self.stall_timeout * 1000),
                                       self.stall_bytes, headers_only)
        except JsException as e:
            message = str(e).removeprefix("Error: ")
            other = other_origin(url)
            if other and "(TypeError:" in message:
                # the browser hides why (a refused CORS check, an unreachable host): say the likely one
                raise Unexplained(f"the browser gives no reason ({message.removeprefix('the connection failed (')}; "
                                  f"the likely cause is that {other} does not allow cross-origin requests (CORS) "
                                  f"from this page") from None
            raise ConnectionError(message) from None
        found = {str(k).lower(): str(v) for k, v in result.headers.to_py().items()}
        status = int(result.status)
        if status == 206 and "content-range" not in found and other_origin(url):
            raise FetchError("the server answered the Range request, but does not let this page read its "
                             "Content-Range header: another origin's page needs it listed in "
                             "Access-Control-Expose-Headers", file=url)
        return status, found, result.body.to_bytes()

    async def get(self, url: str, start: int | None = None, end: int | None = None):
        headers = dict(self.headers)
        if start is not None:
            headers["Range"] = f"bytes={start}-{end - 1}"    # CORS-safelisted
        return await self._fetch(url, headers)

    async def head(self, url: str) -> tuple[int, dict[str, str]]:
        """(status, headers) of a plain GET of `url`, its body never read (the browser decodes
        a compressed body, so only the headers show how the host serves the file)."""
        status, headers, _ = await self._fetch(url, dict(self.headers), headers_only=True)
        return status, headers
