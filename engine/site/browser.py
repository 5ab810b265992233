"""The site's models in the browser: the Cache API under `engine.site.remote`, the heap check, and
a registry model's checkpoint loaded from the page's own site (fetched by engine.runtime's
transport, the browser's `fetch`).

The only weight-loading code that touches JS. Retries, coalescing, verification, cache keys
and what to do about a host that mangles byte ranges live in the pure-Python engine.site.remote,
tested natively. `js` and `pyodide` are imported inside the functions, so this module imports
under CPython. Inside Pyodide a JS promise is awaited directly from an `async def`.

`load_checkpoint` is the browser side of engine.site.folders.fetch_model: lazily by Range, verified,
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

from .. import runtime
from ..errors import ModelTooLarge
from ..runtime import js_object


class CacheUnavailable(RuntimeError):
    pass


class CacheApiStore:
    """`engine.site.remote.CacheStore` in the Cache API, under the cache `name`.

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
        init = js_object({"status": 200, "headers": {"content-type": "application/octet-stream"}})
        await cache.put(key, js.Response.new(array, init))

    async def delete(self, key: str) -> None:
        await (await self._cache()).delete(key)

    async def keys(self) -> list[str]:
        return [str(request.url) for request in await (await self._cache()).keys()]


# --- a registry model from the page's own site ----------------------------------------------
MEMORY_PER_WEIGHT_BYTE = 2


def _size(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def check_memory(manifest: dict, name: str, where: str, heap_now: tuple[int, int] | None = None) -> None:
    """Raise ModelTooLarge when model `name` (its checked manifest) would not fit in the heap."""
    from .folders import prefetch_bytes
    heap_now = heap_now or runtime.heap()
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
    ending in "/"; None: the page's own, engine.runtime.site_url()): its manifest first, then
    (when the model fits in memory) its weights."""
    from .remote import fetch_manifest
    from .folders import MANIFEST_NAME, fetch_model
    folder = f"{site or runtime.site_url()}models/{entry.name}/"
    transport = runtime.transport()
    manifest = await fetch_manifest(folder + MANIFEST_NAME, transport)
    check_memory(manifest, entry.name, folder + MANIFEST_NAME)
    return await fetch_model(folder, transport=transport, cache=CacheApiStore(), progress=progress,
                             manifest=manifest)
