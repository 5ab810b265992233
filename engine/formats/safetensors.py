"""safetensors: a lazy reader (one file or HF-style shards) and an atomic writer.

Format (https://github.com/huggingface/safetensors): an 8-byte little-endian u64 N,
N bytes of UTF-8 JSON (possibly space padded), then the data buffer. The JSON maps
tensor names to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative
to the data buffer, plus an optional "__metadata__" {str: str}. The buffer must be
indexed entirely: no holes, no overlaps.

Opening validates the whole header against the file size (engine/formats/safetensors_header.py)
and reads no tensor data; tensors are read on access, as zero-copy views of the source where
possible.
"""
from __future__ import annotations

import json
import math
import os
import struct
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .. import dtypes
from ..errors import HeaderTooLarge, InvalidHeader, MissingShard, MissingTensor
from ..tensor import Tensor, from_raw
from ..untrusted import checked_name
from .safetensors_header import (MAX_HEADER_BYTES, TensorInfo, collector_paused, parse_json,
                                 read_header)
from .sources import ByteSource, SourceNotFound, is_url, open_source

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def to_tensor(info: TensorInfo, buffer) -> Tensor:
    little = info.dtype.storage.newbyteorder("<")      # safetensors is little-endian
    array = np.frombuffer(buffer, dtype=little, count=math.prod(info.shape))
    if not array.dtype.isnative:
        array = array.astype(info.dtype.storage)
    elif not array.flags.aligned:       # other writers may not align; kernels expect it
        array = array.copy()
    return from_raw(array, info.dtype, info.shape)


class _LazyWeights(Mapping):
    """Mapping plumbing shared by the single-file and sharded readers.

    Subclasses keep `_names`: a dict keyed by tensor name (known without reading data).
    """

    name: str
    _names: dict

    def __contains__(self, name) -> bool:    # Mapping's default would read the tensor
        return name in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self)} tensors)"


class SingleFile(_LazyWeights):
    """One weights file over a ByteSource: its header parsed at open (`_read_header` sets
    `metadata` and `_infos`, name -> info with offset and nbytes), tensors read on access and
    made by `_wrap(info, buffer)`."""

    @property
    def _names(self) -> dict:
        return self._infos

    def __init__(self, source):
        self.source = open_source(source)
        self.name = self.source.name
        try:
            self._read_header()
        except BaseException:
            if self.source is not source:   # opened here: do not leak the mapping
                self.source.close()
            raise

    def _read_header(self) -> None:
        raise NotImplementedError

    def _wrap(self, info, buffer):
        return to_tensor(info, buffer)

    def info(self, name: str):
        try:
            return self._infos[name]
        except KeyError:
            raise MissingTensor("no such tensor", file=self.name, tensor=name) from None

    def __getitem__(self, name: str):
        info = self.info(name)
        return self._wrap(info, self.source.read(info.offset, info.nbytes))

    def get_many(self, names: Iterable[str] | None = None) -> dict:
        """Several tensors (all by default) through one coalesced `read_many`."""
        with collector_paused():        # thousands of small tensors: see read_header
            infos = [self.info(n) for n in (self._infos if names is None else names)]
            buffers = self.source.read_many([(i.offset, i.nbytes) for i in infos])
            return {i.name: self._wrap(i, b) for i, b in zip(infos, buffers)}

    def close(self) -> None:
        self.source.close()


class SafetensorsFile(SingleFile):
    """One .safetensors file as a lazy Mapping[str, Tensor]; only the header is read."""

    def _read_header(self) -> None:
        self.metadata, self._infos = read_header(self.source)


class ShardedSafetensors(_LazyWeights):
    """Shards listed by a HF-style index, as one lazy Mapping; shards open on first use."""

    @property
    def _names(self) -> dict:
        return self.weight_map

    def __init__(self, index):
        self.source = open_source(index)
        self.name = self.source.name
        size = self.source.size()
        if size > MAX_HEADER_BYTES:
            raise HeaderTooLarge(f"index is {size} bytes, over the limit of "
                                 f"{MAX_HEADER_BYTES}", file=self.name)
        with collector_paused():
            doc = parse_json(self.source.read(0, size), self.name, "index")
        if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
            raise InvalidHeader('index must be a JSON object with a "weight_map" object',
                                file=self.name)
        self.metadata = doc.get("metadata") or {}
        if not isinstance(self.metadata, dict):
            raise InvalidHeader('index "metadata" must be an object', file=self.name)
        plain = set()                   # shards lie beside the index; each name checked once
        for tensor, filename in doc["weight_map"].items():
            if type(filename) is not str or filename not in plain:
                plain.add(checked_name(filename, lambda message: InvalidHeader(
                    message, file=self.name, tensor=tensor), "shard file name"))
        self.weight_map: dict[str, str] = doc["weight_map"]
        self._shards: dict[str, SafetensorsFile] = {}

    @property
    def shard_names(self) -> list[str]:
        return list(dict.fromkeys(self.weight_map.values()))

    def shard(self, filename: str) -> SafetensorsFile:
        if filename not in self._shards:
            try:
                self._shards[filename] = SafetensorsFile(self.source.sibling(filename))
            except SourceNotFound as e:
                raise MissingShard(f"shard {filename!r} named in the index does not exist "
                                   f"(looked for {e.file})", file=self.name) from None
        return self._shards[filename]

    def add_shard(self, filename: str, shard: SafetensorsFile) -> None:
        """Use an already opened shard (e.g. prefetched over HTTP) for `filename`."""
        if filename not in self.weight_map.values():
            raise ValueError(f"{filename!r} is not a shard of {self.name}")
        self._shards[filename] = shard

    def _shard_of(self, name: str) -> SafetensorsFile:
        if name not in self.weight_map:
            raise MissingTensor("no such tensor in the index", file=self.name, tensor=name)
        shard = self.shard(self.weight_map[name])
        if name not in shard:
            raise MissingTensor(f"the index {self.name} puts this tensor in this shard, "
                                f"which lacks it", file=shard.name, tensor=name)
        return shard

    def info(self, name: str) -> TensorInfo:
        return self._shard_of(name).info(name)

    def __getitem__(self, name: str) -> Tensor:
        return self._shard_of(name)[name]

    def get_many(self, names: Iterable[str] | None = None) -> dict[str, Tensor]:
        """Several tensors (all by default): one coalesced read per shard."""
        names = list(self.weight_map if names is None else names)
        groups: dict[str, list[str]] = {}
        for name in names:
            self._shard_of(name)                 # fail before reading anything
            groups.setdefault(self.weight_map[name], []).append(name)
        found = {}
        for filename, members in groups.items():
            found.update(self.shard(filename).get_many(members))
        return {name: found[name] for name in names}

    def close(self) -> None:
        for shard in self._shards.values():
            shard.close()
        self.source.close()


def load_safetensors(location) -> SafetensorsFile | ShardedSafetensors:
    """Open lazily: an index (.json), a directory holding one, or a single file/URL."""
    if isinstance(location, ByteSource):
        return SafetensorsFile(location)
    location = os.fspath(location)
    path = urllib.parse.urlsplit(location).path if is_url(location) else location
    if path.endswith(".json"):
        return ShardedSafetensors(location)
    if not is_url(location) and os.path.isdir(location):
        for filename, kind in ((INDEX_NAME, ShardedSafetensors), (SINGLE_NAME, SafetensorsFile)):
            candidate = os.path.join(location, filename)
            if os.path.isfile(candidate):
                return kind(candidate)
        raise SourceNotFound(f"directory has neither {INDEX_NAME} nor {SINGLE_NAME}",
                             file=location)
    return SafetensorsFile(location)


# --- writer ----------------------------------------------------------------------

@dataclass(frozen=True)
class _Item:
    name: str
    dtype: dtypes.DType
    shape: tuple[int, ...]
    raw: np.ndarray      # 1-D little-endian storage


def _as_item(name, value) -> _Item:
    if not isinstance(name, str) or not name:
        raise ValueError(f"tensor names must be non-empty strings, got {name!r}")
    if name == "__metadata__":
        raise ValueError("'__metadata__' is reserved by the format and cannot name a tensor")
    if isinstance(value, Tensor):
        dtype, shape, raw = value.dtype, tuple(value.shape), value.raw_numpy()
    elif isinstance(value, (np.ndarray, np.generic)):
        raw = np.asarray(value)
        try:
            dtype = dtypes.from_numpy_dtype(raw.dtype.newbyteorder("="))
        except TypeError as e:
            raise TypeError(f"tensor {name!r}: {e}") from None
        shape = raw.shape
    else:
        raise TypeError(f"tensor {name!r}: expected an engine Tensor or a NumPy array, "
                        f"got {type(value).__name__}")
    raw = np.ascontiguousarray(raw, dtype=dtype.storage.newbyteorder("<")).reshape(-1)
    if raw.nbytes != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"tensor {name!r}: storage of {raw.nbytes} bytes does not match "
                         f"shape {shape} of {dtype.name}")
    return _Item(name, dtype, shape, raw)


def _atomic_write(path: str, chunks: Iterable) -> None:
    """Write beside the target, then rename: readers see the old file or the new one."""
    temporary = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        with open(temporary, "xb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _write_file(path: str, items: list[_Item], metadata: dict[str, str]) -> None:
    # largest itemsize first: with power-of-two sizes every offset stays aligned
    ordered = sorted(items, key=lambda it: (-it.dtype.itemsize, it.name))
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for it in ordered:
        header[it.name] = {"dtype": it.dtype.safetensors, "shape": list(it.shape),
                           "data_offsets": [offset, offset + it.raw.nbytes]}
        offset += it.raw.nbytes
    blob = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    blob += b" " * (-len(blob) % 8)    # the data buffer starts 8-byte aligned
    _atomic_write(path, [struct.pack("<Q", len(blob)), blob,
                         *(it.raw.view(np.uint8) for it in ordered)])


def save_safetensors(tensors: Mapping, path, metadata: dict[str, str] | None = None,
                     max_shard_bytes: int | None = None) -> str:
    """Write tensors (engine Tensors or NumPy arrays); return the file or index path.

    With `max_shard_bytes`, tensors fill shards greedily in mapping order (a tensor
    larger than the limit gets a shard of its own), written as
    `{stem}-00001-of-0000N.safetensors` beside `path`, plus `{stem}.safetensors.index.json`.
    """
    path = os.fspath(path)
    metadata = dict(metadata or {})
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"safetensors metadata must map str to str; "
                            f"got {key!r}: {value!r} ({type(value).__name__})")
    items = [_as_item(name, value) for name, value in tensors.items()]
    if max_shard_bytes is None:
        _write_file(path, items, metadata)
        return path
    if type(max_shard_bytes) is not int or max_shard_bytes <= 0:
        raise ValueError(f"max_shard_bytes must be a positive int, got {max_shard_bytes!r}")
    groups: list[list[_Item]] = [[]]
    used = 0
    for it in items:
        if groups[-1] and used + it.raw.nbytes > max_shard_bytes:
            groups.append([])
            used = 0
        groups[-1].append(it)
        used += it.raw.nbytes
    directory, base = os.path.split(path)
    stem = os.path.splitext(base)[0]                # "model.safetensors" -> "model"
    weight_map = {}
    for i, group in enumerate(groups, 1):
        filename = f"{stem}-{i:05d}-of-{len(groups):05d}.safetensors"
        _write_file(os.path.join(directory, filename), group, metadata)
        weight_map.update((it.name, filename) for it in group)
    total = sum(it.raw.nbytes for it in items)
    index = {"metadata": {**metadata, "total_size": total},
             "weight_map": dict(sorted(weight_map.items()))}
    index_path = os.path.join(directory, f"{stem}.safetensors.index.json")
    _atomic_write(index_path, [json.dumps(index, indent=2).encode("utf-8")])   # last
    return index_path
