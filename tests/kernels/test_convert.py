"""Half-type conversions, bit-exact: float16 -> float32 against NumPy for all 65536 patterns,
bfloat16 <-> float32 against engine.dtypes (round to nearest even, NaN kept)."""
import numpy as np
import pytest

from engine import dtypes
from engine.backends.simd import kernels as K

ALL_BITS = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def test_f16_to_f32_every_pattern():
    halves = ALL_BITS.view(np.float16)
    np.testing.assert_array_equal(K.f16_to_f32(halves).view(np.uint32), halves.astype(np.float32).view(np.uint32))


def test_bf16_to_f32_every_pattern():
    np.testing.assert_array_equal(K.bf16_to_f32(ALL_BITS).view(np.uint32),
                                  dtypes.bf16_bits_to_f32(ALL_BITS).view(np.uint32))


def test_f32_to_bf16(rng):
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x00000001,
                        0x007FFFFF, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x7F7F8000, 0x00008000],
                       np.uint32)
    bits = np.concatenate([special, rng.integers(0, 1 << 32, 200_001, dtype=np.uint64).astype(np.uint32)])
    values = bits.view(np.float32)
    np.testing.assert_array_equal(K.f32_to_bf16(values), dtypes.f32_to_bf16_bits(values))


@pytest.mark.parametrize("count", [0, 1, 3, 5, 8, 13])
def test_ragged_lengths_and_views(count):
    halves = ALL_BITS[1000:1000 + 2 * count:2].view(np.float16)         # strided: copied first
    np.testing.assert_array_equal(K.f16_to_f32(halves), halves.astype(np.float32))
    floats = np.linspace(-3, 3, count, dtype=np.float32)
    np.testing.assert_array_equal(K.f32_to_bf16(floats), dtypes.f32_to_bf16_bits(floats))
    np.testing.assert_array_equal(K.bf16_to_f32(dtypes.f32_to_bf16_bits(floats)),
                                  dtypes.bf16_bits_to_f32(dtypes.f32_to_bf16_bits(floats)))
