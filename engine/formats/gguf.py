"""GGUF: a lazy reader (versions 2 and 3, little-endian).

Format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): magic "GGUF", u32
version, u64 tensor count, u64 metadata count; the metadata as (string key, u32 value
type, value); the tensor infos as (string name, u32 n_dims, u64 dims innermost first,
u32 GGML type, u64 offset); then, at the next multiple of `general.alignment` (default
32), the data section, which the offsets index. Strings are a u64 byte length and UTF-8
bytes; arrays a u32 element type, a u64 count and the elements (arrays may nest).

Opening reads the header only, in chunks that grow with it, and checks every count and
offset against the file size before trusting it; a tensor's bytes are read when it is
used. Plain types (f32, f16, bf16, integers) come back as engine Tensors, zero-copy over
a memory-mapped file; quantized types as `QuantizedTensor` (raw blocks + dequantize()).
"""
from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass

import numpy as np

from .. import dtypes
from .. import quants
from ..errors import InvalidHeader, InvalidOffsets, SourceNotFound, TruncatedFile, UnknownDtype
from ..quantized import QuantizedTensor
from ..tensor import Tensor
from .gguf_split import GGUFSplits, open_splits, split_count
from .safetensors import SingleFile, to_tensor
from .sources import ByteSource, BytesSource, is_url

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4                  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 8           # nested arrays deeper than this are refused
LONG_ARRAY = 256              # numeric arrays longer than this stay NumPy arrays
FIRST_CHUNK = 64 * 1024       # the header is read in chunks from this size, doubling
MAX_CHUNK = 16 * 1024 * 1024

# value type id -> (name, struct format or None); 8 string, 9 array
_SCALARS = {0: ("u8", "<B"), 1: ("i8", "<b"), 2: ("u16", "<H"), 3: ("i16", "<h"),
            4: ("u32", "<I"), 5: ("i32", "<i"), 6: ("f32", "<f"), 7: ("bool", "<B"),
            10: ("u64", "<Q"), 11: ("i64", "<q"), 12: ("f64", "<d")}
STRING, ARRAY, BOOL, UINT32 = 8, 9, 7, 4
# the fewest bytes one value of each type can take: bounds counts before any allocation
_MIN_BYTES = {t: struct.calcsize(fmt) for t, (_, fmt) in _SCALARS.items()} | {STRING: 8,
                                                                              ARRAY: 12}
_MIN_KV_BYTES = 8 + 4 + 1               # empty key, type, one-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims 0, type, offset


@dataclass(frozen=True)
class GGUFTensorInfo:
    name: str
    ggml_type: str               # "f32", "q4_0", ...
    shape: tuple[int, ...]       # torch order: the GGUF dims reversed
    offset: int                  # absolute byte offset in the file
    nbytes: int
    file: str

    @property
    def quantized(self) -> bool:
        return quants.BY_NAME[self.ggml_type].quantized

    @property
    def dtype(self) -> dtypes.DType:
        """The engine dtype of a plain type; float32, what it computes as, for a quantized one."""
        return quants.BY_NAME[self.ggml_type].dtype or dtypes.float32


def _fail(error, message: str, file: str, *, key: str | None = None,
          tensor: str | None = None):
    """An error naming the file and the tensor or metadata key (kept as `.key`)."""
    if key is not None:
        message = f"metadata key {key!r}: {message}"
    e = error(message, file=file, tensor=tensor)
    e.key = key
    return e


class _HeaderReader:
    """Reads the header front to back through a window over the source.

    `key` / `tensor` say what is being parsed, so every error can name it.
    """

    def __init__(self, source: ByteSource, header_bytes: int | None = None):
        self.source, self.file, self.size = source, source.name, source.size()
        # windows stop here: a source that holds only the header (prefetched) is not read past it
        self.limit = self.size if header_bytes is None else min(header_bytes, self.size)
        self.pos = 0
        self._window, self._start, self._chunk = memoryview(b""), 0, FIRST_CHUNK
        self.key: str | None = None
        self.tensor: str | None = None

    def fail(self, error, message: str):
        return _fail(error, message, self.file, key=self.key, tensor=self.tensor)

    @property
    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> memoryview:
        end = self.pos + n
        if end > self.size:
            raise self.fail(TruncatedFile, f"file truncated: {what} needs bytes "
                                           f"[{self.pos}, {end}) of a {self.size}-byte file")
        if end > self._start + len(self._window):
            if end > self.limit:
                raise self.fail(InvalidHeader, f"the header runs past its stated end: {what} needs "
                                               f"bytes [{self.pos}, {end}) but the header has {self.limit}")
            length = min(max(n, self._chunk), self.limit - self.pos)
            self._window, self._start = self.source.read(self.pos, length), self.pos
            self._chunk = min(self._chunk * 2, MAX_CHUNK)
        view = self._window[self.pos - self._start:end - self._start]
        self.pos = end
        return view

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def count(self, n: int, each: int, what: str) -> int:
        """Refuse a count of items that could not fit in the rest of the file."""
        if n * each > self.left:
            raise self.fail(TruncatedFile, f"{what} of {n} claims at least {n * each} bytes "
                                           f"but only {self.left} remain in the file")
        return n

    def string(self, what: str, *, text: bool = True):
        n = self.count(self.unpack("<Q", f"{what} length"), 1, f"{what} length")
        data = bytes(self.take(n, what))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            if text:
                raise self.fail(InvalidHeader, f"{what} is not valid UTF-8: {e}") from None
            return data          # a value that is not text (some vocabularies): keep bytes

    def value(self, vtype: int, depth: int = 0):
        if vtype in _SCALARS:
            name, fmt = _SCALARS[vtype]
            v = self.unpack(fmt, f"{name} value")
            if vtype == BOOL:
                if v > 1:
                    raise self.fail(InvalidHeader, f"bool value must be 0 or 1, got {v}")
                return bool(v)
            return v
        if vtype == STRING:
            return self.string("string value", text=False)
        if vtype == ARRAY:
            return self.array(depth + 1)
        raise self.fail(InvalidHeader, f"unknown value type {vtype}")

    def array(self, depth: int):
        if depth > MAX_ARRAY_DEPTH:
            raise self.fail(InvalidHeader, f"arrays nest deeper than {MAX_ARRAY_DEPTH} levels")
        etype = self.unpack("<I", "array element type")
        if etype not in _MIN_BYTES:
            raise self.fail(InvalidHeader, f"unknown array element type {etype}")
        n = self.count(self.unpack("<Q", "array length"), _MIN_BYTES[etype], "array length")
        if etype in (STRING, ARRAY):
            return [self.value(etype, depth) for _ in range(n)]
        name, fmt = _SCALARS[etype]
        items = np.frombuffer(self.take(n * _MIN_BYTES[etype], f"{name} array"), fmt)
        if etype == BOOL:
            if (items > 1).any():
                raise self.fail(InvalidHeader, "bool array holds values other than 0 and 1")
            items = items.astype(bool)
        return items.astype(items.dtype.newbyteorder("=")) if n > LONG_ARRAY else items.tolist()


def _tensor_info(r: _HeaderReader, names: set) -> tuple[str, quants.GGMLType, tuple, int]:
    r.tensor = name = r.string("tensor name")
    if name in names:
        raise r.fail(InvalidHeader, "duplicate tensor name")
    n_dims = r.unpack("<I", "n_dims")
    if n_dims > MAX_DIMS:
        raise r.fail(InvalidHeader, f"{n_dims} dimensions; GGML allows at most {MAX_DIMS}")
    dims = struct.unpack(f"<{n_dims}Q", r.take(8 * n_dims, "dims"))    # ne0 first
    type_id = r.unpack("<I", "tensor type")
    if type_id not in quants.TYPES:
        raise r.fail(UnknownDtype, f"unknown GGML type id {type_id}")
    kind = quants.TYPES[type_id]
    row = dims[0] if dims else 1
    if row % kind.block_size:
        raise r.fail(InvalidHeader, f"row length {row} (dims {list(dims)}) is not a multiple "
                                    f"of the {kind.name} block size {kind.block_size}")
    offset = r.unpack("<Q", "tensor offset")
    return name, kind, tuple(reversed(dims)), offset


def read_header(source: ByteSource, header_bytes: int | None = None):
    """Parse and validate a GGUF header: (version, metadata, {name: GGUFTensorInfo},
    alignment, data section offset).

    `header_bytes`: the header lies in the first that many bytes (a site's manifest says how
    many, so they come in one request); the parser reads nothing past them."""
    r = _HeaderReader(source, header_bytes)
    file = r.file
    magic = bytes(r.take(4, "magic"))
    if magic != MAGIC:
        raise _fail(InvalidHeader, f"not a GGUF file: magic {magic!r}, expected {MAGIC!r}",
                    file)
    version = r.unpack("<I", "version")
    if version not in VERSIONS:
        hint = " (a big-endian file?)" if version >= 1 << 16 else ""
        raise _fail(InvalidHeader, f"unsupported GGUF version {version}{hint}; supported: "
                                   f"{', '.join(map(str, VERSIONS))}", file)
    n_tensors = r.unpack("<Q", "tensor count")
    n_kv = r.unpack("<Q", "metadata count")
    if n_tensors * _MIN_TENSOR_INFO_BYTES + n_kv * _MIN_KV_BYTES > r.left:
        raise _fail(TruncatedFile, f"{n_tensors} tensors and {n_kv} metadata entries cannot "
                                   f"fit in the {r.size}-byte file (truncated or corrupt)", file)
    metadata, alignment = {}, DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        r.key = None
        r.key = key = r.string("metadata key")
        if key in metadata:
            raise r.fail(InvalidHeader, "duplicate key")
        vtype = r.unpack("<I", "value type")
        metadata[key] = r.value(vtype)
        if key == "general.alignment":
            alignment = metadata[key]
            if vtype != UINT32 or alignment == 0 or alignment & (alignment - 1):
                raise r.fail(InvalidHeader, f"alignment must be a u32 power of two, got "
                                            f"{alignment!r} of value type {vtype}")
    r.key = None
    entries, names = [], set()
    for _ in range(n_tensors):
        r.tensor = None
        entries.append(_tensor_info(r, names))
        names.add(entries[-1][0])
    data_start = -(-r.pos // alignment) * alignment
    infos = {}
    for name, kind, shape, offset in entries:
        if offset % alignment:
            raise _fail(InvalidOffsets, f"offset {offset} is not a multiple of the alignment "
                                        f"{alignment}", file, tensor=name)
        nbytes = kind.row_bytes(shape[-1] if shape else 1) * math.prod(shape[:-1])
        infos[name] = GGUFTensorInfo(name, kind.name, shape, data_start + offset, nbytes, file)
    _check_layout(infos, data_start, r.size, file)
    return version, metadata, infos, alignment, data_start


def _check_layout(infos: dict, data_start: int, size: int, file: str) -> None:
    """Tensors lie inside the data section and do not overlap (padding between is fine)."""
    covered, owner = data_start, None
    for info in sorted(infos.values(), key=lambda i: (i.offset, i.nbytes)):
        begin, end = info.offset, info.offset + info.nbytes
        if begin > size:
            raise _fail(InvalidOffsets, f"offset {begin - data_start} lies past the end of the "
                                        f"file (data section of {max(size - data_start, 0)} "
                                        f"bytes): a corrupt offset or a truncated file",
                        file, tensor=info.name)
        if end > size:
            raise _fail(TruncatedFile, f"file truncated: the tensor needs bytes [{begin}, "
                                       f"{end}) of a {size}-byte file", file, tensor=info.name)
        if begin < covered and info.nbytes:
            raise _fail(InvalidOffsets, f"bytes [{begin}, {end}) overlap tensor {owner!r} "
                                        f"(bytes up to {covered})", file, tensor=info.name)
        if info.nbytes:
            covered, owner = end, info.name


class GGUFFile(SingleFile):
    """One .gguf file as a lazy Mapping[str, Tensor | QuantizedTensor].

    `metadata` maps each GGUF key to a Python value (arrays as lists; numeric arrays of
    more than LONG_ARRAY items as NumPy arrays; strings that are not UTF-8 as bytes).
    """

    def __init__(self, source, *, header_bytes: int | None = None):
        self._header_bytes = header_bytes
        super().__init__(source)

    def _read_header(self) -> None:
        (self.version, self.metadata, self._infos, self.alignment,
         self.data_offset) = read_header(self.source, self._header_bytes)

    def _wrap(self, info: GGUFTensorInfo, buffer) -> Tensor | QuantizedTensor:
        if not info.quantized:
            return to_tensor(info, buffer)
        return QuantizedTensor.from_raw(np.frombuffer(buffer, np.uint8), info.ggml_type, info.shape,
                                        name=info.name, file=info.file)


def load_gguf(location) -> GGUFFile | GGUFSplits:
    """Open a GGUF lazily: a path, an http(s) URL, a bytes-like object or a ByteSource. The first
    file of a split GGUF (`name-00001-of-00003.gguf`) opens the whole model, its other files
    found beside it (engine.formats.gguf_split). (A site's model folder, whose GGUF may be served
    in byte parts, is opened by engine.site.load_gguf.)"""
    if isinstance(location, (bytes, bytearray, memoryview, np.ndarray)):
        location = BytesSource(location)
    elif isinstance(location, (str, os.PathLike)) and not is_url(location) and os.path.isdir(location):
        raise SourceNotFound("a folder, not a GGUF file: engine.site.load_gguf opens a site's model folder",
                             file=os.fspath(location))
    file = GGUFFile(location)
    if split_count(file.metadata) == 1:
        return file
    try:
        return open_splits(file, lambda name: GGUFFile(file.source.sibling(name)))
    except BaseException:
        file.close()
        raise
