"""Browser transport and cache for `engine.io.remote`: JS `fetch` and the Cache API.

The only weight-loading code that touches JS. Retries, coalescing, verification and
cache keys live in the pure-Python engine.io.remote, tested natively. `js` and
`pyodide.ffi` are imported inside the methods, so this module imports under CPython.
Inside Pyodide a JS promise is awaited directly from an `async def`.
"""
from __future__ import annotations

import asyncio

# what engine.io.remote reads, plus two that help when debugging a host
_HEADERS = ("content-range", "content-length", "content-type", "content-encoding", "etag")


def _js_object(value):
    import js
    from pyodide.ffi import to_js
    return to_js(value, dict_converter=js.Object.fromEntries)


class JsFetchTransport:
    """`engine.io.remote.Transport` over `fetch`; a request not done in `timeout` s is
    aborted, so a stalled connection fails and is retried instead of hanging the load."""

    def __init__(self, timeout: float = 30.0, headers: dict[str, str] | None = None):
        self.timeout = timeout
        self.headers = dict(headers or {})

    async def get(self, url: str, start: int | None = None, end: int | None = None):
        import js
        from pyodide.ffi import create_proxy

        headers = dict(self.headers)
        if start is not None:
            headers["Range"] = f"bytes={start}-{end - 1}"    # CORS-safelisted
        controller = js.AbortController.new()
        abort = create_proxy(lambda: controller.abort())
        timer = js.setTimeout(abort, int(self.timeout * 1000))
        try:
            response = await js.fetch(url, _js_object(
                {"method": "GET", "headers": headers, "signal": controller.signal}))
            status = int(response.status)
            found = {name: str(response.headers.get(name)) for name in _HEADERS
                     if response.headers.has(name)}
            if start is not None and status != 206:
                controller.abort()      # a 200 is the whole file: do not download it to fail
                return status, found, b""
            body = (await response.arrayBuffer()).to_bytes()
        finally:
            js.clearTimeout(timer)
            abort.destroy()
        return status, found, body


class CacheApiStore:
    """`engine.io.remote.CacheStore` in the Cache API, under the cache `name`.

    Entries are synthetic 200 responses (`Cache.put` rejects 206) keyed by the key
    string, itself a URL. Where `caches` is missing or refused (an insecure context,
    some private modes) every get misses and every put is dropped.
    """

    def __init__(self, name: str = "engine-weights-v1"):
        self.name = name
        self._opening = None

    async def _open_now(self):
        import js
        try:
            return await js.caches.open(self.name)
        except Exception:           # AttributeError (no `caches`), SecurityError
            return None

    async def _cache(self):
        if self._opening is None:   # one open shared by concurrent callers
            self._opening = asyncio.ensure_future(self._open_now())
        return await self._opening

    async def get(self, key: str) -> bytes | None:
        cache = await self._cache()
        if cache is None:
            return None
        response = await cache.match(key)     # undefined (None) on a miss
        if response is None:
            return None
        return (await response.arrayBuffer()).to_bytes()

    async def put(self, key: str, data: bytes) -> None:
        import js
        cache = await self._cache()
        if cache is None:
            return
        array = js.Uint8Array.new(len(data))
        array.assign(data)                    # a JS-owned copy the Response keeps
        init = _js_object({"status": 200,
                           "headers": {"content-type": "application/octet-stream"}})
        await cache.put(key, js.Response.new(array, init))

    async def delete(self, key: str) -> None:
        cache = await self._cache()
        if cache is not None:
            await cache.delete(key)

    async def keys(self) -> list[str]:
        cache = await self._cache()
        if cache is None:
            return []
        return [str(request.url) for request in await cache.keys()]

    @property
    def available(self) -> bool | None:
        """Whether the Cache API opened (None before the first use)."""
        if self._opening is None or not self._opening.done():
            return None
        return self._opening.result() is not None
