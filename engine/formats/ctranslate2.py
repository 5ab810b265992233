"""CTranslate2 `model.bin`: a lazy reader (no ctranslate2 needed).

Format, as CTranslate2 writes it (python/ctranslate2/specs/model_spec.py, `_serialize`) and reads it
(src/models/model.cc, `Model::load`); every integer little-endian, no padding anywhere:

    uint32  binary version                      1 to 6 (CTranslate2 refuses newer ones)
    string  model spec name ("WhisperSpec")     version >= 2
    uint32  spec revision                       version >= 2 (1 before)
    uint32  variable count
    per variable:
        string  name                            "encoder/conv1/weight"
        uint8   rank                            0 for a scalar (an option such as num_heads)
        uint32  dims[rank]
        version >= 4:  uint8 dtype id, uint32 byte count
        version < 4:   uint8 item size (4 float32, 2 int16, 1 int8), uint32 element count
        bytes   the data, row-major
    uint32  alias count                         version >= 3
    per alias: string alias, string target      (e.g. a tied output projection -> the embedding)

A string is a uint16 length that counts a final NUL, then that many bytes. Dtype ids are
CTranslate2's DataType enum: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16. Versions
5 and 6 changed only what the variables mean (rounding before int8 quantization; options moved to a
config.json beside the file), not the layout, so one reader serves 1 to 6.

The header is interleaved with the data: opening walks the file once, reading only the small
fields (a window at a time) and checking every count and size against the bytes that remain before
using it. Tensors are read on access, as zero-copy views of the source where it allows.
"""
from __future__ import annotations

import dataclasses
import math
import os
import struct

from .. import dtypes
from ..errors import InvalidHeader, SizeMismatch, TruncatedFile, UnknownDtype
from ..untrusted import shown
from .safetensors import SingleFile, TensorInfo
from .sources import ByteSource, BytesSource

NEWEST_VERSION = 6
MAX_RANK = 8                       # real files stop at 3 (conv weights); CTranslate2's own limit is 255
DTYPES = (dtypes.float32, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.float16, dtypes.bfloat16)
BY_ITEM_SIZE = {4: dtypes.float32, 2: dtypes.int16, 1: dtypes.int8}     # versions 1 to 3
_WINDOW = 64 * 1024                # header fields are read this many bytes at a time


class _Cursor:
    """Sequential little-endian reads over a ByteSource, through a window so that walking the
    small fields between tensors costs one read per window, not one per field."""

    def __init__(self, source: ByteSource):
        self.source, self.file = source, source.name
        self.size = source.size()
        self.pos = 0
        self._start, self._window = 0, memoryview(b"")

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def take(self, length: int, what: str, tensor: str | None = None) -> memoryview:
        if length > self.remaining:
            raise TruncatedFile(f"file truncated: {what} needs {length} bytes at offset {self.pos} "
                                f"but only {self.remaining} remain", file=self.file, tensor=tensor)
        start = self.pos - self._start
        if start < 0 or start + length > len(self._window):
            self._start = self.pos
            self._window = self.source.read(self.pos, min(max(length, _WINDOW), self.remaining))
            start = 0
        self.pos += length
        return self._window[start:start + length]

    def skip(self, length: int) -> None:
        self.pos += length

    def integer(self, fmt: str, what: str, tensor: str | None = None) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what, tensor))[0]

    def string(self, what: str, tensor: str | None = None) -> str:
        length = self.integer("H", f"the length of {what}", tensor)
        if length == 0:
            raise InvalidHeader(f"{what} has length 0 (a string counts its final NUL)",
                                file=self.file, tensor=tensor)
        raw = bytes(self.take(length, what, tensor))
        if raw[-1] != 0 or 0 in raw[:-1]:
            raise InvalidHeader(f"{what} {shown(raw)} is not one NUL-terminated string",
                                file=self.file, tensor=tensor)
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidHeader(f"{what} {shown(raw[:-1])} is not UTF-8", file=self.file, tensor=tensor) from None


def _variable(cursor: _Cursor, version: int, index: int) -> TensorInfo:
    file = cursor.file
    name = cursor.string(f"the name of variable {index}")
    if not name:
        raise InvalidHeader(f"variable {index} has an empty name", file=file)
    rank = cursor.integer("B", "the rank", name)
    if rank > MAX_RANK:
        raise InvalidHeader(f"rank {rank} is more than {MAX_RANK}", file=file, tensor=name)
    shape = tuple(struct.unpack(f"<{rank}I", cursor.take(4 * rank, "the dimensions", name)))
    code = cursor.integer("B", "the dtype", name)
    count = cursor.integer("I", "the byte count", name)
    if version >= 4:
        if code >= len(DTYPES):
            raise UnknownDtype(f"unknown dtype id {code}; known: "
                               + ", ".join(f"{i} {d.name}" for i, d in enumerate(DTYPES)), file=file, tensor=name)
        dtype, nbytes = DTYPES[code], count
    else:
        if code not in BY_ITEM_SIZE:
            raise UnknownDtype(f"unknown item size {code}; known: 4 (float32), 2 (int16), 1 (int8)",
                               file=file, tensor=name)
        dtype, nbytes = BY_ITEM_SIZE[code], count * code
    needed = math.prod(shape) * dtype.itemsize          # dims are uint32: at most 2**256, no overflow
    if nbytes != needed:
        raise SizeMismatch(f"holds {nbytes} bytes but shape {list(shape)} of {dtype.name} needs {needed}",
                           file=file, tensor=name)
    if nbytes > cursor.remaining:
        raise TruncatedFile(f"file truncated: the data needs {nbytes} bytes at offset {cursor.pos} but only "
                            f"{cursor.remaining} remain", file=file, tensor=name)
    info = TensorInfo(name, dtype, shape, cursor.pos, nbytes, file)
    cursor.skip(nbytes)
    return info


def read_header(source: ByteSource) -> tuple[dict[str, str], dict[str, TensorInfo], dict[str, str]]:
    """Walk a model.bin: (metadata, {name: TensorInfo} with aliases included, {alias: target})."""
    cursor = _Cursor(source)
    file = cursor.file
    version = cursor.integer("I", "the binary version")
    if not 1 <= version <= NEWEST_VERSION:
        raise InvalidHeader(f"binary version {version} is not a CTranslate2 model.bin version "
                            f"this reader knows (1 to {NEWEST_VERSION})", file=file)
    spec, revision = "", 1
    if version >= 2:
        spec = cursor.string("the model spec name")
        revision = cursor.integer("I", "the spec revision")
    count = cursor.integer("I", "the variable count")
    smallest = 2 + 2 + 1 + 1 + 4                # a one-byte name, rank 0, dtype, size
    if count * smallest > cursor.remaining:
        raise TruncatedFile(f"file truncated: {count} variables need at least {count * smallest} bytes "
                            f"but only {cursor.remaining} remain", file=file)
    infos: dict[str, TensorInfo] = {}
    for index in range(count):
        info = _variable(cursor, version, index)
        if info.name in infos:
            raise InvalidHeader("two variables have this name", file=file, tensor=info.name)
        infos[info.name] = info
    aliases: dict[str, str] = {}
    if version >= 3:
        count = cursor.integer("I", "the alias count")
        if count * 8 > cursor.remaining:        # two strings of one byte at least
            raise TruncatedFile(f"file truncated: {count} aliases need at least {count * 8} bytes "
                                f"but only {cursor.remaining} remain", file=file)
        for index in range(count):
            alias = cursor.string(f"alias {index}")
            target = cursor.string("the target", alias)
            if not alias or alias in infos:
                raise InvalidHeader("an alias is empty or repeats a name already defined", file=file, tensor=alias)
            if target not in infos:     # CTranslate2 resolves an alias against what is defined so far
                raise InvalidHeader(f"alias of {shown(target)}, which is not defined before it",
                                    file=file, tensor=alias)
            aliases[alias] = target
            infos[alias] = dataclasses.replace(infos[target], name=alias)
    if cursor.remaining:
        raise InvalidHeader(f"{cursor.remaining} bytes follow the last "
                            f"{'alias' if version >= 3 else 'variable'} (the file ends there)", file=file)
    metadata = {"format": "ctranslate2", "binary_version": str(version), "spec": spec,
                "spec_revision": str(revision)}
    return metadata, infos, aliases


class CTranslate2File(SingleFile):
    """A model.bin as a lazy Mapping[str, Tensor] (aliases included, as views of their target's
    bytes); `metadata` holds the format version, the spec name and revision; `aliases` maps each
    alias to its target."""

    def _read_header(self) -> None:
        self.metadata, self._infos, self.aliases = read_header(self.source)


def load_ctranslate2(source, name: str | None = None) -> CTranslate2File:
    """Open a CTranslate2 model.bin lazily: a path, an http(s) URL, a ByteSource, or a bytes-like
    object (`name` labels it in error messages)."""
    if isinstance(source, (bytes, bytearray, memoryview)) or hasattr(source, "__array_interface__"):
        source = BytesSource(source, name=name or "<bytes>")
    elif isinstance(source, os.PathLike):
        source = os.fspath(source)
    return CTranslate2File(source)


def looks_like_ctranslate2(head: bytes) -> bool:
    """Whether the first bytes of a file look like a model.bin (a known version, then for
    version >= 2 a NUL-terminated spec name): how the build tells it from a PyTorch *.bin."""
    if len(head) < 4:
        return False
    version = int.from_bytes(head[:4], "little")
    if version == 1:                            # no spec name to check
        return True
    if not 2 <= version <= NEWEST_VERSION or len(head) < 6:
        return False
    length = int.from_bytes(head[4:6], "little")
    return 0 < length <= len(head) - 6 and head[6 + length - 1] == 0 and 0 not in head[6:6 + length - 1]
