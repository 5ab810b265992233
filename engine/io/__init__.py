"""Weights I/O: byte sources (file, memory, HTTP), the formats read over them, and a site's model folders.

Two levels, imported one way only:
- the formats (`safetensors`, `gguf`, `pth`, `ctranslate2`) parse bytes from a `ByteSource` (`sources`) and know
  nothing of where the bytes come from;
- the site (`manifest`, `remote`, `site`, `checkpoint`, `browser`, `urls`) fetches, verifies and caches a
  model folder the build wrote, or a file at a URL, and opens it with the format readers.

`load_gguf` below is where the two meet: a GGUF file goes to the format reader, a site's model
folder to the site. So are URLs: in Pyodide `open_source` reads one through the browser
(engine.io.urls), and the awaitable forms `load_*_async` fetch one in any Python.
"""
import os

from .. import runtime
from .ctranslate2 import CTranslate2File, load_ctranslate2  # noqa: F401
from .gguf import GGUFFile, QuantizedTensor  # noqa: F401
from .gguf import load_gguf as _open_gguf_file
from .pth import ModuleCheckpoint, ModuleRecord, load_pth, read_module_checkpoint, read_pth_arrays  # noqa: F401
from .safetensors import (SafetensorsFile, ShardedSafetensors, TensorInfo,  # noqa: F401
                          save_safetensors)
from .safetensors import load_safetensors as _open_safetensors_file
from .sources import (ByteSource, BytesSource, FileSource, HttpSource,  # noqa: F401
                      RangeSource, SourceNotFound, is_url, open_source, set_url_opener)


def _site_folder_url(location) -> bool:
    """Whether `location` is the URL of a site's model folder (ending in "/") or of its manifest."""
    return is_url(location) and location.split("?")[0].endswith(("/", "/manifest.json"))


def load_gguf(location) -> GGUFFile:
    """Open a GGUF lazily: a path, an http(s) URL, a bytes-like object or a ByteSource; or a
    folder the site build wrote (dist/models/<name>/, or its manifest.json), whole or in parts,
    on disk or at a URL (then its tensors are checked against the manifest's sha256s)."""
    if isinstance(location, (str, os.PathLike)) and not is_url(location) and (
            os.path.isdir(location) or os.fspath(location).endswith(".json")):
        from .site import open_gguf_folder
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


# --- URLs in every Python (engine.io.urls, imported on first use: it brings the site layer) ------
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
