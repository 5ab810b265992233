"""Format-aware mutations of binary containers: safetensors, GGUF, CTranslate2 model.bin, zip (.pth)
and pickle (.pth).
See mutate.py for what each reaches."""
from __future__ import annotations

import functools
import io
import pickle
import pickletools
import struct
import zipfile
import zlib

from .edits import GENERIC, HOSTILE_NAMES, INTERESTING, _fit, _interesting_near, _write_int, int_field, json_edit, mutate_bytes
from .gguf_edits import GGUF_EDITS
from .payloads import PAYLOAD, pickle_payload


# --- safetensors ----------------------------------------------------------------------------------------

def safetensors_header(rng, data: bytes, ctx) -> bytes:
    """The JSON header edited; the length field rewritten to match (mostly)."""
    if len(data) < 8:
        return data
    (length,) = struct.unpack_from("<Q", data)
    if length > len(data) - 8:
        return int_field(rng, data, ctx, within=8)
    header = json_edit(rng, data[8:8 + length], ctx)
    if rng.random() < 0.2:
        header += b" " * rng.randrange(8)
    new_length = len(header) if rng.random() < 0.85 else _interesting_near(rng, len(header))
    return struct.pack("<Q", _fit(new_length, 8)) + header + data[8 + length:]


def safetensors_length(rng, data: bytes, ctx) -> bytes:
    return int_field(rng, data, ctx, within=8) if rng.random() < 0.3 else \
        struct.pack("<Q", _fit(rng.choice(INTERESTING), 8)) + data[8:]


SAFETENSORS = ((safetensors_header, 12), (safetensors_length, 2))


# --- GGUF ------------------------------------------------------------------------------------------------

_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_fields(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, size, role) of every integer field of a valid GGUF header."""
    fields, pos = [], 4

    def take(size: int, role: str) -> int:
        nonlocal pos
        value = int.from_bytes(data[pos:pos + size], "little")
        fields.append((pos, size, role))
        pos += size
        return value

    def string(role: str) -> None:
        nonlocal pos
        length = take(8, role)            # (not `pos += take(...)`: that adds to pos as it was before take moved it)
        pos += length
        if pos > len(data):
            raise ValueError("past the end")

    def value(vtype: int, depth: int = 0) -> None:
        nonlocal pos
        if vtype in _GGUF_SCALAR:
            pos += _GGUF_SCALAR[vtype]
        elif vtype == 8:
            string("string-length")
        elif vtype == 9 and depth < 4:
            element, count = take(4, "array-type"), take(8, "array-length")
            if element in _GGUF_SCALAR:
                pos += count * _GGUF_SCALAR[element]
            elif count > len(data) - pos:         # (each element takes 8 bytes at least)
                raise ValueError("past the end")
            else:
                for _ in range(count):
                    value(element, depth + 1)
        else:
            raise ValueError(vtype)
        if pos > len(data):
            raise ValueError("past the end")

    take(4, "version")
    n_tensors, n_kv = take(8, "tensor-count"), take(8, "kv-count")
    if n_tensors + n_kv > len(data):
        raise ValueError("more entries than bytes")
    for _ in range(n_kv):
        string("key-length")
        value(take(4, "value-type"))
    for _ in range(n_tensors):
        string("name-length")
        dims = take(4, "n-dims")
        if dims > 8:
            raise ValueError("too many dims")
        for _ in range(dims):
            take(8, "dim")
        take(4, "ggml-type")
        take(8, "offset")
    if pos > len(data):
        raise ValueError("past the end")
    return fields


@functools.lru_cache(maxsize=64)
def _cached_gguf_fields(data: bytes):
    try:
        return gguf_fields(data)
    except (ValueError, IndexError, RecursionError):
        return None


def gguf_field(rng, data: bytes, ctx) -> bytes:
    fields = _cached_gguf_fields(data)
    if not fields:
        return int_field(rng, data, ctx)
    offset, size, role = rng.choice(fields)
    current = int.from_bytes(data[offset:offset + size], "little")
    out = bytearray(data)
    _write_int(out, offset, size, _interesting_near(rng, current))
    ctx.note(f"gguf:{role}")
    return bytes(out)


def gguf_type(rng, data: bytes, ctx) -> bytes:
    """A tensor's GGML type or a value type set to another known (or unknown) id."""
    fields = [f for f in (_cached_gguf_fields(data) or []) if f[2] in ("ggml-type", "value-type", "array-type")]
    if not fields:
        return gguf_field(rng, data, ctx)
    offset, size, role = rng.choice(fields)
    out = bytearray(data)
    _write_int(out, offset, size, rng.randrange(42) if role == "ggml-type" else rng.randrange(14))
    ctx.note(f"gguf:{role}-id")
    return bytes(out)


GGUF = ((gguf_field, 10), (gguf_type, 4)) + GGUF_EDITS


# --- CTranslate2 model.bin --------------------------------------------------------------------------------

def ctranslate2_fields(data: bytes) -> list[tuple[int, int, str]]:
    """(offset, size, role) of every integer field of a valid model.bin."""
    fields, pos = [], 0

    def take(size: int, role: str) -> int:
        nonlocal pos
        if pos + size > len(data):
            raise ValueError("past the end")
        value = int.from_bytes(data[pos:pos + size], "little")
        fields.append((pos, size, role))
        pos += size
        return value

    def string(role: str) -> None:
        nonlocal pos
        length = take(2, role)          # (`pos += take(...)` would add to pos as it was before take)
        pos += length

    version = take(4, "version")
    if version >= 2:
        string("spec-length")
        take(4, "revision")
    count = take(4, "variable-count")
    if count > len(data):
        raise ValueError("more variables than bytes")
    for _ in range(count):
        string("name-length")
        rank = take(1, "rank")
        for _ in range(rank):
            take(4, "dim")
        item = take(1, "dtype")
        size = take(4, "byte-count")
        pos += size if version >= 4 else size * item
    if version >= 3:
        aliases = take(4, "alias-count")
        if aliases > len(data):
            raise ValueError("more aliases than bytes")
        for _ in range(2 * aliases):
            string("alias-length")
    if pos != len(data):
        raise ValueError("not at the end")
    return fields


@functools.lru_cache(maxsize=64)
def _cached_ctranslate2_fields(data: bytes):
    try:
        return ctranslate2_fields(data)
    except ValueError:
        return None


def ctranslate2_field(rng, data: bytes, ctx) -> bytes:
    """A count, length, dim, rank or dtype id set near an interesting value (or, for a dtype, to
    another id, known or not)."""
    fields = _cached_ctranslate2_fields(data)
    if not fields:
        return int_field(rng, data, ctx)
    offset, size, role = rng.choice(fields)
    current = int.from_bytes(data[offset:offset + size], "little")
    out = bytearray(data)
    value = rng.randrange(8) if role == "dtype" and rng.random() < 0.7 else _interesting_near(rng, current)
    _write_int(out, offset, size, value)
    ctx.note(f"ctranslate2:{role}")
    return bytes(out)


CTRANSLATE2 = ((ctranslate2_field, 12),)


# --- zip (.pth) ----------------------------------------------------------------------------------------

def _zip_records(data: bytes) -> list[tuple[str, int]]:
    """("local" | "central" | "eocd" | "eocd64", offset) of each record, found by signature."""
    out = []
    for kind, signature in (("local", b"PK\x03\x04"), ("central", b"PK\x01\x02"), ("eocd", b"PK\x05\x06"),
                            ("eocd64", b"PK\x06\x06")):
        at = data.find(signature)
        while at >= 0:
            out.append((kind, at))
            at = data.find(signature, at + 4)
    return out


# field -> (offset in a local record, offset in a central record, size)
_ZIP_FIELDS = {"flags": (6, 8, 2), "method": (8, 10, 2), "crc": (14, 16, 4), "compressed-size": (18, 20, 4),
               "size": (22, 24, 4), "name-length": (26, 28, 2), "extra-length": (28, 30, 2),
               "header-offset": (None, 42, 4)}
_METHODS = (0, 1, 6, 8, 9, 12, 14, 18, 19, 93, 95, 96, 97, 98, 99, 0xFFFF)
_FLAGS = (0x1, 0x8, 0x40, 0x800, 0x2000, 0xFFFF, 0x1 | 0x40)


def zip_field(rng, data: bytes, ctx) -> bytes:
    records = _zip_records(data)
    if not records:
        return int_field(rng, data, ctx)
    kind, at = rng.choice(records)
    out = bytearray(data)
    if kind in ("eocd", "eocd64"):
        offsets = (8, 10, 12, 16, 20) if kind == "eocd" else (24, 32, 40, 48)
        offset = rng.choice(offsets)
        size = 2 if kind == "eocd" and offset < 12 else 4 if kind == "eocd" else 8
        if at + offset + size <= len(out):
            _write_int(out, at + offset, size, _interesting_near(rng, 0))
        ctx.note(f"zip:{kind}")
        return bytes(out)
    name, (local, central, size) = rng.choice(list(_ZIP_FIELDS.items()))
    offset = local if kind == "local" else central
    if offset is None or at + offset + size > len(out):
        return bytes(out)
    value = rng.choice(_METHODS) if name == "method" else rng.choice(_FLAGS) if name == "flags" else \
        _interesting_near(rng, int.from_bytes(out[at + offset:at + offset + size], "little"))
    _write_int(out, at + offset, size, value)
    if name in ("method", "flags") and rng.random() < 0.7:      # both records agree: past zipfile's check
        twin = ("central" if kind == "local" else "local")
        twins = [a for k, a in records if k == twin]
        index = [a for k, a in records if k == kind].index(at)
        other = local if twin == "local" else central
        if index < len(twins) and twins[index] + other + size <= len(out):
            _write_int(out, twins[index] + other, size, value)
    ctx.note(f"zip:{kind}-{name}")
    return bytes(out)


@functools.lru_cache(maxsize=1)
def _deflated_block() -> tuple[bytes, bytes]:
    """16 MiB of zeros deflated, ending on a full flush (so copies of it chain), and a final block."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = squeeze.compress(bytes(1 << 24)) + squeeze.flush(zlib.Z_FULL_FLUSH)
    return block, squeeze.flush()


def deflated_zeros(size: int) -> bytes:
    """A raw deflate stream of about `size` zero bytes (1 kB per MiB): an entry that claims little
    and inflates to a lot. After a full flush the compressor starts afresh, so the same 16 MiB
    block can be repeated instead of compressing gigabytes."""
    block, final = _deflated_block()
    return block * max(1, size >> 24) + final


def zip_entries(data: bytes):
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return [(info, archive.read(info)) for info in archive.infolist()]
    except Exception:            # a mutated archive: this mutation needs a readable one
        return None


def _zip_write(entries, methods: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info, body in entries:
            fresh = zipfile.ZipInfo(info.filename, date_time=(2020, 1, 1, 0, 0, 0))
            fresh.compress_type = methods.get(info.filename, zipfile.ZIP_STORED)
            archive.writestr(fresh, body)
    return buffer.getvalue()


def zip_rebuild(rng, data: bytes, ctx) -> bytes:
    """The archive written again: entries compressed, one corrupted, one a bomb, or its pickle mutated."""
    entries = zip_entries(data)
    if not entries:
        return zip_field(rng, data, ctx)
    names = [info.filename for info, _ in entries]
    choice = rng.random()
    if choice < 0.35:
        method = rng.choice((zipfile.ZIP_DEFLATED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA))
        chosen = names if rng.random() < 0.5 else [rng.choice(names)]
        out = _zip_write(entries, {n: method for n in chosen})
        ctx.note(f"zip:compress-{method}")
        if rng.random() < 0.5:                     # and break the compressed bytes
            return _corrupt_entry(rng, out, rng.choice(chosen), ctx)
        return out
    if choice < 0.5:
        target = rng.choice([n for n in names if "/data/" in n] or names)
        size = rng.choice((1 << 26, 1 << 30, 3 << 30))
        bomb = zip_with_raw_entry(entries, target, deflated_zeros(size), size)
        ctx.note(f"zip:bomb-{size >> 20}MB")
        return bomb
    target = rng.choice([n for n in names if n.endswith("data.pkl")] * 3 + names)
    body = dict((info.filename, b) for info, b in entries)[target]
    mutated = mutate_bytes(rng, body, ctx, PICKLE + GENERIC if target.endswith(".pkl") else GENERIC)
    ctx.note(f"zip:entry-{target.rsplit('/', 1)[-1]}")
    return _zip_write([(info, mutated if info.filename == target else b) for info, b in entries], {})


def _corrupt_entry(rng, data: bytes, name: str, ctx) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(name)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    if info.compress_size == 0:
        return data
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        out[start + rng.randrange(info.compress_size)] ^= 1 << rng.randrange(8)
    ctx.note("zip:corrupt-stream")
    return bytes(out)


def zip_with_raw_entry(entries, target: str, stream: bytes, size: int) -> bytes:
    """The archive with `target` replaced by an already deflated `stream` of `size` bytes."""
    out = io.BytesIO()
    central = []
    for info, body in entries:
        name = info.filename.encode()
        if info.filename == target:           # its CRC is not checked before the end: never reached
            method, payload, crc, length = 8, stream, 0, max(1, size >> 24) << 24
        else:
            method, payload, crc, length = 0, body, zlib.crc32(body), len(body)
        offset = out.tell()
        big = length >= 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, length, len(payload)) if big else b""
        sizes = (0xFFFFFFFF, 0xFFFFFFFF) if big else (len(payload), length)
        out.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, 0, method, 0, 0x21, crc, *sizes,
                              len(name), len(extra)) + name + extra + payload)
        central.append(struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 45, 45, 0, method, 0, 0x21, crc, *sizes,
                                   len(name), len(extra), 0, 0, 0, 0, offset) + name + extra)
    start = out.tell()
    directory = b"".join(central)
    out.write(directory)
    out.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(central), len(central), len(directory), start, 0))
    return out.getvalue()


def zip_payload(rng, data: bytes, ctx) -> bytes:
    """The archive written again with a hostile payload in its data.pkl (payloads.py)."""
    entries = zip_entries(data)
    pickles = [info.filename for info, _ in entries or () if info.filename.endswith("data.pkl")]
    if not pickles:
        return zip_field(rng, data, ctx)
    return _zip_write([(info, pickle_payload(rng, body, ctx) if info.filename == pickles[0] else body)
                       for info, body in entries], {})


ZIP = ((zip_field, 8), (zip_rebuild, 8), (zip_payload, 4))


# --- pickle (.pth) ---------------------------------------------------------------------------------------

def _pickle_ops(data: bytes) -> list[tuple[object, object, int, int]]:
    """(opcode, argument, start, end) of each opcode of each pickle at the start of `data` (legacy
    checkpoints hold several in a row)."""
    out, stream = [], io.BytesIO(data)
    try:
        while stream.tell() < len(data):
            start = stream.tell()
            ops = list(pickletools.genops(stream))
            if not ops:
                break
            for (op, arg, pos), following in zip(ops, [p for _, _, p in ops[1:]] + [stream.tell()]):
                out.append((op, arg, pos, following))
            if ops[-1][0].name != "STOP" or stream.tell() == start:
                break
    except Exception:            # the raw storages after the pickles, or mutated bytes
        pass
    return out


def _pickle_int(value: int) -> bytes:
    return pickle.dumps(value, protocol=2)[2:-1]


def pickle_edit(rng, data: bytes, ctx) -> bytes:
    ops = _pickle_ops(data)
    if not ops:
        return int_field(rng, data, ctx)
    choice = rng.random()
    memo = [o for o in ops if o[0].name in ("BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET")]
    ints = [o for o in ops if o[0].name in ("BININT", "BININT1", "BININT2", "LONG1")]
    texts = [o for o in ops if o[0].name in ("BINUNICODE", "SHORT_BINUNICODE", "GLOBAL", "SHORT_BINSTRING")]
    if choice < 0.3 and memo:
        op, arg, start, end = rng.choice(memo)
        index = rng.choice((0x7FFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 20, arg + 1, 255))
        code = b"r" if op.name.endswith("PUT") else b"j"
        ctx.note(f"pickle:memo-{op.name}")
        return data[:start] + code + struct.pack("<I", index) + data[end:]
    if choice < 0.75 and ints:
        op, arg, start, end = rng.choice(ints)
        value = rng.choice((-1, 0, 1, 1 << 31, 1 << 63, 1 << 64, 10 ** 30, 1 << 4000, 10 ** 5000, -(1 << 63),
                            (1 << 62) + 1, 64 * (arg or 1)))
        ctx.note("pickle:int")
        return data[:start] + _pickle_int(value) + data[end:]
    if texts:
        op, arg, start, end = rng.choice(texts)
        if op.name == "GLOBAL":
            replacement = rng.choice(("torch\nQInt8Storage", "os\nsystem", "builtins\neval", "torch._utils\n_rebuild_tensor_v3",
                                      "collections\nOrderedDict", "torch\nFloatStorage", "torch._utils\n_rebuild_parameter",
                                      "torch\nBoolStorage", "torch._utils\n_rebuild_tensor"))
            ctx.note("pickle:global")
            return data[:start] + b"c" + replacement.encode() + b"\n" + data[end:]
        text = rng.choice(HOSTILE_NAMES[:12] + ("cpu", "cuda:0", "0", "1", "storage", "little", "big"))
        raw = text.encode("utf-8", "surrogatepass")
        ctx.note("pickle:string")
        return data[:start] + b"X" + struct.pack("<I", len(raw)) + raw + data[end:]
    return int_field(rng, data, ctx)


# the opcodes that build a module checkpoint's structure: one swapped for another calls a class
# (NEWOBJ -> REDUCE), gives state to a stand-in (-> BUILD), drops or misplaces an object
_STRUCTURE = {"NEWOBJ": b"\x81", "REDUCE": b"R", "BUILD": b"b", "SETITEM": b"s", "SETITEMS": b"u", "APPEND": b"a",
              "APPENDS": b"e", "TUPLE": b"t", "TUPLE1": b"\x85", "TUPLE2": b"\x86", "TUPLE3": b"\x87", "EMPTY_DICT": b"}",
              "EMPTY_LIST": b"]", "EMPTY_TUPLE": b")", "POP": b"0", "MARK": b"(", "NONE": b"N", "DUP": b"2"}
# globals a whole-module checkpoint may name (stand-ins, records) or must never reach
_MODULE_GLOBALS = ("builtins\ngetattr", "__builtin__\nset", "builtins\nfrozenset", "torch\nSize", "torch\ndevice",
                   "torch\nfloat16", "copyreg\n_reconstructor", "builtins\nobject", "collections\nOrderedDict",
                   "ultralytics.nn.modules.conv\nConv", "torch.nn.modules.conv\nConv2d", "posix\nsystem",
                   "subprocess\nPopen", "torch._utils\n_rebuild_parameter_with_state")


def pickle_structure(rng, data: bytes, ctx) -> bytes:
    """One structural opcode replaced by another, or a global by one a module checkpoint may name."""
    ops = _pickle_ops(data)
    structural = [o for o in ops if o[0].name in _STRUCTURE]
    globals_ = [o for o in ops if o[0].name == "GLOBAL"]
    if globals_ and (rng.random() < 0.3 or not structural):
        _, _, start, end = rng.choice(globals_)
        ctx.note("pickle:module-global")
        return data[:start] + b"c" + rng.choice(_MODULE_GLOBALS).encode() + b"\n" + data[end:]
    if not structural:
        return int_field(rng, data, ctx)
    op, _, start, end = rng.choice(structural)
    replacement = rng.choice(sorted(_STRUCTURE))
    ctx.note(f"pickle:{op.name}->{replacement}")
    return data[:start] + _STRUCTURE[replacement] + data[end:]


PICKLE = ((pickle_edit, 10), (pickle_structure, 6)) + PAYLOAD
