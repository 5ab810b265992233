/* What the quantized kernels share (not exported): quant.c drives, quant_acts.c quantizes x,
 * quant_small.c and quant_k.c know the GGML block layouts (engine/quants.py documents them).
 *
 * The products run in integers, as llama.cpp's do: each row of x is quantized per 32
 * elements to 14-bit integers in int16 with one float scale dx (x ~ dx * q, |q| <= QMAX),
 * every weight block is unpacked to small integers (unsigned, 0..63, except Q8_0's signed
 * bytes), and each group of 4 blocks of 32 gives 4 exact int32 dot products (i32x4.dot_i16x8_s,
 * pmaddwd natively), which the block scales turn into float32 at once (one f32x4 multiply-add
 * per 128 weights). wasm_kernels/README.md has the whole story.
 */
#ifndef ENGINE_KERNELS_QUANT_COMMON_H
#define ENGINE_KERNELS_QUANT_COMMON_H

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

/* out[l] lane i = in[i] lane l (32-bit lanes) */
static inline void transpose_words(const v4u in[4], v4u out[4]) {
    v4u t0 = __builtin_shufflevector(in[0], in[1], 0, 4, 1, 5), t1 = __builtin_shufflevector(in[0], in[1], 2, 6, 3, 7);
    v4u t2 = __builtin_shufflevector(in[2], in[3], 0, 4, 1, 5), t3 = __builtin_shufflevector(in[2], in[3], 2, 6, 3, 7);
    out[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
    out[1] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
    out[2] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
    out[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
}

/* int32 lanes of a then b as int16 (saturating: callers' values fit) */
static inline v8i16 narrow16(v4i a, v4i b) {
#if defined(__wasm_simd128__)
    return __builtin_wasm_narrow_s_i16x8_i32x4(a, b);
#elif defined(__SSE2__)
    return (v8i16)__builtin_ia32_packssdw128(a, b);
#else
    return __builtin_convertvector(__builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7), v8i16);
#endif
}

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

/* the even and the odd bytes of v's 16-bit lanes as int16 (signed bytes sign-extended): the
 * panels' weight values (quant_small.c, quant_k.c) */
static inline v8i16 even_bytes(v4u v, int sign) { return sign ? ((v8i16)v << 8) >> 8 : (v8i16)v & 0xff; }
static inline v8i16 odd_bytes(v4u v, int sign) { return sign ? (v8i16)v >> 8 : (v8i16)((v8u16)v >> 8); }

/* --- rows of x against weight rows: the *_rows dispatchers (quant_small.c, quant_k.c) ----------- */
/* rows of x multiplied together by the K-quants, each weight block unpacked once for them (2
 * measured the same); the 32-element types take several rows through the panels below */
#define ROWS_AT_ONCE 4

/* One case of a *_rows dispatcher: type T through the file's rows_of(T, R, ...), with R a
   compile-time 4 or 1 so each gets its own unrolled body. */
#define ROWS(T)                                                                                   \
    case T:                                                                                       \
        if (r == ROWS_AT_ONCE) rows_of(T, ROWS_AT_ONCE, w, count, row_bytes, nb, a, r0, bias, y, y_row); \
        else rows_of(T, 1, w, count, row_bytes, nb, a, r0, bias, y, y_row);                        \
        break

/* --- panels: the prefill layout (many rows of x, 32-element block types) ------------------------ */
/* With several rows of x every weight block meets every row, so the weights are unpacked once per
 * chunk of weight rows into int16 panels, and the product runs as a small integer GEMM over them
 * (quant.c: a tile of up to 5 rows of x times 2 weight rows, 10 int32 accumulators), one
 * i32x4.dot_i16x8_s (pmaddwd) and one add per 8 products with no unpacking, reduction or shuffle
 * in the loop (x and weights both arrive as int16 pairs in the same order).
 *
 * Per row, the blocks go 4 at a time, interleaved: each group of 4 blocks is 16 vectors of 8 int16,
 * and 32-bit lane i of every vector holds two elements of block i. A dot product of two rows, one
 * int32 lane per block, therefore comes out of 16 multiply-adds already split by block: lane i is
 * block i's exact sum, ready for the block scales (4 lanes = 4 blocks: one float conversion and
 * one multiply-add per group, no horizontal sums). Vector 4l + c (l < 4) holds, in lane i, block
 * i's elements
 *     c = 0: 4l, 4l+2    c = 1: 4l+1, 4l+3    c = 2: 4l+16, 4l+18    c = 3: 4l+17, 4l+19
 * which is what the 4x4 transpose of the blocks' (elements 0-15 | 16-31) bytes then the even/odd
 * bytes of each 16-bit lane give, with no other shuffle. The nb % 4 blocks left at the end of a row
 * make a group of 2 blocks (8 vectors: lanes 0-1 the first block, 2-3 the second; vector 2t + p
 * holds elements 8t + p, 8t + 2 + p, 8t + 4 + p, 8t + 6 + p of each) and/or one of 1 block (4
 * vectors: vector 2t + p holds elements 16t + p, 16t + 2 + p, ..., 16t + 14 + p), so that no
 * multiply-add goes to padding (SmolLM2's 576 columns are 18 blocks).
 *
 * Per group each row also has one float32 vector of its blocks' scales per lane (a weight block's
 * d, or x's dx) and one of the min term (x's dx * sum(q); a weight block's m for Q4_1/Q5_1, else
 * 0, in the block's first lane only, so that the lanes add up to the block's m dx sum(q) once).
 *
 * A panel interleaves K rows (a tile of x, a strip of weight rows) group by group, so that the
 * product loop reads one stream per operand at fixed offsets: group g of the panel starts at
 * K * group_offset, with vector v of row k at 16 (K v + k), then, after the values, the scales of
 * row k at 16 k and its min terms at 16 (K + k). K rows take K row strides. */
#define PANEL_GROUP 256                   /* bytes of values of a group of 4 blocks, per row */
/* groups of a row of nb blocks: nb / 4 of 4 blocks, then one of 2 and/or one of 1 */
static inline size_t panel_groups(size_t nb) { return nb / 4 + (nb % 4 >= 2) + nb % 2; }
/* blocks in group g */
static inline size_t group_blocks(size_t nb, size_t g) {
    return g < nb / 4 ? 4 : g == nb / 4 && nb % 4 >= 2 ? 2 : 1;
}
/* the first block of group g, and the group's bytes per row of the panel before it (64 bytes of
 * values a block, 32 of scales a group) */
static inline size_t group_first(size_t nb, size_t g) { return g <= nb / 4 ? 4 * g : 4 * g - 2; }
static inline size_t group_offset(size_t nb, size_t g) { return 64 * group_first(nb, g) + 32 * g; }
/* bytes per row */
static inline size_t panel_stride(size_t nb) { return 64 * nb + 32 * panel_groups(nb); }
/* offsets in a panel of K rows: values of row k in group g (vector v at + 16 K v), its scales,
 * its min terms */
static inline size_t panel_values(size_t nb, size_t K, size_t k, size_t g) { return K * group_offset(nb, g) + 16 * k; }
static inline size_t panel_scales(size_t nb, size_t K, size_t k, size_t g) {
    return panel_values(nb, K, k, g) + 64 * K * group_blocks(nb, g);
}
static inline size_t panel_mins(size_t nb, size_t K, size_t k, size_t g) { return panel_scales(nb, K, k, g) + 16 * K; }

#endif
