"""A registry model's checkpoint from the page's own site: lazily by Range, verified, cached.

The browser side of engine.io.site.fetch_model: JS fetch for the transport, the Cache API
for the cache. `engine.pipeline(task)` with no weights uses it inside Pyodide (waiting
through JSPI), and the worker's `load` awaits it directly. A GGUF model (its manifest says
so) comes back as its GGUFFile with every tensor fetched: `.metadata`, `.info(name)`,
QuantizedTensors.

Memory: everything a model holds lives in the worker's WebAssembly heap, which wasm32 caps at
4 GiB (Pyodide's build asks for that maximum; Emscripten's getHeapMax says it) and which never
shrinks. A model needs about twice its prefetched weight bytes there: the downloaded bytes
stay, as the tensors are views of them, and loading and running take as much again (SmolLM2:
94 MiB of weights grew the heap by 198 MiB, KV cache and tokenizer included). The page refuses
a model whose need exceeds the heap's headroom (the ceiling minus the heap's size now) from
the sizes in its manifest, before downloading any weights.
"""
from __future__ import annotations

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
    from engine.errors import ModelTooLarge
    from engine.io.site import prefetch_bytes
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


async def load_checkpoint(entry, progress=None):
    """The Checkpoint of registry entry `entry` from <site>/models/<name>/: its manifest first,
    then (when the model fits in memory) its weights."""
    from engine import registry
    from engine.io.remote import fetch_manifest
    from engine.io.site import MANIFEST_NAME, fetch_model
    from engine.web.fetch import CacheApiStore, JsFetchTransport
    folder = f"{registry.site_url()}models/{entry.name}/"
    transport = JsFetchTransport()
    manifest = await fetch_manifest(folder + MANIFEST_NAME, transport)
    check_memory(manifest, entry.name, folder + MANIFEST_NAME)
    return await fetch_model(folder, transport=transport, cache=CacheApiStore(), progress=progress,
                             manifest=manifest)
