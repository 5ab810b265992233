"""safetensors headers: parse and validate one against its file, as {name: TensorInfo}.

Every check is written once, entry by entry (`_parse_entry`, `_check_layout`), and words each
error. A header of many tensors first meets the same checks a column at a time (`_columns`): each
distinct dtype and shape once, the offsets and the tiling of the data buffer in NumPy. Only when
that finds nothing wrong is its answer used; anything it does not vouch for goes through the
entry-by-entry checks, which then find and word the error, or accept what the column check was too
strict for. docs/robustness.md says what a header of 100,000 empty tensors costs.
"""
from __future__ import annotations

import contextlib
import gc
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

import numpy as np

from .. import dtypes
from ..errors import (HeaderTooLarge, InvalidHeader, InvalidOffsets, SizeMismatch, TruncatedFile,
                      UnknownDtype)
from ..untrusted import INT64_MAX, MAX_DIMS, checked_shape, load_json, shown
from .sources import ByteSource

MAX_HEADER_BYTES = 100_000_000        # the limit the reference implementation enforces


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: dtypes.DType
    shape: tuple[int, ...]
    offset: int          # absolute byte offset in the file
    nbytes: int
    file: str


def parse_json(data, file: str, what: str):
    """A header or index: JSON as engine.untrusted.load_json bounds it, keys unique."""
    return load_json(data, lambda message: InvalidHeader(message, file=file), what=what, unique_keys=True)


def _is_index_list(value, length: int | None = None) -> bool:
    """A list of non-negative ints (JSON true/false are not dims)."""
    return (isinstance(value, list) and (length is None or len(value) == length)
            and all(type(v) is int and v >= 0 for v in value))


def _parse_entry(name: str, entry, file: str):
    if not isinstance(entry, dict):
        raise InvalidHeader("header entry is not a JSON object", file=file, tensor=name)
    missing = sorted({"dtype", "shape", "data_offsets"} - entry.keys())
    if missing:
        raise InvalidHeader(f"header entry lacks {', '.join(missing)}", file=file, tensor=name)
    code, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(code, str):
        raise InvalidHeader(f"dtype must be a string, got {shown(code)}", file=file, tensor=name)
    if code not in dtypes.BY_SAFETENSORS:
        raise UnknownDtype(f"unsupported dtype {shown(code)}; supported: "
                           f"{', '.join(dtypes.BY_SAFETENSORS)}", file=file, tensor=name)
    shape = checked_shape(shape, lambda message: InvalidHeader(message, file=file, tensor=name))
    if not _is_index_list(offsets, 2):
        raise InvalidHeader(f"data_offsets must be two non-negative ints, got {shown(offsets)}",
                            file=file, tensor=name)
    dtype, (begin, end) = dtypes.BY_SAFETENSORS[code], offsets
    if begin > end:
        raise InvalidOffsets(f"data_offsets [{begin}, {end}] end before they begin",
                             file=file, tensor=name)
    nbytes = math.prod(shape) * dtype.itemsize
    if end - begin != nbytes:
        raise SizeMismatch(f"data_offsets [{begin}, {end}] hold {end - begin} bytes but shape "
                           f"{list(shape)} of {code} needs {nbytes}", file=file, tensor=name)
    return dtype, shape, begin, end


def _check_layout(spans: list[tuple[int, int, str]], data_len: int, file: str) -> None:
    """The tensors must tile the data buffer exactly: no overlap, no hole, no tail."""
    spans = sorted(spans)
    covered, owner = 0, None
    for begin, end, name in spans:
        if begin < covered:
            raise InvalidOffsets(f"data_offsets [{begin}, {end}] overlap tensor {owner!r} "
                                 f"(bytes up to {covered})", file=file, tensor=name)
        if begin > covered:
            if begin > data_len:
                raise InvalidOffsets(f"data_offsets [{begin}, {end}] lie outside the "
                                     f"{data_len}-byte data buffer", file=file, tensor=name)
            raise InvalidOffsets(f"bytes [{covered}, {begin}) of the data buffer belong to no "
                                 f"tensor (holes are not allowed)", file=file, tensor=name)
        if end > begin:
            covered, owner = end, name
    if covered > data_len:
        # a consistent header over too little data: the file was cut short
        begin, end, name = next(s for s in spans if s[1] > data_len)
        raise TruncatedFile(f"file truncated: the data buffer has {data_len} bytes but this "
                            f"tensor needs bytes [{begin}, {end})", file=file, tensor=name)
    if covered < data_len:
        raise InvalidOffsets(f"the last {data_len - covered} bytes of the data buffer belong "
                             f"to no tensor", file=file)


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while a header's objects are made and dropped.

    A header of 100,000 entries parses into about 400,000 dicts and lists, none in a cycle; with
    the collector on, its passes over them (and over every other live object) cost as much as the
    parsing. They are freed by reference counting before it is back on. Only the caller that paused
    it turns it on again (it may have been off already, or paused by another thread)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


class _Unusual(Exception):
    """A header the column check does not vouch for: the entry-by-entry checks decide."""


class TensorInfos(Mapping):
    """{name: TensorInfo} kept as columns; each TensorInfo is made on its first lookup, so opening a
    header of 100,000 tensors leaves a name index and four lists, not 100,000 objects."""

    def __init__(self, names, kinds: list, shapes: list, offsets: list, sizes: list, file: str):
        self._row = dict(zip(names, range(len(kinds))))     # str -> int: untracked by the collector
        self._kinds, self._shapes, self._offsets, self._sizes = kinds, shapes, offsets, sizes
        self._file, self._made = file, {}

    def __getitem__(self, name: str) -> TensorInfo:
        info = self._made.get(name)
        if info is None:
            row = self._row[name]
            info = self._made[name] = TensorInfo(name, self._kinds[row], self._shapes[row],
                                                 self._offsets[row], self._sizes[row], self._file)
        return info

    def __contains__(self, name) -> bool:
        return name in self._row

    def __iter__(self):
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)


def _columns(header: dict, start: int, data_len: int, file: str) -> TensorInfos:
    """The infos of a header whose entries all pass `_parse_entry`, checked a column at a time
    (`_Unusual` for one that might not); `_check_layout`'s error where they do not tile the data."""
    entries = list(header.values())
    if not entries or set(map(type, entries)) != {dict}:
        raise _Unusual
    try:
        codes, shapes, offsets = zip(*map(itemgetter("dtype", "shape", "data_offsets"), entries))
    except KeyError:
        raise _Unusual from None
    if (set(map(type, codes)) != {str} or not set(codes) <= dtypes.BY_SAFETENSORS.keys()
            or set(map(type, shapes)) != {list} or set(map(type, offsets)) != {list}
            or set(map(len, offsets)) != {2}):
        raise _Unusual
    flat = list(chain.from_iterable(offsets))
    # before any set of shapes: True and 1.0 hash and compare equal to 1
    if not set(map(type, chain.from_iterable(shapes))) <= {int} or set(map(type, flat)) != {int}:
        raise _Unusual
    numel = {}                                  # each distinct shape once: checked_shape's checks
    for shape in set(map(tuple, shapes)):
        if len(shape) > MAX_DIMS or shape and (min(shape) < 0 or max(shape) > INT64_MAX):
            raise _Unusual
        numel[shape] = math.prod(shape)
    itemsize = {code: dtypes.BY_SAFETENSORS[code].itemsize for code in set(codes)}
    # checked_shape's limit on elements, and no int64 overflow in NumPy below
    if (min(flat) < 0 or max(flat) > INT64_MAX
            or max(numel.values()) * max(itemsize.values()) > INT64_MAX):
        raise _Unusual
    spans = np.array(flat, dtype=np.int64).reshape(-1, 2)
    shapes = list(map(dict(zip(numel, numel)).__getitem__, map(tuple, shapes)))   # one tuple each
    sizes = (np.array(list(map(numel.__getitem__, shapes)), dtype=np.int64)
             * np.array(list(map(itemsize.__getitem__, codes)), dtype=np.int64))
    if not np.array_equal(spans[:, 1] - spans[:, 0], sizes):
        raise _Unusual
    # _check_layout's walk, whole arrays at once: in (begin, end) order each tensor begins where the
    # last non-empty one before it ended (0 for the first), and the last one ends the data buffer
    order = np.lexsort((spans[:, 1], spans[:, 0]))
    begin, end = spans[order, 0], spans[order, 1]
    covered = np.maximum.accumulate(np.where(end > begin, end, 0))
    if begin[0] != 0 or covered[-1] != data_len or not np.array_equal(begin[1:], covered[:-1]):
        # every entry is well formed, the tiling is not: the walk finds and words its first fault
        _check_layout(list(zip(spans[:, 0].tolist(), spans[:, 1].tolist(), header)), data_len, file)
    kinds = list(map(dtypes.BY_SAFETENSORS.__getitem__, codes))
    return TensorInfos(header, kinds, shapes, (spans[:, 0] + start).tolist(), sizes.tolist(), file)


def _infos(header, start: int, data_len: int, file: str) -> tuple[dict[str, str], Mapping[str, TensorInfo]]:
    if not isinstance(header, dict):
        raise InvalidHeader("header is not a JSON object", file=file)
    metadata = header.pop("__metadata__", {})
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise InvalidHeader("__metadata__ must map strings to strings", file=file)
    try:
        return metadata, _columns(header, start, data_len, file)
    except _Unusual:
        pass
    infos, spans = {}, []
    for name, entry in header.items():
        dtype, shape, begin, end = _parse_entry(name, entry, file)
        infos[name] = TensorInfo(name, dtype, shape, start + begin, end - begin, file)
        spans.append((begin, end, name))
    _check_layout(spans, data_len, file)
    return metadata, infos


def read_header(source: ByteSource) -> tuple[dict[str, str], Mapping[str, TensorInfo]]:
    """Parse and validate a safetensors header: (metadata, {name: TensorInfo})."""
    file, size = source.name, source.size()
    if size < 8:
        raise TruncatedFile(f"file truncated: {size} bytes, too short for the 8-byte header length",
                            file=file)
    (length,) = struct.unpack("<Q", source.read(0, 8))
    if length > MAX_HEADER_BYTES:      # before allocating: the length may be garbage
        raise HeaderTooLarge(f"header length {length} exceeds the limit of "
                             f"{MAX_HEADER_BYTES} bytes", file=file)
    if 8 + length > size:
        raise TruncatedFile(f"file truncated: header length {length} runs past the end of the "
                            f"{size}-byte file", file=file)
    with collector_paused():           # the parsed header is dropped when _infos returns
        return _infos(parse_json(source.read(8, length), file, "header"), 8 + length, size - 8 - length,
                      file)
