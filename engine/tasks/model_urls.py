"""A GGUF that a page names by URL: its header read first, by Range, and checked against the
task's model code before any weight is downloaded; then its weights, by Range, with progress.

    info = await inspect("text-generation", "https://example.org/gemma-3-270m-q4_k_m.gguf")
    info["architecture"], info["size"], info["refused"]     # "gemma3", 253113024, None
    checkpoint = await checkpoint(entry_for(task, url), url, progress)   # then the pipeline

What is checked from the header alone: the file is one GGUF (not the first of a split), its
`general.architecture` is one the task's model code builds (the model module's
`Config.from_gguf`, which names the key and the supported families), every tensor's type is one
the engine computes with (engine.quants.can_dequantize), no tensor is of a kind the model module
refuses (its `REFUSED`), and in the browser the weights fit the WebAssembly heap's headroom. A
refused file is described all the same (size, architecture, tensor types), with the reason.

The header read by `inspect` is kept for the URL last inspected, so loading it next reads only
the tensors (a GGUF header with a large vocabulary is megabytes).
"""
from __future__ import annotations

import sys
import urllib.parse

from .. import registry, runtime
from ..errors import InputError, InvalidHeader, ModelTooLarge, UnknownDtype, WeightsError

MEMORY_PER_WEIGHT_BYTE = 2          # as for a site's model (engine.site.browser): the bytes, then as much again

_opened: dict = {}                  # url -> (GGUFFile, its source, its UrlLoader): the last one inspected


def entry_for(task: str, url: str) -> registry.Model:
    """The registry entry that runs the file at `url` as the task's registered model runs."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InputError(f"a model URL must start with http:// or https://, got {url!r}")
    return registry.for_file(task, url)


def describe(file, size: int) -> dict:
    """What the header says, for people: size, architecture, name, chat template, tensor types."""
    metadata = file.metadata
    infos = [file.info(name) for name in file]
    types: dict[str, int] = {}
    for info in infos:
        types[info.ggml_type] = types.get(info.ggml_type, 0) + 1
    arch = metadata.get("general.architecture")
    name = metadata.get("general.name")
    return {"url": file.name, "file": urllib.parse.unquote(urllib.parse.urlsplit(file.name).path.rsplit("/", 1)[-1]),
            "size": size, "header_bytes": file.data_offset, "weights_bytes": size - file.data_offset,
            "architecture": arch if isinstance(arch, str) else None, "name": name if isinstance(name, str) else None,
            "chat_template": bool(metadata.get("tokenizer.chat_template")), "tensors": len(infos),
            "tensor_types": dict(sorted(types.items()))}


def check(entry: registry.Model, file, size: int, heap=None) -> None:
    """Raise (a WeightsError naming the file and the key or tensor) when the header shows that
    `entry`'s model code cannot run the file, or that its weights cannot fit in memory."""
    from .. import quants
    from ..formats.gguf_split import split_count
    url, metadata = file.name, file.metadata
    if split_count(metadata) != 1:
        raise InvalidHeader(f"the first file of a GGUF split into {metadata.get('split.count')!r} files; "
                            "the page opens a single-file GGUF", file=url, tensor="split.count")
    module = sys.modules.get(getattr(entry.load, "__module__", ""))
    config = getattr(module, "Config", None)
    if config is not None and hasattr(config, "from_gguf"):
        config.from_gguf(metadata, file=url)          # the architecture and its keys
    for name, why in getattr(module, "REFUSED", {}).items():
        if name in file:
            raise InvalidHeader(why, file=url, tensor=name)
    for name in file:
        kind = file.info(name).ggml_type
        if not quants.can_dequantize(kind):
            raise UnknownDtype(f"tensor type {kind} is not supported (supported: "
                               f"{', '.join(quants.DEQUANTIZABLE)})", file=url, tensor=name)
    heap = heap if heap is not None else runtime.heap()
    if heap is not None:
        ceiling, used = heap
        weights = size - file.data_offset
        need, free = MEMORY_PER_WEIGHT_BYTE * weights, ceiling - used
        if need > free:
            raise ModelTooLarge(f"its {weights / 2**20:.0f} MiB of weights need about {need / 2**20:.0f} MiB of "
                                f"memory, and this page's WebAssembly heap can grow by {free / 2**20:.0f} MiB more; "
                                "nothing was downloaded", file=url)


async def _open(entry: registry.Model, url: str, transport, cache):
    """(GGUFFile with its header, its source, its UrlLoader, size) of the GGUF at `url`."""
    from ..site.urls import UrlLoader, default_cache, gguf_header
    loader = UrlLoader(transport, default_cache(cache))
    file, source = await gguf_header(url, loader)
    return file, source, loader, source.size()


async def inspect(task: str, url: str, *, transport=None, cache=True) -> dict:
    """describe() of the GGUF at `url` from its header alone, with "refused": why the task's
    model cannot run it (None when it can). Only an unreadable file raises."""
    entry = entry_for(task, url)
    _opened.clear()
    file, source, loader, size = await _open(entry, url, transport, cache)
    info = describe(file, size)
    try:
        check(entry, file, size)
    except WeightsError as e:
        return {**info, "refused": str(e)}
    _opened[url] = (file, source, loader)             # one header kept: the file about to load
    return {**info, "refused": None}


async def checkpoint(entry: registry.Model, url: str, progress=None, *, transport=None, cache=True):
    """The Checkpoint of the GGUF at `url` with every tensor fetched (progress(loaded, total)
    in bytes), its header read and checked first (or the one `inspect` kept)."""
    from ..site.checkpoint import Checkpoint
    from ..site.urls import fetch_gguf_tensors
    if url in _opened:
        file, source, loader = _opened.pop(url)
    else:
        file, source, loader, size = await _open(entry, url, transport, cache)
        check(entry, file, size)
    await fetch_gguf_tensors(file, source, loader, progress)
    return Checkpoint(file, location=url, complete=True)
