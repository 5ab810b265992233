"""A registry model's checkpoint from the page's own site: lazily by Range, verified, cached.

The browser side of engine.io.site.fetch_model: JS fetch for the transport, the Cache API
for the cache. `engine.pipeline(task)` with no weights uses it inside Pyodide (waiting
through JSPI), and the worker's `load` awaits it directly. A GGUF model (its manifest says
so) comes back as its GGUFFile with every tensor fetched: `.metadata`, `.info(name)`,
QuantizedTensors.
"""
from __future__ import annotations


async def load_checkpoint(entry, progress=None):
    """The Checkpoint of registry entry `entry` from <site>/models/<name>/."""
    from engine import registry
    from engine.io.site import fetch_model
    from engine.web.fetch import CacheApiStore, JsFetchTransport
    return await fetch_model(f"{registry.site_url()}models/{entry.name}/", transport=JsFetchTransport(),
                             cache=CacheApiStore(), progress=progress)
