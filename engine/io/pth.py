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

Unpickling goes through `_Unpickler.find_class`, which hands out harmless stand-ins for
the few globals a state dict needs (`_GLOBALS`) and refuses every other one before
it can run. The stand-ins only record descriptors (storage, offset, size, stride);
arrays are cut from the storage bytes afterwards, bounds-checked, as contiguous copies.
"""
from __future__ import annotations

import io
import math
import os
import pickle
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from .. import dtypes
from ..errors import (FetchError, InvalidHeader, InvalidOffsets, SizeMismatch, SourceNotFound,
                      TruncatedFile, UnknownDtype, UnsafePickle, WeightsError)
from ..tensor import Tensor, from_raw
from ..untrusted import INT64_MAX, checked_shape, shown

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
MAX_PICKLE_BYTES = 64 << 20     # data.pkl of a checkpoint is kilobytes (~150 bytes a tensor)
# What zipfile raises on a damaged or unusual archive: it has no error type of its own for most
# of it (a bad version is NotImplementedError, a damaged deflate stream zlib.error, a bad
# header struct.error or ValueError...).
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
               struct.error, NotImplementedError, RuntimeError, KeyError, IndexError, OverflowError)


class _StorageType(NamedTuple):      # stands in for torch.FloatStorage & co.
    name: str
    dtype: dtypes.DType


class _StorageRef(NamedTuple):       # a persistent id, resolved
    key: str                         # root storage key
    dtype: dtypes.DType
    numel: int                       # elements visible through this reference
    base: int                        # element offset in the root (old storage views)


class _TensorRef(NamedTuple):        # what torch._utils._rebuild_tensor* would build
    storage: object
    offset: object
    size: object
    stride: object


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _TensorRef(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    return _TensorRef(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    if not isinstance(data, _TensorRef):       # _unpickle names the file
        raise ValueError(f"a Parameter wraps a {type(data).__name__}, not a tensor")
    return data                      # parameters load as plain tensors


_STORAGES = {"FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64,
             "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
             "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
             "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8,
             "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool_}

# the whole allowlist: "module.name" -> stand-in
_GLOBALS = {"collections.OrderedDict": OrderedDict,
            "torch._utils._rebuild_tensor": _rebuild_tensor,
            "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
            "torch._utils._rebuild_parameter": _rebuild_parameter,
            **{f"torch.{name}": _StorageType(name, dtype) for name, dtype in _STORAGES.items()}}


def _check_pickle(stream: io.BytesIO, file: str) -> None:
    """Walk the next pickle's opcodes (pickletools, which reads only the bytes there are) before the
    C unpickler runs it: the unpickler allocates what an opcode claims before reading it, a
    BINBYTES8 length or the memo size a PUT names (LONG_BINPUT 2**31 asks for 16 GB), so a few
    hostile bytes would exhaust memory. An argument past the end is refused here; so is a memo
    index past what the pickle's bytes could fill (it stores at most one object per byte)."""
    import pickletools                          # here: 50 ms to import in Pyodide, for .pth files only
    start = stream.tell()
    limit = len(stream.getbuffer()) - start
    try:
        for opcode, argument, _ in pickletools.genops(stream):
            if opcode.name in ("PUT", "BINPUT", "LONG_BINPUT") and not 0 <= argument <= limit:
                raise InvalidHeader(f"malformed pickle: memo index {argument} past what its {limit} bytes "
                                    f"can hold", file=file)
            if opcode.name == "STOP":
                break
    except (ValueError, struct.error) as e:        # truncated or unknown opcodes (UnicodeDecodeError too)
        if "remain" in str(e) or "exhausted" in str(e):
            raise TruncatedFile(f"file truncated inside a pickle: {e}", file=file) from None
        raise InvalidHeader(f"malformed pickle: {e}", file=file) from None
    finally:
        stream.seek(start)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, name: str, legacy: bool, storages: bool = True):
        super().__init__(file, encoding="utf-8")
        self.stream = file
        self.name, self.legacy, self.storages_allowed = name, legacy, storages
        self.roots: dict[str, tuple[dtypes.DType, int]] = {}    # key -> (dtype, numel)

    def load(self):
        _check_pickle(self.stream, self.name)
        return super().load()

    def find_class(self, module, name):
        qualified = f"{module}.{name}"
        if qualified in _GLOBALS:
            return _GLOBALS[qualified]
        qualified = qualified if len(qualified) <= 200 else qualified[:200] + "..."     # for the message
        if qualified == "torch._utils._rebuild_tensor_v3":   # dtypes without a *Storage class
            raise UnknownDtype(f"{qualified}: torch writes it for dtypes the engine lacks "
                               f"(uint16/32/64, float8 ...)", file=self.name)
        if module in ("torch", "torch.storage") and name.endswith("Storage"):
            raise UnknownDtype(f"unsupported storage type {qualified} (supported: "
                               f"{', '.join(f'torch.{n}' for n in _STORAGES)})", file=self.name)
        raise UnsafePickle(f"refusing to load global {qualified}: only plain tensor state dicts "
                           f"are read (allowed: collections.OrderedDict, torch._utils."
                           f"_rebuild_tensor[_v2], torch._utils._rebuild_parameter, "
                           f"torch.<dtype>Storage)", file=self.name)

    def persistent_load(self, pid):
        fields = 6 if self.legacy else 5
        if not (self.storages_allowed and isinstance(pid, tuple) and len(pid) == fields
                and pid[0] in ("storage", b"storage")):
            raise InvalidHeader(f"unexpected persistent id {shown(pid, 200)}", file=self.name)
        storage_type, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(storage_type, _StorageType) or not isinstance(key, str) \
                or type(numel) is not int or not 0 <= numel <= INT64_MAX:
            raise InvalidHeader(f"malformed storage reference {shown(pid, 200)}", file=self.name)
        if self.roots.setdefault(key, (storage_type.dtype, numel)) != (storage_type.dtype, numel):
            raise InvalidHeader(f"storage {shown(key)} is referenced with different types or sizes",
                                file=self.name)
        view = pid[5] if self.legacy else None
        if view is None:
            return _StorageRef(key, storage_type.dtype, numel, 0)
        if not (isinstance(view, tuple) and len(view) == 3
                and all(type(v) is int and 0 <= v <= INT64_MAX for v in view[1:])):
            raise InvalidHeader(f"malformed storage view {shown(view, 200)}", file=self.name)
        _, base, view_size = view
        if base + view_size > numel:
            raise InvalidOffsets(f"storage view [{base}, {base + view_size}) runs past storage "
                                 f"{shown(key)} of {numel} elements", file=self.name)
        return _StorageRef(key, storage_type.dtype, view_size, base)


def _unpickle(unpickler: _Unpickler):
    try:
        return unpickler.load()
    except (WeightsError, MemoryError):
        raise
    except Exception as e:   # anything the untrusted bytes provoke; only stand-ins ran
        if isinstance(e, EOFError) or "truncated" in str(e):
            raise TruncatedFile(f"file truncated inside a pickle: {e}",
                                file=unpickler.name) from None
        raise InvalidHeader(f"malformed pickle: {type(e).__name__}: {e}",
                            file=unpickler.name) from None


def _state_dict(obj, file: str) -> dict:
    """The {name: tensor} dict: the object itself, or its 'state_dict'/'model' entry."""
    if isinstance(obj, dict) and not all(isinstance(v, _TensorRef) for v in dict.values(obj)):
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
        if not isinstance(value, _TensorRef):
            raise InvalidHeader(f"value is a {type(value).__name__}, not a tensor (only plain "
                                f"tensor state dicts are read)", file=file, tensor=name)
    return obj


def _materialize(name: str, ref: _TensorRef, buffer, order: str, file: str):
    """(contiguous native array, DType, shape) for `ref`, cut from its root storage's bytes."""
    storage, offset, size, stride = ref
    if not isinstance(storage, _StorageRef):
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


def _build(state: dict, fetch, order: str, file: str) -> OrderedDict:
    """Materialize every tensor, one root storage at a time, in the dict's order."""
    groups: dict[str, list[str]] = {}
    for name, ref in dict.items(state):
        key = ref.storage.key if isinstance(ref.storage, _StorageRef) else None
        groups.setdefault(key, []).append(name)
    arrays = {}
    for key, names in groups.items():
        buffer = fetch(key, names[0]) if key is not None else None
        for name in names:
            arrays[name] = _materialize(name, state[name], buffer, order, file)
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


def _read_zip(file_object, file: str) -> OrderedDict:
    archive, prefix, pickled = _zip_pickle(file_object, file)
    names = set(archive.namelist())
    order = "<"
    if prefix + "byteorder" in names:
        byteorder = _read_entry(archive, prefix + "byteorder", 16, file).strip()
        if byteorder not in (b"little", b"big"):
            raise InvalidHeader(f"unknown byteorder {byteorder!r:.50}", file=file)
        order = "<" if byteorder == b"little" else ">"
    unpickler = _Unpickler(io.BytesIO(pickled), file, legacy=False)
    state = _state_dict(_unpickle(unpickler), file)

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

    return _build(state, fetch, order, file)


def _legacy_header(stream, file: str):
    """Read the legacy stream's first pickle (torch's magic number) and return a reader of the
    next ones (pickles of plain values: no storages)."""
    def header():
        return _unpickle(_Unpickler(stream, file, legacy=True, storages=False))

    try:
        magic = header()
    except (InvalidHeader, TruncatedFile):
        magic = None
    if magic != MAGIC_NUMBER:
        raise InvalidHeader("not a PyTorch checkpoint: neither a zip archive nor a legacy "
                            "stream starting with torch's magic number", file=file)
    return header


def _read_legacy(data: bytes, file: str) -> OrderedDict:
    stream = io.BytesIO(data)            # shares the bytes, no copy
    header = _legacy_header(stream, file)
    protocol = header()
    if protocol != PROTOCOL_VERSION:
        raise InvalidHeader(f"unsupported legacy protocol version {shown(protocol)}", file=file)
    sys_info = header()
    if not isinstance(sys_info, dict) or sys_info.get("little_endian") is not True:
        raise InvalidHeader(f"only checkpoints written on little-endian machines are read "
                            f"(sys_info {shown(sys_info, 200)})", file=file)
    unpickler = _Unpickler(stream, file, legacy=True)
    state = _state_dict(_unpickle(unpickler), file)
    keys = header()
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise InvalidHeader("malformed storage key list", file=file)
    owner = {}                           # storage key -> first tensor using it, for errors
    for name, ref in dict.items(state):
        if isinstance(ref.storage, _StorageRef):
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

    return _build(state, fetch, "<", file)


def read_pth_arrays(path_or_bytes, *, name: str | None = None) -> OrderedDict:
    """{tensor name: (contiguous storage-dtype array, DType, shape)}, in file order."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        file = name or "<bytes>"
        data = bytes(path_or_bytes)      # copies only a bytearray or memoryview
        handle = None
    else:
        file = name or os.fspath(path_or_bytes)
        try:
            handle = open(path_or_bytes, "rb")
        except FileNotFoundError:
            raise SourceNotFound("no such file", file=file) from None
        except (OSError, ValueError) as e:      # a directory, a NUL in the name...
            raise FetchError(f"cannot open: {getattr(e, 'strerror', None) or e}", file=file) from None
        data = handle.read(4)
    try:
        if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
            if handle is not None:
                handle.seek(0)
            arrays = _read_zip(handle or io.BytesIO(data), file)
        else:
            if handle is not None:
                handle.seek(0)
                data = handle.read()     # the one read of a legacy file
            if not data:
                raise TruncatedFile("empty file", file=file)
            if data[257:262] == b"ustar":
                raise InvalidHeader("tar-format checkpoints (torch < 0.4) are not supported",
                                    file=file)
            arrays = _read_legacy(data, file)
    finally:
        if handle is not None:
            handle.close()
    return arrays


def read_pth_header(path) -> tuple[list[tuple[str, dtypes.DType, tuple[int, ...]]], str]:
    """The tensors of a checkpoint from its pickle alone, no storage read: [(name, storage dtype,
    shape)] in file order, and its layout ("zip" or "legacy"). `engine inspect` (engine.io.describe)
    lists them; unlike the reader it does not refuse a legacy file for its protocol or byte order."""
    file = os.fspath(path)
    with open(file, "rb") as handle:
        if handle.read(4) in (b"PK\x03\x04", b"PK\x05\x06"):
            handle.seek(0)
            _, _, data = _zip_pickle(handle, file)
            state = _state_dict(_unpickle(_Unpickler(io.BytesIO(data), file, legacy=False)), file)
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
                state = _state_dict(_unpickle(_Unpickler(stream, file, legacy=True)), file)
            except TruncatedFile:
                if len(head) < limit:
                    raise
                raise InvalidHeader(f"the state dict's pickle runs past {MAX_PICKLE_BYTES} bytes; a checkpoint's "
                                    f"is kilobytes", file=file) from None
            layout = "legacy"
    entries = []
    for name, ref in dict.items(state):
        storage, size = ref.storage, ref.size
        if not isinstance(storage, _StorageRef) or not isinstance(size, tuple):
            raise InvalidHeader(f"malformed tensor: storage {shown(storage, 50)}, size {shown(size)}",
                                file=file, tensor=name)
        size = checked_shape(size, lambda message: InvalidHeader(f"malformed tensor: {message}", file=file,
                                                                 tensor=name), "size")
        entries.append((name, storage.dtype, size))
    return entries, layout


def load_pth(path_or_bytes, *, name: str | None = None) -> OrderedDict[str, Tensor]:
    """A PyTorch state dict (zip or legacy .pth/.pt) as {name: Tensor}, in file order.

    Only plain tensor dicts are read, optionally wrapped one level deep under
    "state_dict" or "model"; `name` labels a bytes input in error messages.
    """
    return OrderedDict((key, from_raw(array, dtype, shape))
                       for key, (array, dtype, shape) in read_pth_arrays(path_or_bytes,
                                                                         name=name).items())
