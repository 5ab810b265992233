/* Internal interface of the quantized kernels (quant.c drives, quant_small.c and quant_k.c
 * know the GGML block layouts; engine/quants.py documents them). Not exported.
 *
 * The products run in integers, as llama.cpp's do: each row of x is quantized per 32
 * elements to 14-bit integers in int16 with one float scale dx (x ~ dx * q, |q| <= QMAX),
 * every weight block is unpacked to small integers (unsigned, 0..63, except Q8_0's signed
 * bytes), and each group of 4 blocks of 32 gives 4 exact int32 dot products (i32x4.dot_i16x8_s,
 * pmaddwd natively), which the block scales turn into float32 at once (one f32x4 multiply-add
 * per 128 weights). wasm_kernels/README.md has the whole story.
 */
#ifndef ENGINE_KERNELS_QUANT_H
#define ENGINE_KERNELS_QUANT_H

/* The dequantizers (embedding_q_f32) must round after every multiply and add, as NumPy does:
 * no contraction into fused multiply-adds where the target has them (clang contracts within an
 * expression by default, GCC across statements). Baseline x86-64 and WebAssembly have no FMA
 * (the relaxed build's is only ever asked for explicitly, with madd), so there this changes nothing. */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__) && defined(__FP_FAST_FMAF)
#pragma GCC optimize("fp-contract=off")
#endif

#include "common.h"

/* GGML type ids (engine.quants.TYPES) */
enum { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14 };

typedef int8_t v16i8 __attribute__((vector_size(16)));
typedef int16_t v8i16 __attribute__((vector_size(16)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef int8_t v4i8 __attribute__((vector_size(4)));
typedef uint8_t v4u8 __attribute__((vector_size(4)));
typedef int8_t v16i8_u __attribute__((vector_size(16), aligned(1), may_alias));
typedef int16_t v8i16_u __attribute__((vector_size(16), aligned(1), may_alias));
typedef int32_t v4i_u __attribute__((vector_size(16), aligned(1), may_alias));
typedef uint16_t u16_u __attribute__((aligned(1), may_alias));
typedef uint32_t u32_u __attribute__((aligned(1), may_alias));

/* GGML blocks are packed (Q8_0's are 34 bytes): every access is unaligned */
static inline v16i8 load_i8x16(const void *p) { return *(const v16i8_u *)p; }
static inline v8i16 load_i16x8(const void *p) { return *(const v8i16_u *)p; }
static inline v4i load_i32x4(const void *p) { return *(const v4i_u *)p; }
static inline uint32_t load_u16(const uint8_t *p) { return *(const u16_u *)p; }
static inline uint32_t load_u32(const uint8_t *p) { return *(const u32_u *)p; }

static inline v16i8 splat8(int v) { return (v16i8){v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v}; }
static inline v4i splati(int v) { return (v4i){v, v, v, v}; }

/* the bytes of v shifted right by s (as 16-bit lanes: callers mask off what crossed over) */
static inline v16i8 shr_bytes(v16i8 v, int s) { return (v16i8)((v8u16)v >> s); }
static inline v16i8 shl_bytes(v16i8 v, int s) { return (v16i8)((v8u16)v << s); }
/* bit `bit` of each byte, moved to bit `to` (0 or 1 << to) */
static inline v16i8 bit_of_bytes(v16i8 v, int bit, int to) {
    return shl_bytes(shr_bytes(v, bit) & splat8(1), to);
}

/* float16 bits (low 16 bits of each lane) -> float32, exact: the magnitude bits shifted into
 * place times 2^112 (subnormals included), infinities and NaN (payload kept) rebuilt */
static inline v4f half4(v4u h) {
    v4u magnitude = (h & 0x7fffu) << 13;
    v4f value = (v4f)magnitude * splat(0x1p112f);
    value = select4((v4i)((h & 0x7c00u) == 0x7c00u), (v4f)(magnitude | 0x7f800000u), value);
    return (v4f)((v4u)value | ((h & 0x8000u) << 16));
}
static inline float half1(const uint8_t *p) { return half4((v4u){load_u16(p), 0, 0, 0})[0]; }

/* four int32 vectors -> their four horizontal sums */
static inline v4i hadd4(v4i a, v4i b) {
    return __builtin_shufflevector(a, b, 0, 2, 4, 6) + __builtin_shufflevector(a, b, 1, 3, 5, 7);
}

/* bytes 0..3 of a word as four int32 (signed or not) */
static inline v4i bytes_u(uint32_t w) { return __builtin_convertvector((v4u8){w, w >> 8, w >> 16, w >> 24}, v4i); }
static inline v4i bytes_s(const uint8_t *p) { return (v4i){(int8_t)p[0], (int8_t)p[1], (int8_t)p[2], (int8_t)p[3]}; }

/* 16 int8 -> 16 float32 (exact) */
static inline void bytes_to_f32(v16i8 q, v4f out[4]) {
#ifdef __wasm_simd128__                      /* extend_low/high: one instruction each */
    v8i16 lo = __builtin_convertvector(__builtin_shufflevector(q, q, 0, 1, 2, 3, 4, 5, 6, 7), v8i16);
    v8i16 hi = __builtin_convertvector(__builtin_shufflevector(q, q, 8, 9, 10, 11, 12, 13, 14, 15), v8i16);
    out[0] = __builtin_convertvector(__builtin_convertvector(__builtin_shufflevector(lo, lo, 0, 1, 2, 3), v4i), v4f);
    out[1] = __builtin_convertvector(__builtin_convertvector(__builtin_shufflevector(lo, lo, 4, 5, 6, 7), v4i), v4f);
    out[2] = __builtin_convertvector(__builtin_convertvector(__builtin_shufflevector(hi, hi, 0, 1, 2, 3), v4i), v4f);
    out[3] = __builtin_convertvector(__builtin_convertvector(__builtin_shufflevector(hi, hi, 4, 5, 6, 7), v4i), v4f);
#else                                        /* SSE2: unpack each byte to the top of its lane, shift down */
    v8i16 lo = (v8i16)__builtin_shufflevector(q, q, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7) >> 8;
    v8i16 hi = (v8i16)__builtin_shufflevector(q, q, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15) >> 8;
    out[0] = __builtin_convertvector((v4i)__builtin_shufflevector(lo, lo, 0, 0, 1, 1, 2, 2, 3, 3) >> 16, v4f);
    out[1] = __builtin_convertvector((v4i)__builtin_shufflevector(lo, lo, 4, 4, 5, 5, 6, 6, 7, 7) >> 16, v4f);
    out[2] = __builtin_convertvector((v4i)__builtin_shufflevector(hi, hi, 0, 0, 1, 1, 2, 2, 3, 3) >> 16, v4f);
    out[3] = __builtin_convertvector((v4i)__builtin_shufflevector(hi, hi, 4, 4, 5, 5, 6, 6, 7, 7) >> 16, v4f);
#endif
}

/* --- the integer dot products ---------------------------------------------------------------- */
/* x is quantized to 14 bits, |q| <= QMAX: every int32 sum below stays exact (the largest, two
 * Q6_K sub-blocks of 16 times their int8 scales: 2 * 16 * 32 * 8191 * 127 < 2^31). int8 x, as
 * llama.cpp's q8_1, was tried first: its 0.5-1% error per product moved SmolLM2's logits by up
 * to 2 and flipped greedy answers; 14 bits make it ~60x smaller. */
#define QMAX 8191

/* a[2i] b[2i] + a[2i+1] b[2i+1] in int32 lane i */
static inline v4i madd16(v8i16 a, v8i16 b) {
#if defined(__wasm_simd128__)
    return __builtin_wasm_dot_s_i32x4_i16x8(a, b);
#elif defined(__SSE2__)
    return (v4i)__builtin_ia32_pmaddwd128(a, b);
#else
    v4i ae = __builtin_convertvector(__builtin_shufflevector(a, a, 0, 2, 4, 6), v4i);
    v4i ao = __builtin_convertvector(__builtin_shufflevector(a, a, 1, 3, 5, 7), v4i);
    v4i be = __builtin_convertvector(__builtin_shufflevector(b, b, 0, 2, 4, 6), v4i);
    v4i bo = __builtin_convertvector(__builtin_shufflevector(b, b, 1, 3, 5, 7), v4i);
    return ae * be + ao * bo;
#endif
}

/* acc + the products of 16 quantized x (int16) at `x` with 16 weights w, as 4 partial sums.
 * x stores each 16 as its 8 even elements then its 8 odd ones, so that the weights need no
 * widening shuffles: the even bytes are w's 16-bit lanes masked (sign-extended when `sign`,
 * Q8_0), the odd ones the lanes shifted down. */
static inline v4i dot16(v4i acc, const uint8_t *x, v16i8 w, int sign) {
    v8i16 even = sign ? ((v8i16)w << 8) >> 8 : (v8i16)w & 0xff;
    v8i16 odd = sign ? (v8i16)w >> 8 : (v8i16)((v8u16)w >> 8);
    return acc + madd16(load_i16x8(x), even) + madd16(load_i16x8(x + 16), odd);
}

/* The 32 products of a block of x (int16, elements 0-15 at x, 16-31 after) with weights lo, hi,
 * as 4 partial int32 sums: all four for the block, or (halves) lanes 0-1 for elements 0-15 and
 * 2-3 for 16-31. */
static inline v4i dot32(const uint8_t *x, v16i8 lo, v16i8 hi, int sign, int halves) {
    v4i a = dot16(splati(0), x, lo, sign), b = dot16(splati(0), x + 32, hi, sign);
    return halves ? hadd4(a, b) : a + b;
}

/* V8 schedules the loads of a loop body first and its arithmetic late, so a group of blocks
 * outgrows the 16 vector registers and spills (TurboFan, x86-64: ~130 spills in the one-row loop,
 * ~400 in the four-row one). A store of each block's sums (to a volatile local on the wasm stack)
 * is an effect it keeps in order, so each block's arithmetic stays between its loads and the
 * next block's; the empty asm (nothing in the binary) keeps LLVM from moving loads across it.
 * Measured +30-60% (four loads per block and row). Natively nothing. */
static inline void pin(v4i v) {
#ifdef __wasm__
    volatile v4i sink = v;
    (void)sink;
    __asm__ volatile("" ::: "memory");
#endif
    (void)v;
}

/* --- quantized rows of x ----------------------------------------------------------------------- */
/* Row r of x, quantized, at base + r * stride: the values (cols int16, each 16 as evens then
 * odds: see dot16), then per block of 32 the scale dx (float), the sum of the
 * dequantized values dx * sum(q) (float) and sum(q) (int32), then sum(q) per 16 (int32). */
typedef struct {
    const uint8_t *base;
    size_t stride, dx, xs, s32, s16;    /* bytes */
} acts;

static inline const uint8_t *act_q(const acts *a, size_t r, size_t element) {
    return a->base + r * a->stride + 2 * element;
}
static inline const float *act_dx(const acts *a, size_t r) { return (const float *)(a->base + r * a->stride + a->dx); }
static inline const float *act_xs(const acts *a, size_t r) { return (const float *)(a->base + r * a->stride + a->xs); }
static inline const int32_t *act_s32(const acts *a, size_t r) {
    return (const int32_t *)(a->base + r * a->stride + a->s32);
}
static inline const int32_t *act_s16(const acts *a, size_t r) {
    return (const int32_t *)(a->base + r * a->stride + a->s16);
}
/* count (<= 4) int32 from p, zeros after */
static inline v4i gather_i32(const int32_t *p, size_t count) {
    if (count >= 4) return load_i32x4(p);
    v4i v = splati(0);
    for (size_t i = 0; i < count; ++i) v[i] = p[i];
    return v;
}

/* rows of x multiplied together, each weight block unpacked once for them (2 measured the same) */
#define ROWS_AT_ONCE 4

/* One case of a *_rows dispatcher: type T through the file's rows_of(T, R, ...), with R a
   compile-time 4 or 1 so each gets its own unrolled body. */
#define ROWS(T)                                                                                   \
    case T:                                                                                       \
        if (r == ROWS_AT_ONCE) rows_of(T, ROWS_AT_ONCE, w, count, row_bytes, nb, a, r0, bias, y, y_row); \
        else rows_of(T, 1, w, count, row_bytes, nb, a, r0, bias, y, y_row);                        \
        break

/* --- what quant_small.c and quant_k.c provide ------------------------------------------------ */
/* y[(r0 + i) * y_row + n] = (weight row n) . (x row r0 + i) + bias[n] for n < count, i < r
 * (r is 1 or 4); weight rows row_bytes apart, nb blocks of 32 each */
void small_rows(int type, size_t r, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, const acts *a,
                size_t r0, const float *bias, float *y, size_t y_row);
void k_rows(int type, size_t r, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, const acts *a,
            size_t r0, const float *bias, float *y, size_t y_row);
/* one row of `nb` blocks of 32 dequantized to out, bit for bit as engine.quants.dequantize */
void small_dequantize(int type, const uint8_t *w, size_t nb, float *out);
void k_dequantize(int type, const uint8_t *w, size_t nb, float *out);

#endif
