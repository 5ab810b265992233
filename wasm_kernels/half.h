/* float16 -> float32, shared by the conversions (convert.c) and the GEMM's float16 weights
 * (gemm.c): every path gives NumPy's float16 cast bit for bit. */
#ifndef ENGINE_KERNELS_HALF_H
#define ENGINE_KERNELS_HALF_H

#include "common.h"

typedef uint32_t v4u __attribute__((vector_size(16)));
typedef int16_t v8h __attribute__((vector_size(16)));
typedef int16_t v8h_u __attribute__((vector_size(16), aligned(2), may_alias));

/* float16 bits -> float32: normal numbers rebias the exponent, subnormals are
 * mantissa * 2^-24 (exact in float32), infinities and NaN keep their payload. */
static inline v4u half_to_float_bits(v4u h) {
    v4u sign = (h & 0x8000u) << 16, exponent = h & 0x7c00u, mantissa = h & 0x03ffu;
    v4u normal = ((h & 0x7fffu) + 0x1c000u) << 13;
    v4u special = 0x7f800000u | (mantissa << 13);
    v4u subnormal = (v4u)(__builtin_convertvector((v4i)mantissa, v4f) * splat(5.9604644775390625e-8f));
    v4u is_zero_exp = (v4u)(exponent == 0u), is_max_exp = (v4u)(exponent == 0x7c00u);
    v4u bits = (subnormal & is_zero_exp) | (special & is_max_exp) | (normal & ~(is_zero_exp | is_max_exp));
    return bits | sign;
}

static inline float half_to_float(uint16_t h) {
    v4u v = {h, 0, 0, 0};
    return ((v4f)half_to_float_bits(v))[0];
}

static inline v8h load8h(const uint16_t *p) { return *(const v8h_u *)p; }

/* lanes of 8 halves that hold a normal number (all ones) or a zero, subnormal, infinity or
 * NaN (zero): exponent 0 or 31. With e the exponent bits, e + 0x400 is 0x400 or 0x8000
 * (negative) for those, 0x800..0x7c00 otherwise: one signed comparison marks the normal ones. */
static inline v8h normal_lanes8(v8h h) {
    typedef uint16_t v8uh __attribute__((vector_size(16)));
    v8uh e = ((v8uh)h & (uint16_t)0x7c00) + (uint16_t)0x400;   /* unsigned: the wrap is defined */
    return (v8h)e > (int16_t)0x400;
}

/* e + 0x400 of normal_lanes8 for 4 blocks of 8 halves, their lanewise minimum: above 0x400 in
 * every lane when all 32 halves are normal (any_special32) */
static inline v8h min8(v8h a, v8h b) {
#if defined(__clang__)
    return __builtin_elementwise_min(a, b);
#elif defined(__SSE2__)
    return __builtin_ia32_pminsw128(a, b);
#else
    v8h less = a < b;
    return (a & less) | (b & ~less);
#endif
}

static inline v8h biased_exponent8(v8h h) {
    typedef uint16_t v8uh __attribute__((vector_size(16)));
    return (v8h)(((v8uh)h & (uint16_t)0x7c00) + (uint16_t)0x400);
}

/* some lane of a normal_lanes8 mask (or of several, and-ed) is zero */
static inline int any_zero_lane8(v8h normal) {
#if defined(__wasm_simd128__)
    return __builtin_wasm_bitmask_i8x16((__attribute__((vector_size(16))) signed char)normal) != 0xffff;
#elif defined(__SSE2__)
    return __builtin_ia32_pmovmskb128((__attribute__((vector_size(16))) char)normal) != 0xffff;
#else
    typedef int64_t v2l __attribute__((vector_size(16)));
    v2l s = (v2l)normal;
    return (s[0] & s[1]) != -1;
#endif
}

static inline v8h min_biased_exponent32(v8h h0, v8h h1, v8h h2, v8h h3) {
    return min8(min8(biased_exponent8(h0), biased_exponent8(h1)), min8(biased_exponent8(h2), biased_exponent8(h3)));
}

/* some of the 4 x 8 halves is zero, subnormal, infinite or NaN: one comparison for the 4 */
static inline int any_special32(v8h h0, v8h h1, v8h h2, v8h h3) {
    return any_zero_lane8(min_biased_exponent32(h0, h1, h2, h3) > (int16_t)0x400);
}

/* some of the 8 halves is zero, subnormal, infinite or NaN */
static inline int any_special8(v8h h) { return any_zero_lane8(normal_lanes8(h)); }

static inline v8h max8(v8h a, v8h b) {
#if defined(__clang__)
    return __builtin_elementwise_max(a, b);
#elif defined(__SSE2__)
    return __builtin_ia32_pmaxsw128(a, b);
#else
    v8h more = a > b;
    return (a & more) | (b & ~more);
#endif
}

/* 4 normal halves, each in the top 16 bits of a lane -> float32, integers only: an arithmetic
 * shift by 3 puts the mantissa and exponent in place (sign copies below bit 31 masked off),
 * then the exponent is rebiased by 127 - 15. */
static inline v4f normal4(v8h high_halves) {
    v4i x = (v4i)high_halves >> 3;
    return (v4f)((x & (int32_t)0x8fffe000) + 0x38000000);
}

/* 8 halves -> two float32 vectors; exact for every input (a branch to the general path
 * when any is not a normal number) */
static inline __attribute__((always_inline)) void widen8(v8h h, v4f *lo, v4f *hi) {
    v8h zero = {0, 0, 0, 0, 0, 0, 0, 0};
    if (__builtin_expect(!any_special8(h), 1)) {       /* interleaved with zeros: each half << 16 */
        *lo = normal4(__builtin_shufflevector(zero, h, 0, 8, 1, 9, 2, 10, 3, 11));
        *hi = normal4(__builtin_shufflevector(zero, h, 4, 12, 5, 13, 6, 14, 7, 15));
    } else {
        *lo = (v4f)half_to_float_bits((v4u)__builtin_shufflevector(h, zero, 0, 8, 1, 9, 2, 10, 3, 11));
        *hi = (v4f)half_to_float_bits((v4u)__builtin_shufflevector(h, zero, 4, 12, 5, 13, 6, 14, 7, 15));
    }
}

/* 8 normal halves (or zeros) -> two float32 vectors holding each value times 2^-112, integers
 * only: the half's magnitude shifted left by 13 is a float32 with exponent e (not e + 112), so
 * the rebias is left to the other operand (pre-multiplied by 2^112). Built in 16-bit lanes: the
 * low words take the mantissa's low 3 bits (h << 13), the high words sign | 000 | exponent |
 * mantissa's top 7 (h >> 3 arithmetic, the sign copies masked); one interleave per 4 values. */
static inline __attribute__((always_inline)) void widen8_scaled(v8h h, v4f *lo, v4f *hi) {
    typedef uint16_t v8uh __attribute__((vector_size(16)));
    v8h low = (v8h)((v8uh)h << 13), high = (h >> 3) & (int16_t)0x8fff;
    *lo = (v4f)__builtin_shufflevector(low, high, 0, 8, 1, 9, 2, 10, 3, 11);
    *hi = (v4f)__builtin_shufflevector(low, high, 4, 12, 5, 13, 6, 14, 7, 15);
}

/* h in the lanes where mask (a comparison's result) is all ones, 0 in the others: h & mask,
 * written for clang as an unsigned minimum, since it turns the `and` with a comparison into a
 * bitselect (3 instructions in V8 on x64, the minimum 1) */
static inline v8h keep_lanes8(v8h h, v8h mask) {
#if defined(__clang__)
    typedef uint16_t v8uh __attribute__((vector_size(16)));
    return (v8h)__builtin_elementwise_min((v8uh)h, (v8uh)mask);
#else
    return h & mask;
#endif
}

/* The zero and subnormal lanes of 8 halves exactly (sign * mantissa * 2^-24, from the integer
 * mantissa: no float32 denormal on the way), 0 in the others; lanes holding inf or NaN are
 * marked in *inf_nan (all ones). */
static inline __attribute__((always_inline)) void subnormal8(v8h h, v4f *lo, v4f *hi, v8h *inf_nan) {
    v8h e = h & (int16_t)0x7c00, s = h >> 15;
    *inf_nan |= e == (int16_t)0x7c00;
    v8h m = keep_lanes8(h & (int16_t)0x3ff, e == (int16_t)0);
    v8h v = (m ^ s) - s;                                          /* -m where the sign is set */
    *lo = __builtin_convertvector(__builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), v4i), v4f)
          * splat(5.9604644775390625e-8f);
    *hi = __builtin_convertvector(__builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), v4i), v4f)
          * splat(5.9604644775390625e-8f);
}

/* `count` (< 8) halves -> two float32 vectors, zeros past count */
static inline void widen_tail(const uint16_t *p, size_t count, v4f *lo, v4f *hi) {
    v4u u = {0, 0, 0, 0}, w = {0, 0, 0, 0};
    for (size_t i = 0; i < count && i < 4; ++i) u[i] = p[i];
    for (size_t i = 4; i < count; ++i) w[i - 4] = p[i];
    *lo = (v4f)half_to_float_bits(u);
    *hi = (v4f)half_to_float_bits(w);
}

#endif
