"""Writes CTranslate2 model.bin files for tests, field by field as the format's writer lays them out
(ctranslate2/specs/model_spec.py `_serialize`; engine/formats/ctranslate2.py documents the layout), with
switches to break each field on purpose. Independent of our reader: struct and NumPy only."""
from __future__ import annotations

import struct

import numpy as np

# CTranslate2's DataType ids; bfloat16 is given as uint16 bits
TYPE_IDS = {"float32": 0, "int8": 1, "int16": 2, "int32": 3, "float16": 4, "bfloat16": 5}
_NUMPY = {"float32": np.float32, "int8": np.int8, "int16": np.int16, "int32": np.int32, "float16": np.float16,
          "bfloat16": np.uint16}


def string(text: str | bytes) -> bytes:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<H", len(raw) + 1) + raw + b"\0"


def variable(name: str, array: np.ndarray, dtype: str | None = None, *, version: int = 6,
             type_id: int | None = None, byte_count: int | None = None, shape=None) -> bytes:
    """One variable's record; `type_id`, `byte_count` and `shape` override what the array says."""
    dtype = dtype or np.dtype(array.dtype).name
    data = np.ascontiguousarray(array, dtype=np.dtype(_NUMPY[dtype]).newbyteorder("<")).tobytes()
    shape = array.shape if shape is None else shape
    out = string(name) + struct.pack("<B", len(shape)) + struct.pack(f"<{len(shape)}I", *shape)
    if version >= 4:
        out += struct.pack("<BI", TYPE_IDS[dtype] if type_id is None else type_id,
                           len(data) if byte_count is None else byte_count)
    else:                                  # item size, then the element count
        item = np.dtype(_NUMPY[dtype]).itemsize
        out += struct.pack("<BI", item if type_id is None else type_id,
                           len(data) // item if byte_count is None else byte_count)
    return out + data


def model_bin(variables, aliases=(), *, version: int = 6, spec: str = "TestSpec", revision: int = 2,
              count: int | None = None, alias_count: int | None = None) -> bytes:
    """A whole file: `variables` are (name, array[, dtype]) or already written records (bytes)."""
    out = struct.pack("<I", version)
    if version >= 2:
        out += string(spec) + struct.pack("<I", revision)
    out += struct.pack("<I", len(variables) if count is None else count)
    for item in variables:
        out += item if isinstance(item, bytes) else variable(*item, version=version)
    if version >= 3:
        out += struct.pack("<I", len(aliases) if alias_count is None else alias_count)
        for alias, target in aliases:
            out += string(alias) + string(target)
    return out
