"""The site's models in the browser: JS `fetch` and the Cache API under `engine.io.remote`, and
a registry model's checkpoint loaded from the page's own site.

The only weight-loading code that touches JS. Retries, coalescing, verification, cache keys
and what to do about a host that mangles byte ranges live in the pure-Python engine.io.remote,
tested natively. `js` and `pyodide` are imported inside the functions, so this module imports
under CPython. Inside Pyodide a JS promise is awaited directly from an `async def`.

`load_checkpoint` is the browser side of engine.io.site.fetch_model: lazily by Range, verified,
cached. `engine.pipeline(task)` with no weights uses it inside Pyodide (waiting through JSPI),
and the worker's `load` awaits it directly. A GGUF model (its manifest says so) comes back as
its GGUFFile with every tensor fetched: `.metadata`, `.info(name)`, QuantizedTensors.

Memory: everything a model holds lives in the worker's WebAssembly heap, which wasm32 caps at
4 GiB (Pyodide's build asks for that maximum; Emscripten's getHeapMax says it) and which never
shrinks. A model needs about twice its prefetched weight bytes there: the downloaded bytes
stay, as the tensors are views of them, and loading and running take as much again (SmolLM2:
94 MiB of weights grew the heap by 198 MiB, KV cache and tokenizer included). The page refuses
a model whose need exceeds the heap's headroom (the ceiling minus the heap's size now) from
the sizes in its manifest, before downloading any weights.
"""
from __future__ import annotations

import urllib.parse

from ..errors import FetchError, ModelTooLarge

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


def _js_object(value):
    import js
    from pyodide.ffi import to_js
    return to_js(value, dict_converter=js.Object.fromEntries)


def _other_origin(url: str) -> str | None:
    """`url`'s origin (scheme://host:port) when it is not this page's, else None."""
    import js
    here = getattr(getattr(js, "location", None), "origin", None)
    parts = urllib.parse.urlsplit(urllib.parse.urljoin(str(js.location.href), url) if here else url)
    origin = f"{parts.scheme}://{parts.netloc}"
    return origin if here and origin != str(here) else None


class JsFetchTransport:
    """`engine.io.remote.Transport` over `fetch`. A request that delivers less than
    `stall_bytes` in `stall_timeout` seconds (the wait for the headers included) is aborted
    and fails as a ConnectionError, which the loader retries; a slow download that keeps
    moving is never cut short."""

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
            result = await _helper.get(url, _js_object(headers), int(self.stall_timeout * 1000),
                                       self.stall_bytes, headers_only)
        except JsException as e:
            message = str(e).removeprefix("Error: ")
            other = _other_origin(url)
            if other and "(TypeError:" in message:
                # the browser hides why (a refused CORS check, an unreachable host): say the likely one
                from .remote import Unexplained
                raise Unexplained(f"the browser gives no reason ({message.removeprefix('the connection failed (')}; "
                                  f"the likely cause is that {other} does not allow cross-origin requests (CORS) "
                                  f"from this page") from None
            raise ConnectionError(message) from None
        found = {str(k).lower(): str(v) for k, v in result.headers.to_py().items()}
        status = int(result.status)
        if status == 206 and "content-range" not in found and _other_origin(url):
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


class CacheUnavailable(RuntimeError):
    pass


class CacheApiStore:
    """`engine.io.remote.CacheStore` in the Cache API, under the cache `name`.

    Entries are synthetic 200 responses (`Cache.put` rejects 206) keyed by the key string,
    itself a URL. The cache is opened for each operation: a Cache object held across a
    session keeps serving and silently storing into a cache the browser has deleted (evicted
    under storage pressure, cleared by the user), so nothing stored after that would survive.
    Failures raise (no Cache API in an insecure context, a full quota); the loader treats them
    as misses and reports them.
    """

    def __init__(self, name: str = "engine-weights-v1"):
        self.name = name

    async def _cache(self):
        import js
        caches = getattr(js, "caches", None)
        if caches is None:
            raise CacheUnavailable("this page has no Cache API (it needs a secure context: https or localhost)")
        return await caches.open(self.name)

    async def get(self, key: str) -> bytes | None:
        response = await (await self._cache()).match(key)     # undefined (None) on a miss
        if response is None:
            return None
        return (await response.arrayBuffer()).to_bytes()

    async def put(self, key: str, data: bytes) -> None:
        import js
        cache = await self._cache()
        array = js.Uint8Array.new(len(data))
        array.assign(data)                    # a JS-owned copy the Response keeps
        init = _js_object({"status": 200, "headers": {"content-type": "application/octet-stream"}})
        await cache.put(key, js.Response.new(array, init))

    async def delete(self, key: str) -> None:
        await (await self._cache()).delete(key)

    async def keys(self) -> list[str]:
        return [str(request.url) for request in await (await self._cache()).keys()]


# --- a registry model from the page's own site ----------------------------------------------
WASM32_CEILING = 4 << 30
MEMORY_PER_WEIGHT_BYTE = 2


def heap() -> tuple[int, int] | None:
    """(ceiling, size now) in bytes of this page's WebAssembly heap; None outside Pyodide."""
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


def _size(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def check_memory(manifest: dict, name: str, where: str, heap_now: tuple[int, int] | None = None) -> None:
    """Raise ModelTooLarge when model `name` (its checked manifest) would not fit in the heap."""
    from .site import prefetch_bytes
    heap_now = heap_now or heap()
    if heap_now is None:
        return
    ceiling, used = heap_now
    weights = prefetch_bytes(manifest)
    need, free = MEMORY_PER_WEIGHT_BYTE * weights, ceiling - used
    if need > free:
        raise ModelTooLarge(f"{name} is too large for this browser: its {_size(weights)} of weights need about "
                            f"{_size(need)} of memory, and this page's WebAssembly heap can grow by {_size(free)} "
                            f"more (its ceiling is {_size(ceiling)}, {_size(used)} already in use); nothing was "
                            f"downloaded", file=where)


async def load_checkpoint(entry, progress=None, site: str | None = None):
    """The Checkpoint of registry entry `entry` from <site>/models/<name>/ (`site`: a base URL
    ending in "/"; None: the page's own, engine.registry.site_url()): its manifest first, then
    (when the model fits in memory) its weights."""
    from .. import registry
    from .remote import fetch_manifest
    from .site import MANIFEST_NAME, fetch_model
    folder = f"{site or registry.site_url()}models/{entry.name}/"
    transport = JsFetchTransport()
    manifest = await fetch_manifest(folder + MANIFEST_NAME, transport)
    check_memory(manifest, entry.name, folder + MANIFEST_NAME)
    return await fetch_model(folder, transport=transport, cache=CacheApiStore(), progress=progress,
                             manifest=manifest)
