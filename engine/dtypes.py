"""Data types: storage types for weights, float32 (and float64) for compute.

float16 and bfloat16 are storage types: every compute op upcasts them to float32
first. NumPy has no bfloat16, so its storage is uint16 holding the top half of a
float32 bit pattern.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str            # torch name: "float32"
    itemsize: int        # bytes per element
    kind: str            # "f" float, "i" signed int, "u" unsigned int, "b" bool
    storage: np.dtype    # NumPy dtype of the raw storage (bfloat16 -> uint16)
    safetensors: str     # safetensors dtype code: "F32"
    rank: int            # promotion order within a kind
    # The type arithmetic runs in: half types widen to float32. Every op reads it, so it is set
    # once below rather than computed per call.
    compute: "DType" = field(init=False, repr=False, compare=False)

    @property
    def is_floating_point(self) -> bool:
        return self.kind == "f"

    def __hash__(self) -> int:          # dtypes key the kernels' dicts: hash the name, not every field
        return hash(self.name)

    def __repr__(self) -> str:
        return f"engine.{self.name}"


bool_ = DType("bool", 1, "b", np.dtype(np.bool_), "BOOL", 0)
uint8 = DType("uint8", 1, "u", np.dtype(np.uint8), "U8", 1)
int8 = DType("int8", 1, "i", np.dtype(np.int8), "I8", 1)
int16 = DType("int16", 2, "i", np.dtype(np.int16), "I16", 2)
int32 = DType("int32", 4, "i", np.dtype(np.int32), "I32", 3)
int64 = DType("int64", 8, "i", np.dtype(np.int64), "I64", 4)
float16 = DType("float16", 2, "f", np.dtype(np.float16), "F16", 1)
bfloat16 = DType("bfloat16", 2, "f", np.dtype(np.uint16), "BF16", 1)
float32 = DType("float32", 4, "f", np.dtype(np.float32), "F32", 2)
float64 = DType("float64", 8, "f", np.dtype(np.float64), "F64", 3)

ALL = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)
for _dtype in ALL:
    object.__setattr__(_dtype, "compute", float32 if _dtype.kind == "f" and _dtype.itemsize == 2 else _dtype)
del _dtype
BY_NAME = {d.name: d for d in ALL} | {"bool_": bool_, "half": float16, "float": float32,
                                      "double": float64, "long": int64, "int": int32}
BY_SAFETENSORS = {d.safetensors: d for d in ALL}
_BY_NUMPY = {d.storage: d for d in ALL if d is not bfloat16}


def as_dtype(d) -> DType:
    """Accept an engine dtype, its name, or a NumPy dtype."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str) and d in BY_NAME:
        return BY_NAME[d]
    try:
        npd = np.dtype(d)
    except TypeError:
        npd = None
    if npd is not None and npd in _BY_NUMPY:
        return _BY_NUMPY[npd]
    raise TypeError(f"unsupported dtype {d!r}; supported: {', '.join(x.name for x in ALL)}")


def from_numpy_dtype(npd: np.dtype) -> DType:
    return as_dtype(npd)


def promote_types(a: DType, b: DType) -> DType:
    """torch's promotion for two tensors: bool < integers < floats, wider wins."""
    if a is b:
        return a
    order = {"b": 0, "u": 1, "i": 1, "f": 2}
    if order[a.kind] != order[b.kind]:
        return a if order[a.kind] > order[b.kind] else b
    if a.kind == "f":
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.rank > b.rank else b
    if {a.kind, b.kind} == {"u", "i"}:     # uint8 with a signed type
        signed = a if a.kind == "i" else b
        return int16 if signed is int8 else signed
    return a if a.rank > b.rank else b


def result_type_scalar(t: DType, value) -> DType:
    """Type of `tensor op python_scalar`: the scalar only matters across kinds."""
    if isinstance(value, bool):
        return t
    if isinstance(value, int):
        return int64 if t is bool_ else t
    if isinstance(value, float):
        return t if t.is_floating_point else float32
    raise TypeError(f"unsupported scalar {value!r}")


# --- bfloat16 bit conversions (NumPy has no bfloat16 type) ---------------------

def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round to nearest even, as torch does; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def to_numpy_compute(raw: np.ndarray, dtype: DType) -> np.ndarray:
    """Storage array -> NumPy array in a type NumPy can compute with."""
    return bf16_bits_to_f32(raw) if dtype is bfloat16 else raw


def cast_numpy(a: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """Convert a storage array of type src into storage of type dst."""
    if src is dst:
        return a
    if src is bfloat16:
        a = bf16_bits_to_f32(a)
    if dst is bfloat16:
        return f32_to_bf16_bits(a.astype(np.float32))
    if dst is bool_:
        return a != 0
    return a.astype(dst.storage)
