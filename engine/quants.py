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

K-quants pack 256 elements in a super-block of sub-blocks, each with its own scale
(and min), the sub-block scales quantized against f16 super-scales d (and dmin):

- Q2_K: 16 u8 scales (low 4 bits scale, high 4 bits min), 64 bytes of 2-bit q, f16 d,
  f16 dmin; 16 sub-blocks of 16; w = (d * sc) * q - (dmin * m)
- Q3_K: 32 bytes hmask, 64 bytes of 2-bit q, 12 bytes of 6-bit scales, f16 d; 16
  sub-blocks of 16; the hmask bit clear subtracts 4; w = (d * (sc - 32)) * q
- Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles; 8
  sub-blocks of 32; w = (d * sc) * q - (dmin * m)
- Q5_K: as Q4_K, with 32 bytes qh of 5th bits between scales and nibbles
- Q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 int8 scales, f16 d;
  16 sub-blocks of 16; w = (d * sc) * (q - 32)

K-quant bits are packed in planes (`_planes`): a run of W bytes holding b-bit fields
gives 8/b runs of W consecutive elements, lowest bits first. Q2_K/Q3_K q: two runs of
32 bytes; Q4_K/Q5_K nibbles: four runs of 32; Q6_K: low nibbles two runs of 64, high
2 bits two runs of 32; Q3_K hmask and Q5_K qh: one run of 32 (bit j of byte l belongs
to element 32 j + l). Q3_K's 16 scales: low 4 bits from the nibbles of bytes 0-7
(low halves first), high 2 bits from bytes 8-11 in 2-bit planes.

Dequantization computes in float32 with one rounding per multiply and per add, in
the order written above, so it equals ggml's reference (and gguf-py's) bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import dtypes
from .errors import SizeMismatch


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

# The record of one block per computable quantized type; fields are views into the raw bytes (no copy).
BLOCKS = {
    "q4_0": np.dtype([("d", "<f2"), ("qs", "u1", 16)]),
    "q4_1": np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)]),
    "q5_0": np.dtype([("d", "<f2"), ("qh", "<u4"), ("qs", "u1", 16)]),
    "q5_1": np.dtype([("d", "<f2"), ("m", "<f2"), ("qh", "<u4"), ("qs", "u1", 16)]),
    "q8_0": np.dtype([("d", "<f2"), ("qs", "i1", 32)]),
    "q2_k": np.dtype([("scales", "u1", 16), ("qs", "u1", 64), ("d", "<f2"), ("dmin", "<f2")]),
    "q3_k": np.dtype([("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12),
                      ("d", "<f2")]),
    "q4_k": np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qs", "u1", 128)]),
    "q5_k": np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qh", "u1", 32),
                      ("qs", "u1", 128)]),
    "q6_k": np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")]),
}
_BIT = np.arange(32, dtype=np.uint32)


def _planes(packed: np.ndarray, runs: int, bits: int) -> np.ndarray:
    """(n, runs * W) bytes -> (n, runs * 8/bits * W) values of `bits` bits in element order:
    each run of W bytes gives W elements per plane, lowest bits first."""
    n, width = packed.shape[0], packed.shape[1] // runs      # explicit: -1 is ambiguous for n == 0
    shifts = np.arange(0, 8, bits, dtype=np.uint8)[:, None]            # (8/bits, 1)
    values = packed.reshape(n, runs, 1, width) >> shifts               # (n, runs, 8/bits, W)
    return (values & np.uint8((1 << bits) - 1)).reshape(n, runs * (8 // bits) * width)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) packed bytes -> (n, 32) values 0..15 in element order."""
    return _planes(qs, 1, 4)


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


def _sub_scales(b, field: str, sub_scales: np.ndarray) -> np.ndarray:
    """f16 super-scale times the sub-block scales, rounded once: (n, subs, 1)."""
    return (_scale(b, field) * sub_scales.astype(np.float32))[:, :, None]


def _k_scales_mins(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: (n, 12) bytes -> 8 six-bit scales and 8 six-bit mins, each (n, 8).
    Bytes 0-3 hold scales 0-3, bytes 4-7 mins 0-3 (low 6 bits); scales/mins 4-7 take
    their low 4 bits from bytes 8-11 (low/high nibble) and high 2 bits from the top
    of bytes 0-3 / 4-7."""
    low, high, extra = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([low & np.uint8(63), (extra & np.uint8(15)) | (low >> 6 << 4)], axis=1)
    m = np.concatenate([high & np.uint8(63), (extra >> 4) | (high >> 6 << 4)], axis=1)
    return sc, m


def _q2_k(b):
    scales = b["scales"]                                                    # (n, 16)
    q = _planes(b["qs"], 2, 2).reshape(-1, 16, 16).astype(np.float32)     # (n, sub, 16)
    return (_sub_scales(b, "d", scales & np.uint8(15)) * q
            - _sub_scales(b, "dmin", scales >> 4))


def _q3_k(b):
    scales = b["scales"]                                                    # (n, 12)
    sc = _planes(scales[:, :8], 1, 4) | (_planes(scales[:, 8:], 1, 2) << 4)   # (n, 16) 0..63
    low = _planes(b["qs"], 2, 2).astype(np.int8)                             # 0..3
    q = low - (_planes(b["hmask"], 1, 1) ^ 1).astype(np.int8) * np.int8(4)  # clear bit: -4
    d = _sub_scales(b, "d", sc.astype(np.int8) - np.int8(32))
    return d * q.reshape(-1, 16, 16).astype(np.float32)


def _q4_k(b):
    sc, m = _k_scales_mins(b["scales"])
    q = _planes(b["qs"], 4, 4).reshape(-1, 8, 32).astype(np.float32)
    return _sub_scales(b, "d", sc) * q - _sub_scales(b, "dmin", m)


def _q5_k(b):
    sc, m = _k_scales_mins(b["scales"])
    q = (_planes(b["qs"], 4, 4) | (_planes(b["qh"], 1, 1) << 4)).reshape(-1, 8, 32)
    return _sub_scales(b, "d", sc) * q.astype(np.float32) - _sub_scales(b, "dmin", m)


def _q6_k(b):
    q = (_planes(b["ql"], 2, 4) | (_planes(b["qh"], 2, 2) << 4)).astype(np.int8) - np.int8(32)
    return _sub_scales(b, "d", b["scales"]) * q.reshape(-1, 16, 16).astype(np.float32)


_DEQUANTIZE = {"q4_0": _q4_0, "q4_1": _q4_1, "q5_0": _q5_0, "q5_1": _q5_1, "q8_0": _q8_0,
               "q2_k": _q2_k, "q3_k": _q3_k, "q4_k": _q4_k, "q5_k": _q5_k, "q6_k": _q6_k}
PLAIN = tuple(t.name for t in TYPES.values() if not t.quantized)
DEQUANTIZABLE = PLAIN + tuple(_DEQUANTIZE)


def can_dequantize(name: str) -> bool:
    return name in DEQUANTIZABLE


def dequantize(raw: np.ndarray, name: str) -> np.ndarray:
    """Raw bytes (uint8, whole blocks) of GGML type `name` -> flat float32 array.

    Raises KeyError for a type without a dequantizer and SizeMismatch (a WeightsError)
    for a byte count that is not whole blocks; callers name the tensor.
    """
    kind = BY_NAME[name]
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    if raw.size % kind.type_size:
        raise SizeMismatch(f"{raw.size} bytes are not whole {name} blocks of "
                           f"{kind.type_size} bytes ({kind.block_size} elements each)")
    if not kind.quantized:
        values = raw.view(kind.dtype.storage.newbyteorder("<"))
        return dtypes.to_numpy_compute(values, kind.dtype).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):    # inf/nan scales: as ggml does
        return _DEQUANTIZE[name](raw.view(BLOCKS[name])).reshape(-1)
