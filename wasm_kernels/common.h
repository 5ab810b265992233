/* Shared by every kernel: 4-lane float vectors, unaligned loads, exp, the normal CDF
 * and the activation epilogue.
 *
 * GCC/Clang vector extensions compile to WebAssembly SIMD128 with clang --target=wasm32
 * and to SSE natively, so the same source serves both builds. No static data, no libc:
 * constants are immediates and everything here is `static inline`.
 */
#ifndef ENGINE_KERNELS_COMMON_H
#define ENGINE_KERNELS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

/* Bumped whenever an exported signature or its meaning changes; the Python side refuses a
 * library built from other sources. */
#define ENGINE_KERNELS_ABI 9

enum activation { ACT_NONE = 0, ACT_RELU = 1, ACT_RELU6 = 2, ACT_GELU = 3, ACT_GELU_TANH = 4, ACT_SILU = 5,
                  ACT_HARDSWISH = 6 };

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
/* NumPy memory may be only 4- or 8-byte aligned: every vector access goes through these. */
typedef float v4f_u __attribute__((vector_size(16), aligned(4), may_alias));

static inline v4f load4(const float *p) { return *(const v4f_u *)p; }
static inline void store4(float *p, v4f v) { *(v4f_u *)p = v; }
static inline v4f splat(float x) { return (v4f){x, x, x, x}; }

/* a * b + c; fused (one rounding, platform-dependent) in the relaxed-SIMD build and natively on
 * x86 with FMA (the native library is built for the machine that runs it: build.py) */
static inline v4f madd(v4f a, v4f b, v4f c) {
#ifdef __wasm_relaxed_simd__
    return __builtin_wasm_relaxed_madd_f32x4(a, b, c);
#elif defined(__FMA__) && (defined(__x86_64__) || defined(__i386__))
    return __builtin_ia32_vfmaddps(a, b, c);
#else
    return a * b + c;
#endif
}

/* lanes of `a` where mask is all-ones, else lanes of `b` (C has no vector ?:) */
static inline v4f select4(v4i mask, v4f a, v4f b) { return (v4f)(((v4i)a & mask) | ((v4i)b & ~mask)); }

/* comparisons with NaN are false, so these keep NaN as np.maximum/np.minimum do */
static inline v4f max4(v4f x, v4f lo) { return select4(x < lo, lo, x); }
static inline v4f min4(v4f x, v4f hi) { return select4(x > hi, hi, x); }
/* the larger lanes; NaN in b is dropped (the softmaxes take it through their exp anyway) */
static inline v4f vmax(v4f a, v4f b) { return select4(b > a, b, a); }

/* every lane of the comparison result `mask` is true */
static inline int all4(v4i mask) {
#ifdef __wasm_simd128__
    return __builtin_wasm_all_true_i32x4(mask);
#else
    return (mask[0] & mask[1] & mask[2] & mask[3]) != 0;
#endif
}

static inline float hsum4(v4f v) { return (v[0] + v[2]) + (v[1] + v[3]); }
static inline float hmax4(v4f v) {
    float a = v[0] > v[1] ? v[0] : v[1], b = v[2] > v[3] ? v[2] : v[3];
    return a > b ? a : b;
}

/* 4x4 transpose of rows r0..r3 */
#define TRANSPOSE4(r0, r1, r2, r3)                                         \
    do {                                                                   \
        v4f t0_ = __builtin_shufflevector(r0, r1, 0, 4, 1, 5);             \
        v4f t1_ = __builtin_shufflevector(r0, r1, 2, 6, 3, 7);             \
        v4f t2_ = __builtin_shufflevector(r2, r3, 0, 4, 1, 5);             \
        v4f t3_ = __builtin_shufflevector(r2, r3, 2, 6, 3, 7);             \
        r0 = __builtin_shufflevector(t0_, t2_, 0, 1, 4, 5);                \
        r1 = __builtin_shufflevector(t0_, t2_, 2, 3, 6, 7);                \
        r2 = __builtin_shufflevector(t1_, t3_, 0, 1, 4, 5);                \
        r3 = __builtin_shufflevector(t1_, t3_, 2, 3, 6, 7);                \
    } while (0)

/* 4 elements `stride` apart; lanes at or past `count` are 0 */
static inline v4f gather4(const float *p, ptrdiff_t stride, size_t count) {
    if (count >= 4 && stride == 1) return load4(p);
    v4f v = splat(0.0f);
    for (size_t i = 0; i < count && i < 4; ++i) v[i] = p[(ptrdiff_t)i * stride];
    return v;
}

/* exp(x): x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), Taylor to r^7
 * (truncation 5e-9 relative), then 2^n applied in two halves so that n from -150 to 128
 * gives subnormals and infinity like expf. NaN stays NaN. */
static inline v4f exp4(v4f x) {
    x = max4(min4(x, splat(89.0f)), splat(-104.0f));
    v4f t = x * splat(1.44269504088896341f) + splat(12582912.0f);      /* 1.5 * 2^23: rounds */
    v4i n = (v4i)t - (v4i)splat(12582912.0f);
    v4f nf = t - splat(12582912.0f);
    v4f r = x - nf * splat(0.693359375f) - nf * splat(-2.12194440e-4f);
    v4f p = splat(1.0f / 5040.0f);
    p = madd(p, r, splat(1.0f / 720.0f));
    p = madd(p, r, splat(1.0f / 120.0f));
    p = madd(p, r, splat(1.0f / 24.0f));
    p = madd(p, r, splat(1.0f / 6.0f));
    p = madd(p, r, splat(0.5f));
    p = madd(p, r, splat(1.0f));
    p = madd(p, r, splat(1.0f));
    v4i half = n >> 1;
    v4f s1 = (v4f)((half + 127) << 23), s2 = (v4f)((n - half + 127) << 23);
    return p * s1 * s2;
}

/* The normal CDF Phi(z) = (1 + erf(z / sqrt 2)) / 2, accurate in both tails: with
 * a = |z| / sqrt 2, erf(a) = a P(a^2) below 1 and erfc(a) = exp(-a^2) Q(1/a) above
 * (0 past a = 10); Phi(z) = (1 + erf(a)) / 2 for z >= 0 and erfc(a) / 2 for z < 0, with no cancellation.
 * When every lane is below 1 (most activations: |z| < 1.41) the erfc branch is skipped.
 * Coefficients: wasm_kernels/fit_erf.py. */
static inline v4f phi4(v4f z) {
    v4f a = select4(z < splat(0.0f), -z, z) * splat(0.70710678118654752f);
    v4f a2 = a * a;
    v4f p = splat(7.933422359e-05f);
    p = madd(p, a2, splat(-8.034827961e-04f));
    p = madd(p, a2, splat(5.191216604e-03f));
    p = madd(p, a2, splat(-2.685539872e-02f));
    p = madd(p, a2, splat(1.128362571e-01f));
    p = madd(p, a2, splat(-3.761262988e-01f));
    p = madd(p, a2, splat(1.128379167e+00f));
    v4f erf_small = a * p;
    v4i small = a < splat(1.0f);
    if (all4(small))
        return select4(z < splat(0.0f), splat(1.0f) - erf_small, splat(1.0f) + erf_small) * splat(0.5f);
    v4f ac = min4(max4(a, splat(1.0f)), splat(10.0f));
    v4f u = splat(1.0f) / ac;
    v4f q = splat(-5.013316122e-02f);
    q = madd(q, u, splat(3.383482159e-01f));
    q = madd(q, u, splat(-1.011116338e+00f));
    q = madd(q, u, splat(1.739665197e+00f));
    q = madd(q, u, splat(-1.841886176e+00f));
    q = madd(q, u, splat(1.112992651e+00f));
    q = madd(q, u, splat(-1.660181265e-01f));
    q = madd(q, u, splat(-2.560262520e-01f));
    q = madd(q, u, splat(-2.572613168e-03f));
    q = madd(q, u, splat(5.643336488e-01f));
    q = madd(q, u, splat(-3.471123688e-06f));
    v4f erfc_large = select4(a > splat(10.0f), splat(0.0f), exp4(-(ac * ac)) * q);   /* erfc(10) = 2e-45 */
    v4f erfc = select4(small, splat(1.0f) - erf_small, erfc_large);
    v4f erf = select4(small, erf_small, splat(1.0f) - erfc_large);
    v4f phi = select4(z < splat(0.0f), erfc, splat(1.0f) + erf) * splat(0.5f);
    return select4(z != z, z, phi);                                 /* NaN in, NaN out */
}

static inline v4f sigmoid4(v4f x) { return splat(1.0f) / (splat(1.0f) + exp4(-x)); }

/* y with its subnormal lanes (|y| < 2^-126) set to +0. A subnormal operand costs x86 ~50-100x
 * per multiply and WebAssembly cannot set flush-to-zero, so values that later kernels read many
 * times (GELU's outputs into the next GEMM, attention's exponentials into P V) are flushed where
 * they are made: Whisper's deeper encoder layers give ~5% subnormal GELU outputs, which made its
 * GEMMs 2x slower. The change is below 2^-126, far under float32 rounding of any sum they join. */
static inline v4f flush4(v4f y) {
    v4i bits = (v4i)y;
    v4i exponent = (v4i){0x7f800000, 0x7f800000, 0x7f800000, 0x7f800000}, zero = {0, 0, 0, 0};
    v4i tiny = (bits & exponent) == zero;
    return (v4f)(bits & ~tiny);
}

/* The activation epilogue, NaN-propagating like the engine's composites. */
static inline v4f activate4(v4f x, int act) {
    switch (act) {
    case ACT_RELU: return max4(x, splat(0.0f));
    case ACT_RELU6: return min4(max4(x, splat(0.0f)), splat(6.0f));
    case ACT_GELU: return flush4(x * phi4(x));
    case ACT_GELU_TANH: {                  /* x (1 + tanh u) / 2 == x sigmoid(2u) */
        v4f u = (x + splat(0.044715f) * x * x * x) * splat(1.59576912160573071f);   /* 2 sqrt(2/pi) */
        return x * sigmoid4(u);
    }
    case ACT_SILU: return x * sigmoid4(x);
    case ACT_HARDSWISH:                    /* x relu6(x + 3) / 6, divided as torch does */
        return x * min4(max4(x + splat(3.0f), splat(0.0f)), splat(6.0f)) / splat(6.0f);
    default: return x;
    }
}

static inline float activate1(float x, int act) { return act ? activate4(splat(x), act)[0] : x; }

static inline v4f relu4(v4f x) { return activate4(x, ACT_RELU); }
static inline v4f relu64(v4f x) { return activate4(x, ACT_RELU6); }
static inline v4f gelu4(v4f x) { return activate4(x, ACT_GELU); }
static inline v4f gelu_tanh4(v4f x) { return activate4(x, ACT_GELU_TANH); }
static inline v4f silu4(v4f x) { return activate4(x, ACT_SILU); }
static inline v4f hardswish4(v4f x) { return activate4(x, ACT_HARDSWISH); }

#define ACTIVATE_SPAN(fn)                                                                      \
    do {                                                                                       \
        size_t i_ = 0;                                                                         \
        for (; i_ + 4 <= count; i_ += 4) store4(y + i_, fn(load4(x + i_)));                    \
        if (i_ < count) {                                                                      \
            v4f t_ = fn(gather4(x + i_, 1, count - i_));                                       \
            for (size_t l_ = 0; i_ + l_ < count; ++l_) y[i_ + l_] = t_[l_];                    \
        }                                                                                      \
    } while (0)

/* y[i] = act(x[i]) over count contiguous elements (y may be x), one loop per activation (the
 * choice made once, not per vector): activation_f32, and the GEMM's GELU/SiLU epilogue on each
 * finished block of C. Not inline: inlined into the GEMM it would cost the tile loop registers. */
static __attribute__((noinline, unused)) void activate_span(size_t count, const float *x, int act, float *y) {
    switch (act) {
    case ACT_RELU: ACTIVATE_SPAN(relu4); break;
    case ACT_RELU6: ACTIVATE_SPAN(relu64); break;
    case ACT_GELU: ACTIVATE_SPAN(gelu4); break;
    case ACT_GELU_TANH: ACTIVATE_SPAN(gelu_tanh4); break;
    case ACT_SILU: ACTIVATE_SPAN(silu4); break;
    case ACT_HARDSWISH: ACTIVATE_SPAN(hardswish4); break;
    default:
        if (y != x)
            for (size_t i = 0; i < count; ++i) y[i] = x[i];
    }
}

#endif
