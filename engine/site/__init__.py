"""A site's model folders, and weights at a URL: fetched, verified and cached, then opened with the
format readers of engine.formats (which never import this package).

- `manifest`: a built model folder's manifest.json, the sha256s every byte is checked against;
- `fetcher`: one file's bytes over a transport (engine.runtime.transport()): retries, checked
  replies, a host without byte ranges read whole, the cache;
- `remote`: a checkpoint's tensors prefetched in coalesced runs, verified, cached (`Loader`);
- `folders`: a site's model folders (`fetch_model`, `fetch_gguf`, row tables), its registry;
- `checkpoint`: what a pipeline sees: tensors and processor files;
- `browser`: the browser's side: the Cache API, the heap check, our page's models;
- `urls`: `load_safetensors`, `load_gguf` and `load_pth` of a URL in every Python.

`load_gguf` and `load_safetensors` below are where the two levels meet: a file goes to the format
reader, a site's model folder (or a URL) to this package. In Pyodide `open_source` reads a URL
through the browser (engine.site.urls), and the awaitable forms `load_*_async` fetch one in any
Python.
"""
import os

from .. import runtime
from ..formats.gguf import GGUFFile
from ..formats.gguf import load_gguf as _open_gguf_file
from ..formats.safetensors import load_safetensors as _open_safetensors_file
from ..formats.sources import ByteSource, is_url, set_url_opener


def _site_folder_url(location) -> bool:
    """Whether `location` is the URL of a site's model folder (ending in "/") or of its manifest."""
    return is_url(location) and location.split("?")[0].endswith(("/", "/manifest.json"))


def load_gguf(location) -> GGUFFile:
    """Open a GGUF lazily: a path, an http(s) URL, a bytes-like object or a ByteSource; or a
    folder the site build wrote (dist/models/<name>/, or its manifest.json), whole or in parts,
    on disk or at a URL (then its tensors are checked against the manifest's sha256s)."""
    if isinstance(location, (str, os.PathLike)) and not is_url(location) and (
            os.path.isdir(location) or os.fspath(location).endswith(".json")):
        from .folders import open_gguf_folder
        return open_gguf_folder(location)
    if _site_folder_url(location):
        from .urls import load_folder
        return load_folder(location, "gguf")
    return _open_gguf_file(location)


def load_safetensors(location):
    """Open lazily: an index (.json), a directory holding one, or a single file or URL; or the URL
    of a site's model folder (or its manifest.json): every tensor fetched and checked against the
    manifest's sha256s."""
    if _site_folder_url(location):
        from .urls import load_folder
        return load_folder(location, "safetensors")
    return _open_safetensors_file(location)


# --- URLs in every Python (engine.site.urls, imported on first use: it brings the site layer) ------
def _open_url(url: str) -> ByteSource:
    from .urls import open_url
    return open_url(url)


if runtime.in_browser():                # urllib has no network there: the browser fetches
    set_url_opener(_open_url)


async def load_safetensors_async(location, **options):
    """`await` form of load_safetensors: a URL's header, then all its tensors, fetched (the browser's
    fetch in Pyodide, with or without JSPI); the file returned reads from memory."""
    from .urls import load_safetensors_async as load
    return await load(location, **options)


async def load_gguf_async(location, **options) -> GGUFFile:
    """`await` form of load_gguf: a URL's header, then all its tensors, fetched; read from memory."""
    from .urls import load_gguf_async as load
    return await load(location, **options)


async def load_pth_async(location, **options):
    """`await` form of load_pth: a URL's checkpoint fetched whole, then read as load_pth does."""
    from .urls import load_pth_async as load
    return await load(location, **options)
