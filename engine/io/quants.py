"""GGML tensor types: the table of block layouts and NumPy dequantization.

A GGML tensor is stored row by row; each row of `ne0` elements is a run of blocks of
`block_size` elements packed into `type_size` bytes (plain types: blocks of one).
Layouts follow ggml's documentation of its formats (ggml/src/ggml-common.h):

- Q4_0: f16 d, 16 bytes of nibbles; w = d * (q - 8)
- Q4_1: f16 d, f16 m, 16 bytes of nibbles; w = d * q + m
- Q5_0: f16 d, u32 qh (bit j = 5th bit of element j), 16 bytes of nibbles; w = d * (q - 16)
- Q5_1: f16 d, f16 m, u32 qh, 16 bytes of nibbles; w = d * q + m
- Q8_0: f16 d, 32 int8; w = d * q
Nibbles: byte i holds element i in its low half and element i + 16 in its high half.

Dequantization computes in float32 with one rounding per multiply and per add, in
the order written above, so it equals ggml's reference (and gguf-py's) bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtypes


@dataclass(frozen=True)
class GGMLType:
    id: int                          # the type id stored in GGUF tensor infos
    name: str                        # lower-case ggml name: "f32", "q4_0", "q4_k"
    block_size: int                  # elements per block (1 for plain types)
    type_size: int                   # bytes per block
    dtype: dtypes.DType | None = None    # engine storage dtype of a plain type

    @property
    def quantized(self) -> bool:
        return self.dtype is None

    def row_bytes(self, n: int) -> int:
        return n // self.block_size * self.type_size


# Ids missing here (4, 5, 31-33, 36-38) were removed from ggml; files using them are
# rejected at open. Types without a dequantizer below can be listed and read raw.
TYPES: dict[int, GGMLType] = {t.id: t for t in (
    GGMLType(0, "f32", 1, 4, dtypes.float32),
    GGMLType(1, "f16", 1, 2, dtypes.float16),
    GGMLType(2, "q4_0", 32, 18),
    GGMLType(3, "q4_1", 32, 20),
    GGMLType(6, "q5_0", 32, 22),
    GGMLType(7, "q5_1", 32, 24),
    GGMLType(8, "q8_0", 32, 34),
    GGMLType(9, "q8_1", 32, 36),          # f16 d, f16 s, 32 int8 (gguf-py still says 40)
    GGMLType(10, "q2_k", 256, 84),
    GGMLType(11, "q3_k", 256, 110),
    GGMLType(12, "q4_k", 256, 144),
    GGMLType(13, "q5_k", 256, 176),
    GGMLType(14, "q6_k", 256, 210),
    GGMLType(15, "q8_k", 256, 292),
    GGMLType(16, "iq2_xxs", 256, 66),
    GGMLType(17, "iq2_xs", 256, 74),
    GGMLType(18, "iq3_xxs", 256, 98),
    GGMLType(19, "iq1_s", 256, 50),
    GGMLType(20, "iq4_nl", 32, 18),
    GGMLType(21, "iq3_s", 256, 110),
    GGMLType(22, "iq2_s", 256, 82),
    GGMLType(23, "iq4_xs", 256, 136),
    GGMLType(24, "i8", 1, 1, dtypes.int8),
    GGMLType(25, "i16", 1, 2, dtypes.int16),
    GGMLType(26, "i32", 1, 4, dtypes.int32),
    GGMLType(27, "i64", 1, 8, dtypes.int64),
    GGMLType(28, "f64", 1, 8, dtypes.float64),
    GGMLType(29, "iq1_m", 256, 56),
    GGMLType(30, "bf16", 1, 2, dtypes.bfloat16),
    GGMLType(34, "tq1_0", 256, 54),
    GGMLType(35, "tq2_0", 256, 66),
    GGMLType(39, "mxfp4", 32, 17),
    GGMLType(40, "nvfp4", 64, 36),
    GGMLType(41, "q1_0", 128, 18),
)}
BY_NAME: dict[str, GGMLType] = {t.name: t for t in TYPES.values()}

# One record per block; fields are views into the raw bytes (no copy).
_BLOCKS = {
    "q4_0": np.dtype([("d", "<f2"), ("qs", "u1", 16)]),
    "q4_1": np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)]),
    "q5_0": np.dtype([("d", "<f2"), ("qh", "<u4"), ("qs", "u1", 16)]),
    "q5_1": np.dtype([("d", "<f2"), ("m", "<f2"), ("qh", "<u4"), ("qs", "u1", 16)]),
    "q8_0": np.dtype([("d", "<f2"), ("qs", "i1", 32)]),
}
_BIT = np.arange(32, dtype=np.uint32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) packed bytes -> (n, 32) values 0..15 in element order."""
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """(n,) u32 -> (n, 32) values 0 or 16: bit j of qh is the 5th bit of element j."""
    return (((qh.astype(np.uint32)[:, None] >> _BIT) & 1) << 4).astype(np.uint8)


def _scale(blocks: np.ndarray, field: str) -> np.ndarray:
    return blocks[field].astype(np.float32)[:, None]      # (n, 1)


def _q4_0(b):
    q = _nibbles(b["qs"]).astype(np.int8) - np.int8(8)
    return _scale(b, "d") * q.astype(np.float32)


def _q4_1(b):
    return _scale(b, "d") * _nibbles(b["qs"]).astype(np.float32) + _scale(b, "m")


def _q5_0(b):
    q = (_nibbles(b["qs"]) | _fifth_bits(b["qh"])).astype(np.int8) - np.int8(16)
    return _scale(b, "d") * q.astype(np.float32)


def _q5_1(b):
    q = _nibbles(b["qs"]) | _fifth_bits(b["qh"])
    return _scale(b, "d") * q.astype(np.float32) + _scale(b, "m")


def _q8_0(b):
    return _scale(b, "d") * b["qs"].astype(np.float32)


_DEQUANTIZE = {"q4_0": _q4_0, "q4_1": _q4_1, "q5_0": _q5_0, "q5_1": _q5_1, "q8_0": _q8_0}
PLAIN = tuple(t.name for t in TYPES.values() if not t.quantized)
DEQUANTIZABLE = PLAIN + tuple(_DEQUANTIZE)


def can_dequantize(name: str) -> bool:
    return name in DEQUANTIZABLE


def dequantize(raw: np.ndarray, name: str) -> np.ndarray:
    """Raw bytes (uint8, whole blocks) of GGML type `name` -> flat float32 array.

    Raises KeyError for a type without a dequantizer; callers name the tensor.
    """
    kind = BY_NAME[name]
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if raw.size % kind.type_size:
        raise ValueError(f"{raw.size} bytes are not whole {name} blocks of {kind.type_size}")
    if not kind.quantized:
        values = raw.view(kind.dtype.storage.newbyteorder("<"))
        return dtypes.to_numpy_compute(values, kind.dtype).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):    # inf/nan scales: as ggml does
        return _DEQUANTIZE[name](raw.view(_BLOCKS[name])).reshape(-1)
