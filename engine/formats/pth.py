"""PyTorch checkpoints (.pth/.pt) read as plain tensor state dicts, without running pickle code.

A checkpoint is a pickle whose tensors point, through persistent ids, at raw storages
kept beside it. Two layouts exist:

- zip (torch >= 1.6): one top folder holding `data.pkl`, `data/<key>` (raw storage
  bytes), `byteorder` ("little" or "big") and `version`. Persistent ids are
  `('storage', storage_type, key, location, numel)`.
- legacy (torch < 1.6): consecutive pickles in one file: the magic number, the protocol
  version (1001), a sys_info dict, the object, the list of storage keys; then per key,
  in that order, an 8-byte little-endian element count and the elements. Persistent ids
  are `('storage', storage_type, root_key, location, numel, view_metadata)`.

Unpickling goes through engine.formats.pickled, whose unpickler hands out harmless stand-ins for
the few globals a state dict needs and refuses every other one before it can run; for a whole
module saved by torch.save (`read_module_checkpoint`, ultralytics' .pt files) every other class
becomes an inert record. The stand-ins only record descriptors (storage, offset, size, stride);
arrays are cut from the storage bytes afterwards, bounds-checked, as contiguous copies.

`load_pth` reads both: a state dict by its names, a module checkpoint by module path, from a
path, bytes or an http(s) URL (fetched whole through engine.formats.sources.open_source).
"""
from __future__ import annotations

import io
import math
import os
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from .. import dtypes
from ..errors import (
    FetchError,
    InvalidHeader,
    InvalidOffsets,
    SizeMismatch,
    SourceNotFound,
    TruncatedFile,
    UnsafePickle,
)
from ..tensor import Tensor, from_raw
from ..untrusted import INT64_MAX, checked_shape, shown
from .module_tree import ModuleRecord, model_of, module_tree
from .pickled import ModuleUnpickler, StorageRef, TensorRef, Unpickler, unpickle
from .sources import is_url, open_source

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
MAX_PICKLE_BYTES = 64 << 20     # data.pkl of a checkpoint is kilobytes (~150 bytes a tensor)
# What zipfile raises on a damaged or unusual archive: it has no error type of its own for most
# of it (a bad version is NotImplementedError, a damaged deflate stream zlib.error, a bad
# header struct.error or ValueError...).
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
               struct.error, NotImplementedError, RuntimeError, KeyError, IndexError, OverflowError)


def _state_dict(obj, file: str) -> dict:
    """The {name: tensor} dict: the object itself, or its 'state_dict'/'model' entry."""
    if isinstance(obj, dict) and not all(isinstance(v, TensorRef) for v in dict.values(obj)):
        for key in ("state_dict", "model"):
            if isinstance(dict.get(obj, key), dict):
                obj = dict.get(obj, key)
                break
    if not isinstance(obj, dict):
        raise InvalidHeader(f"checkpoint holds a {type(obj).__name__}, not a dict of tensors",
                            file=file)
    for name, value in dict.items(obj):
        if not isinstance(name, str):
            raise InvalidHeader(f"tensor names must be strings, got {shown(name)}", file=file)
        if not isinstance(value, TensorRef):
            raise InvalidHeader(f"value is a {type(value).__name__}, not a tensor (only plain "
                                f"tensor state dicts are read)", file=file, tensor=name)
    return obj


def _materialize(name: str, ref: TensorRef, buffer, order: str, file: str):
    """(contiguous native array, DType, shape) for `ref`, cut from its root storage's bytes."""
    storage, offset, size, stride = ref
    if not isinstance(storage, StorageRef):
        raise InvalidHeader(f"tensor storage is a {type(storage).__name__}, not a storage",
                            file=file, tensor=name)

    def malformed(message):
        return InvalidHeader(f"malformed layout: {message}", file=file, tensor=name)
    if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride)
            and type(offset) is int and 0 <= offset <= INT64_MAX):
        raise malformed(f"offset {shown(offset)}, size {shown(size)}, stride {shown(stride)}")
    size, stride = checked_shape(size, malformed, "size"), checked_shape(stride, malformed, "stride")
    # a dimension of one element never steps: its stride, whatever it says, is not used
    stride = tuple(s if n > 1 else 0 for n, s in zip(size, stride))
    dtype = storage.dtype
    if math.prod(size) == 0:
        return np.empty(size, dtype.storage), dtype, size
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= storage.numel:
        raise InvalidOffsets(f"offset {offset}, size {list(size)}, stride {list(stride)} reach "
                             f"element {last} of a storage of {storage.numel} elements",
                             file=file, tensor=name)
    item = dtype.itemsize
    if math.prod(size) > max(storage.numel, 1) * 64:
        # stride-0 (broadcast) views are legal, but a tiny storage claiming a huge tensor is
        # how a hostile file would make the contiguous copy exhaust memory
        raise InvalidOffsets(f"size {list(size)} is {math.prod(size)} elements over a storage of "
                             f"{storage.numel}: refusing to expand it", file=file, tensor=name)
    view = np.ndarray(size, dtype.storage.newbyteorder(order), buffer=buffer,
                      offset=(storage.base + offset) * item, strides=[s * item for s in stride])
    if dtype is dtypes.bool_:            # any nonzero byte is True, as in torch
        return np.asarray(view.view(np.uint8) != 0), dtype, size
    # a copy: contiguous, aligned, native byte order, and not pinning the file's bytes
    return np.array(view, dtype=dtype.storage, order="C"), dtype, size


def _build(state: dict, fetch, order: str, file: str, budget: int) -> OrderedDict:
    """Materialize every tensor, one root storage at a time, in the dict's order. One TensorRef
    (a pickle's memo shares it) gives one array; all of them together may hold at most `budget`
    bytes: overlapping views are legal, but a hostile file could name one storage a million times."""
    groups: dict[str, list[str]] = {}
    for name, ref in dict.items(state):
        key = ref.storage.key if isinstance(ref.storage, StorageRef) else None
        groups.setdefault(key, []).append(name)
    arrays, made, total = {}, {}, 0
    for key, names in groups.items():
        buffer = fetch(key, names[0]) if key is not None else None
        for name in names:
            ref = state[name]
            if id(ref) not in made:
                made[id(ref)] = _materialize(name, ref, buffer, order, file)
                total += made[id(ref)][0].nbytes
                if total > budget:
                    raise InvalidOffsets(f"the tensors up to this one hold over {budget} bytes, more than "
                                         f"the file can back (views of one storage named again and again)",
                                         file=file, tensor=name)
            arrays[name] = made[id(ref)]
        del buffer                       # one storage's bytes in memory at a time
    return OrderedDict((name, arrays[name]) for name in dict.keys(state))


def _read_entry(archive: zipfile.ZipFile, entry: str, limit: int, file: str, tensor=None) -> bytes:
    """At most `limit` bytes of a zip entry, inflated no further than that: an entry's sizes are
    claims (a kilobyte of deflate stream can inflate to a gigabyte). torch writes entries stored;
    deflated ones (an archive zipped again) are read too, nothing else, and nothing encrypted."""
    info = archive.getinfo(entry)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InvalidHeader(f"zip entry {shown(entry)} uses compression method {info.compress_type}; only "
                            f"stored and deflated entries are read", file=file, tensor=tensor)
    if info.flag_bits & 0x41:          # bit 0: encrypted, bit 6: strong encryption
        raise InvalidHeader(f"zip entry {shown(entry)} is encrypted", file=file, tensor=tensor)
    try:
        with archive.open(info) as stream:
            return stream.read(limit)
    except _ZIP_ERRORS as e:
        raise TruncatedFile(f"cannot read zip entry {shown(entry)}: {type(e).__name__}: {e}", file=file,
                            tensor=tensor) from None


def _zip_pickle(file_object, file: str) -> tuple[zipfile.ZipFile, str, bytes]:
    """(archive, entry prefix "<name>/", data.pkl's bytes) of a torch zip checkpoint: one top-level
    data.pkl, read within MAX_PICKLE_BYTES (read_pth_arrays and read_pth_header both start here)."""
    try:
        archive = zipfile.ZipFile(file_object)
    except _ZIP_ERRORS as e:
        raise TruncatedFile(f"zip archive is truncated or corrupt: {type(e).__name__}: {e}", file=file) from None
    pickles = sorted(n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1)
    if len(pickles) != 1:
        raise InvalidHeader(f"zip archive has {len(pickles)} top-level */data.pkl entries, "
                            f"expected one (is it a torch checkpoint?)", file=file)
    pickled = _read_entry(archive, pickles[0], MAX_PICKLE_BYTES + 1, file)
    if len(pickled) > MAX_PICKLE_BYTES:
        raise InvalidHeader(f"{pickles[0]} is over {MAX_PICKLE_BYTES} bytes; a checkpoint's is kilobytes",
                            file=file)
    return archive, pickles[0][:-len("data.pkl")], pickled


class _Kind(NamedTuple):
    """What a checkpoint's pickle holds and how to read it: the unpickler, and select(obj, file) ->
    ({name: TensorRef} to materialize, anything else the caller wants from the object)."""
    unpickler: type
    select: object


def _read_zip(file_object, file: str, kind: _Kind, budget: int):
    archive, prefix, pickled = _zip_pickle(file_object, file)
    names = set(archive.namelist())
    order = "<"
    if prefix + "byteorder" in names:
        byteorder = _read_entry(archive, prefix + "byteorder", 16, file).strip()
        if byteorder not in (b"little", b"big"):
            raise InvalidHeader(f"unknown byteorder {byteorder!r:.50}", file=file)
        order = "<" if byteorder == b"little" else ">"
    unpickler = kind.unpickler(io.BytesIO(pickled), file, legacy=False)
    state, extra = kind.select(unpickle(unpickler), file)

    def fetch(key: str, tensor: str):
        entry = f"{prefix}data/{key}"
        if entry not in names:
            raise InvalidHeader(f"zip archive lacks the storage entry {shown(entry)}", file=file,
                                tensor=tensor)
        dtype, numel = unpickler.roots[key]
        need = numel * dtype.itemsize
        if archive.getinfo(entry).file_size < need:     # before reading: do not inflate a short entry
            raise TruncatedFile(f"storage entry {shown(entry)} has {archive.getinfo(entry).file_size} bytes, "
                                f"but its {numel} {dtype.name} elements need {need}", file=file, tensor=tensor)
        data = _read_entry(archive, entry, need, file, tensor)
        if len(data) < need:
            raise TruncatedFile(f"storage entry {shown(entry)} ends after {len(data)} bytes, but its "
                                f"{numel} {dtype.name} elements need {need}", file=file, tensor=tensor)
        return data

    return _build(state, fetch, order, file, budget), extra


def _legacy_header(stream, file: str):
    """Read the legacy stream's first pickle (torch's magic number) and return a reader of the
    next ones (pickles of plain values: no storages)."""
    def header():
        return unpickle(Unpickler(stream, file, legacy=True, storages=False))

    try:
        magic = header()
    except (InvalidHeader, TruncatedFile):
        magic = None
    if magic != MAGIC_NUMBER:
        raise InvalidHeader("not a PyTorch checkpoint: neither a zip archive nor a legacy "
                            "stream starting with torch's magic number", file=file)
    return header


def _read_legacy(data: bytes, file: str, kind: _Kind, budget: int):
    stream = io.BytesIO(data)            # shares the bytes, no copy
    header = _legacy_header(stream, file)
    protocol = header()
    if protocol != PROTOCOL_VERSION:
        raise InvalidHeader(f"unsupported legacy protocol version {shown(protocol)}", file=file)
    sys_info = header()
    if not isinstance(sys_info, dict) or sys_info.get("little_endian") is not True:
        raise InvalidHeader(f"only checkpoints written on little-endian machines are read "
                            f"(sys_info {shown(sys_info, 200)})", file=file)
    unpickler = kind.unpickler(stream, file, legacy=True)
    state, extra = kind.select(unpickle(unpickler), file)
    keys = header()
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise InvalidHeader("malformed storage key list", file=file)
    owner = {}                           # storage key -> first tensor using it, for errors
    for name, ref in dict.items(state):
        if isinstance(ref.storage, StorageRef):
            owner.setdefault(ref.storage.key, name)
    spans, position = {}, stream.tell()
    for key in keys:
        if key not in unpickler.roots:
            raise InvalidHeader(f"storage {shown(key)} is listed but never referenced", file=file)
        dtype, numel = unpickler.roots[key]
        if position + 8 > len(data):
            raise TruncatedFile(f"file ends before storage {shown(key)}", file=file,
                                tensor=owner.get(key))
        (count,) = struct.unpack_from("<q", data, position)
        if count != numel:
            raise SizeMismatch(f"storage {shown(key)} holds {count} elements, the pickle says "
                               f"{numel}", file=file, tensor=owner.get(key))
        start, position = position + 8, position + 8 + count * dtype.itemsize
        if position > len(data):
            raise TruncatedFile(f"file truncated: storage {shown(key)} needs bytes [{start}, "
                                f"{position}) of a {len(data)}-byte file", file=file,
                                tensor=owner.get(key))
        spans[key] = start

    def fetch(key: str, tensor: str):
        if key not in spans:
            raise InvalidHeader(f"storage {shown(key)} is missing from the file's storage list",
                                file=file, tensor=tensor)
        dtype, numel = unpickler.roots[key]
        return memoryview(data)[spans[key]:spans[key] + numel * dtype.itemsize]

    return _build(state, fetch, "<", file, budget), extra


def _read(path_or_bytes, name: str | None, kind: _Kind):
    """(arrays {name: (contiguous storage-dtype array, DType, shape)} in the selection's order, extra)."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        file = name or "<bytes>"
        data = bytes(path_or_bytes)      # copies only a bytearray or memoryview
        handle, size = None, len(data)
    elif is_url(path_or_bytes):          # read whole: every tensor is read anyway
        file = name or path_or_bytes
        with open_source(path_or_bytes) as source:
            data = bytes(source.read(0, source.size()))
        handle, size = None, len(data)
    else:
        file = name or os.fspath(path_or_bytes)
        try:
            handle = open(path_or_bytes, "rb")
        except FileNotFoundError:
            raise SourceNotFound("no such file", file=file) from None
        except (OSError, ValueError) as e:      # a directory, a NUL in the name...
            raise FetchError(f"cannot open: {getattr(e, 'strerror', None) or e}", file=file) from None
        data, size = handle.read(4), os.fstat(handle.fileno()).st_size
    budget = 2 * size + (64 << 20)       # what the tensors may hold together (_build)
    try:
        if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
            if handle is not None:
                handle.seek(0)
            return _read_zip(handle or io.BytesIO(data), file, kind, budget)
        if handle is not None:
            handle.seek(0)
            data = handle.read()         # the one read of a legacy file
        if not data:
            raise TruncatedFile("empty file", file=file)
        if data[257:262] == b"ustar":
            raise InvalidHeader("tar-format checkpoints (torch < 0.4) are not supported",
                                file=file)
        return _read_legacy(data, file, kind, budget)
    finally:
        if handle is not None:
            handle.close()


class _NoModule(Exception):
    """The pickle holds no module: not a module checkpoint (read_pth_arrays then keeps its own error)."""


def _select_modules(obj, file: str):
    if model_of(obj) is None:
        raise _NoModule
    tree = module_tree(obj, file)
    state = OrderedDict(tree.tensors)
    for (path, attribute), ref in tree.settings.items():
        key = f"{path}.{attribute}" if path else attribute
        if key in state:
            raise InvalidHeader(f"module {shown(path or '<root>', 200)} has both a tensor and a setting "
                                f"named {shown(attribute)}", file=file, tensor=key)
        state[key] = ref
    return state, tree


_STATE_DICT = _Kind(Unpickler, lambda obj, file: (_state_dict(obj, file), None))
_MODULES = _Kind(ModuleUnpickler, _select_modules)


class ModuleCheckpoint(NamedTuple):
    tensors: OrderedDict         # module path ("model.0.conv.weight") -> array, as stored (bfloat16: uint16 bits)
    modules: dict                # module path ("" the model) -> ModuleRecord(type, attrs)
    meta: dict                   # the checkpoint's plain top-level entries (date, version, license...)


def read_module_checkpoint(path_or_bytes, *, name: str | None = None) -> ModuleCheckpoint:
    """A whole module saved by torch.save (zip or legacy): the model is the checkpoint's "model"
    entry, else its "ema" one (ultralytics), else the pickled object itself. Its parameters and
    buffers by module path, in state-dict order; each module's class name and plain settings (small
    tensor settings, such as Detect.stride, as lists); the checkpoint's plain entries. No code of
    the file runs: every class it names is an inert record (engine.formats.pickled)."""
    file = name or (os.fspath(path_or_bytes) if isinstance(path_or_bytes, (str, os.PathLike)) else "<bytes>")
    try:
        arrays, tree = _read(path_or_bytes, name, _MODULES)
    except _NoModule:
        raise InvalidHeader("the checkpoint holds no torch module (neither itself nor its 'model' or 'ema' "
                            "entry); a state dict is read by load_pth", file=file) from None
    modules = {path: ModuleRecord(record.type, dict(record.attrs)) for path, record in tree.modules.items()}
    for path, attribute in tree.settings:
        array, dtype, _ = arrays[f"{path}.{attribute}" if path else attribute]
        if dtype.name == "bfloat16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        modules[path].attrs[attribute] = array.tolist()
    tensors = OrderedDict((key, arrays[key][0]) for key in tree.tensors)
    return ModuleCheckpoint(tensors, modules, tree.meta)


def read_pth_arrays(path_or_bytes, *, name: str | None = None) -> OrderedDict:
    """{tensor name: (contiguous storage-dtype array, DType, shape)}, in file order: a state dict's
    tensors, or a module checkpoint's parameters and buffers by module path (read_module_checkpoint)."""
    try:
        return _read(path_or_bytes, name, _STATE_DICT)[0]
    except UnsafePickle as refused:
        try:
            arrays, tree = _read(path_or_bytes, name, _MODULES)
        except _NoModule:
            raise refused from None
    return OrderedDict((key, arrays[key]) for key in tree.tensors)


def _header_state(file: str, kind: _Kind) -> tuple[dict, str]:
    """({name: TensorRef}, layout) of a checkpoint, from its pickle alone."""
    with open(file, "rb") as handle:
        if handle.read(4) in (b"PK\x03\x04", b"PK\x05\x06"):
            handle.seek(0)
            _, _, data = _zip_pickle(handle, file)
            state, extra = kind.select(unpickle(kind.unpickler(io.BytesIO(data), file, legacy=False)), file)
            layout = "zip"
        else:
            handle.seek(0)
            limit = MAX_PICKLE_BYTES + (64 << 10)      # the pickles come before the storages: only they are read
            head = handle.read(limit)
            stream = io.BytesIO(head)
            header = _legacy_header(stream, file)
            header()                                   # protocol version
            header()                                   # sys_info
            try:
                state, extra = kind.select(unpickle(kind.unpickler(stream, file, legacy=True)), file)
            except TruncatedFile:
                if len(head) < limit:
                    raise
                raise InvalidHeader(f"the state dict's pickle runs past {MAX_PICKLE_BYTES} bytes; a checkpoint's "
                                    f"is kilobytes", file=file) from None
            layout = "legacy"
    return (state if extra is None else extra.tensors), layout


def read_pth_header(path) -> tuple[list[tuple[str, dtypes.DType, tuple[int, ...]]], str]:
    """The tensors of a checkpoint from its pickle alone, no storage read: [(name, storage dtype,
    shape)] in file order (a module checkpoint's by module path), and its layout ("zip" or "legacy").
    `engine inspect` (engine.formats.describe) lists them; unlike the reader it does not refuse a legacy
    file for its protocol or byte order."""
    file = os.fspath(path)
    try:
        state, layout = _header_state(file, _STATE_DICT)
    except UnsafePickle as refused:
        try:
            state, layout = _header_state(file, _MODULES)
        except _NoModule:
            raise refused from None
    entries = []
    for name, ref in dict.items(state):
        storage, size = ref.storage, ref.size
        if not isinstance(storage, StorageRef) or not isinstance(size, tuple):
            raise InvalidHeader(f"malformed tensor: storage {shown(storage, 50)}, size {shown(size)}",
                                file=file, tensor=name)
        size = checked_shape(size, lambda message: InvalidHeader(f"malformed tensor: {message}", file=file,
                                                                 tensor=name), "size")
        entries.append((name, storage.dtype, size))
    return entries, layout


def load_pth(path_or_bytes, *, name: str | None = None) -> OrderedDict[str, Tensor]:
    """A PyTorch state dict (zip or legacy .pth/.pt) as {name: Tensor}, in file order.

    Plain tensor dicts are read, optionally wrapped one level deep under "state_dict" or
    "model"; so is a whole module saved by torch.save (its parameters and buffers by module
    path: read_module_checkpoint). `name` labels a bytes input in error messages.
    """
    return OrderedDict((key, from_raw(array, dtype, shape))
                       for key, (array, dtype, shape) in read_pth_arrays(path_or_bytes,
                                                                         name=name).items())
