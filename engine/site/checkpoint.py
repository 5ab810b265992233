"""A model's checkpoint as a pipeline sees it: its tensors and its processor's files.

The tensors are a lazy mapping by checkpoint name (engine.load_safetensors, engine.load_gguf,
a .pth reader, or what engine.site.folders.fetch_model prefetched in the browser: safetensors or a
GGUF, as the site's manifest says), or a location the model's loader opens; the processor files
(labels.json, tokenizer.json, config.json, ...) come from memory when they were fetched
with the weights, else from beside the weights' location. A checkpoint is `complete` once its
processor files were fetched up front (a site's model folder, whose manifest lists all of them;
`fetch`, for code that cannot wait later): a file it lacks is then absent without a request.
"""
from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from ..errors import SourceNotFound, WeightsError
from ..formats.sources import is_url, open_source


def beside(location: str, name: str) -> str:
    """The file `name` in the folder of `location` (a file, folder or URL)."""
    if is_url(location):
        return urllib.parse.urljoin(location, name)
    folder = Path(location) if Path(location).is_dir() else Path(location).parent
    return str(folder / name)


class Checkpoint:
    def __init__(self, tensors, files: dict[str, bytes] | None = None, location: str | None = None,
                 fallback: str | None = None, complete: bool = False):
        self.tensors = tensors          # a lazy mapping by name, or a location the model's loader opens
        self.files = dict(files or {})
        self.location = location        # where the processor files lie beside
        self.fallback = fallback        # ... else beside this one (the default weights)
        self.complete = complete        # `files` holds every processor file there is: look nowhere else

    def file(self, name: str, required: bool = True) -> bytes | None:
        """The bytes of processor file `name`; None when absent and not `required`."""
        if name in self.files:
            return self.files[name]
        places = [p for p in (self.location, self.fallback) if p is not None]
        if self.complete:
            if not required:
                return None
            where = beside(places[0], name) if places else name
            raise WeightsError(f"{name} is missing: it is not among the files that came with the weights "
                               f"({', '.join(sorted(self.files)) or 'none'})", file=where)
        for place in places:
            try:
                with open_source(beside(place, name)) as source:
                    data = bytes(source.read(0, source.size()))
            except SourceNotFound:
                continue
            self.files[name] = data
            return data
        if not required:
            return None
        where = beside(places[0], name) if places else name
        raise WeightsError(f"{name} is missing: it must lie beside the weights (`python build.py` writes it "
                           f"into dist/models/<model>/)", file=where)


    async def fetch(self, names, get) -> None:
        """Fetch the processor files `names` now, from beside the location, else beside the
        fallback (URLs by `await get(url)` -> bytes, which raises SourceNotFound for a missing
        one; paths read as they are): afterwards the checkpoint is `complete`, so `file` never
        waits for the network."""
        for name in names:
            for place in (self.location, self.fallback):
                if name in self.files or place is None:
                    continue
                where = beside(place, name)
                try:
                    if is_url(where):
                        self.files[name] = bytes(await get(where))
                    else:
                        with open_source(where) as source:
                            self.files[name] = bytes(source.read(0, source.size()))
                except SourceNotFound:
                    continue
        self.complete = True


def location_of(weights) -> str | None:
    """A str location for a path or URL (`weights` given as such), else None."""
    return os.fspath(weights) if isinstance(weights, (str, os.PathLike)) else None
