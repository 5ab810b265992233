/* Data movement: half-type conversions, bit-exact with NumPy (float16) and engine.dtypes
 * (bfloat16); rows written in place (index_copy_f32, a KV cache); and the library's identity
 * (ABI version, build features). */
#include "exports.h"
#include "half.h"

static inline v4u widen4(const uint16_t *p, size_t count) {
    v4u v = {0, 0, 0, 0};
    for (size_t i = 0; i < count && i < 4; ++i) v[i] = p[i];
    return v;
}

static inline void narrow4(uint16_t *p, v4u v, size_t count) {
    for (size_t i = 0; i < count && i < 4; ++i) p[i] = (uint16_t)v[i];
}

static inline void store_bits(float *p, v4u bits, size_t count) {
    v4f v = (v4f)bits;
    if (count >= 4) {
        store4(p, v);
        return;
    }
    for (size_t i = 0; i < count; ++i) p[i] = v[i];
}

EXPORT void f16_to_f32(size_t count, const uint16_t *src, float *dst) {
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        v4f lo, hi;
        widen8(load8h(src + i), &lo, &hi);
        store4(dst + i, lo);
        store4(dst + i + 4, hi);
    }
    for (; i < count; i += 4) {
        size_t n = count - i < 4 ? count - i : 4;
        store_bits(dst + i, half_to_float_bits(widen4(src + i, n)), n);
    }
}

EXPORT void bf16_to_f32(size_t count, const uint16_t *src, float *dst) {
    for (size_t i = 0; i < count; i += 4) {
        size_t n = count - i < 4 ? count - i : 4;
        store_bits(dst + i, widen4(src + i, n) << 16, n);
    }
}

/* round to nearest even; NaN stays NaN (quiet bit set), as engine.dtypes.f32_to_bf16_bits */
EXPORT void f32_to_bf16(size_t count, const float *src, uint16_t *dst) {
    for (size_t i = 0; i < count; i += 4) {
        size_t n = count - i < 4 ? count - i : 4;
        v4u u = (v4u)gather4(src + i, 1, n);
        v4u rounded = (u + (0x7fffu + ((u >> 16) & 1u))) >> 16;
        v4u nan = (v4u)((u & 0x7fffffffu) > 0x7f800000u);
        narrow4(dst + i, (((u >> 16) | 0x40u) & nan) | (rounded & ~nan), n);
    }
}

/* ENGINE_KERNELS_ABI: the Python side checks it before using any other export */
EXPORT int engine_kernels_abi(void) { return ENGINE_KERNELS_ABI; }

/* bit 0: WebAssembly build, bit 1: SIMD128, bit 2: relaxed SIMD (fused multiply-add) */
EXPORT int engine_kernels_features(void) {
    int features = 0;
#ifdef __wasm__
    features |= 1;
#endif
#ifdef __wasm_simd128__
    features |= 2;
#endif
#ifdef __wasm_relaxed_simd__
    features |= 4;
#endif
    return features;
}

/* dest[o][index[i]][:] = source[o][i][:] (engine.ops INDEX_COPY): dest (outer, n, inner) with
 * blocks d_outer and rows d_row elements apart, source (outer, count, inner) likewise, inner
 * elements contiguous in both. Every index is checked first: returns 0, or i + 1 for the first
 * index outside [0, n) (then nothing is written). */
EXPORT size_t index_copy_f32(size_t outer, size_t n, size_t inner, float *dest, ptrdiff_t d_outer, ptrdiff_t d_row,
                             const int64_t *index, size_t count, const float *source, ptrdiff_t s_outer,
                             ptrdiff_t s_row) {
    for (size_t i = 0; i < count; ++i)
        if (index[i] < 0 || (uint64_t)index[i] >= n) return i + 1;
    for (size_t o = 0; o < outer; ++o)
        for (size_t i = 0; i < count; ++i) {
            float *to = dest + (ptrdiff_t)o * d_outer + (ptrdiff_t)index[i] * d_row;
            const float *from = source + (ptrdiff_t)o * s_outer + (ptrdiff_t)i * s_row;
            size_t j = 0;
            for (; j + 4 <= inner; j += 4) store4(to + j, load4(from + j));
            for (; j < inner; ++j) to[j] = from[j];
        }
    return 0;
}
