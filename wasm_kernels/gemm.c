/* f32 GEMM: C = act(A B + bias), batched, with arbitrary strides on A and B.
 *
 * Blocked as in GotoBLAS/BLIS: for each NC-column, KC-deep block of B, B is packed into
 * panels of NR columns (k-major, zero-padded), then for each MC-row block of A, A is
 * packed into panels of MR rows, and an MR x NR register tile (2 * MR f32x4
 * accumulators) runs over KC. Partial tiles compute in full on the zero padding and
 * store only their valid part. Two paths skip packing for thin problems (few rows of
 * A), where packing B would cost as much as the product itself:
 *   - B with contiguous rows: the tile reads B in place (only a ragged last panel is packed);
 *   - B with contiguous columns (a transposed weight, as in linear layers) and A with
 *     contiguous rows: dot products along k.
 * A float16 B (gemm_f16w_f32: a linear layer's weight kept in float16) is widened while it is
 * packed, so the register tile runs as for float32; its thin products are dot products that
 * widen the weight rows 8 at a time as they stream them (half.h).
 */
#include "exports.h"
#include "gemm.h"
#include "half.h"
#include "pool.h"

/* natively, the float16 weight rows are prefetched this many elements ahead (measured: a
 * 51865 x 512 head from L3 ~1.3x faster with, unstable without; WebAssembly has no prefetch) */
#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 256
#endif
#if PREFETCH_AHEAD && !defined(__wasm__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)0)
#endif

#define SMALL_M_DOT 4              /* rows of A up to which the dot-product path runs */
#define SMALL_M_DOT_HALF HALF_ROWS /* the same for a float16 B */

static inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* A[0:mc, 0:kc] -> panels of MR rows: ap[panel][p][r], rows past mc zero */
static void pack_a(size_t mc, size_t kc, const float *a, ptrdiff_t rs, ptrdiff_t cs, float *ap) {
    for (size_t i0 = 0; i0 < mc; i0 += MR) {
        size_t mr = min_size(MR, mc - i0);
        const float *src = a + (ptrdiff_t)i0 * rs;
        if (mr == MR && cs == 1) {
            for (size_t p = 0; p < kc; ++p, ap += MR)
                for (size_t r = 0; r < MR; ++r) ap[r] = src[(ptrdiff_t)r * rs + (ptrdiff_t)p];
        } else {
            for (size_t p = 0; p < kc; ++p, ap += MR)
                for (size_t r = 0; r < MR; ++r)
                    ap[r] = r < mr ? src[(ptrdiff_t)r * rs + (ptrdiff_t)p * cs] : 0.0f;
        }
    }
}

/* B[0:kc, 0:nc] -> panels of NR columns: bp[panel][p][c], columns past nc zero */
static void pack_b(size_t kc, size_t nc, const float *b, ptrdiff_t rs, ptrdiff_t cs, float *bp) {
    for (size_t j0 = 0; j0 < nc; j0 += NR) {
        size_t nr = min_size(NR, nc - j0);
        const float *src = b + (ptrdiff_t)j0 * cs;
        size_t p = 0;
        if (nr == NR && cs == 1) {                     /* rows contiguous: copy 4 at a time */
            for (; p < kc; ++p, bp += NR)
                for (size_t h = 0; h < NR; h += 4) store4(bp + h, load4(src + (ptrdiff_t)p * rs + (ptrdiff_t)h));
        } else if (nr == NR && rs == 1) {              /* columns contiguous: 4x4 transposes */
            for (; p + 4 <= kc; p += 4, bp += 4 * NR) {
                for (size_t h = 0; h < NR; h += 4) {
                    v4f c0 = load4(src + (ptrdiff_t)(h + 0) * cs + (ptrdiff_t)p);
                    v4f c1 = load4(src + (ptrdiff_t)(h + 1) * cs + (ptrdiff_t)p);
                    v4f c2 = load4(src + (ptrdiff_t)(h + 2) * cs + (ptrdiff_t)p);
                    v4f c3 = load4(src + (ptrdiff_t)(h + 3) * cs + (ptrdiff_t)p);
                    TRANSPOSE4(c0, c1, c2, c3);
                    store4(bp + h, c0);
                    store4(bp + NR + h, c1);
                    store4(bp + 2 * NR + h, c2);
                    store4(bp + 3 * NR + h, c3);
                }
            }
        }
        for (; p < kc; ++p, bp += NR)
            for (size_t c = 0; c < NR; ++c)
                bp[c] = c < nr ? src[(ptrdiff_t)p * rs + (ptrdiff_t)c * cs] : 0.0f;
    }
}

/* pack_b for float16 B: the same panels, widened to float32 */
static void pack_b_half(size_t kc, size_t nc, const uint16_t *b, ptrdiff_t rs, ptrdiff_t cs, float *bp) {
    for (size_t j0 = 0; j0 < nc; j0 += NR) {
        size_t nr = min_size(NR, nc - j0);
        const uint16_t *src = b + (ptrdiff_t)j0 * cs;
        size_t p = 0;
        if (nr == NR && rs == 1) {                     /* columns contiguous (a weight's rows): 8 x 8 blocks */
            for (; p + 8 <= kc; p += 8, bp += 8 * NR) {
                for (size_t h = 0; h < NR; h += 4) {
                    v4f l0, l1, l2, l3, h0, h1, h2, h3;
                    widen8(load8h(src + (ptrdiff_t)(h + 0) * cs + (ptrdiff_t)p), &l0, &h0);
                    widen8(load8h(src + (ptrdiff_t)(h + 1) * cs + (ptrdiff_t)p), &l1, &h1);
                    widen8(load8h(src + (ptrdiff_t)(h + 2) * cs + (ptrdiff_t)p), &l2, &h2);
                    widen8(load8h(src + (ptrdiff_t)(h + 3) * cs + (ptrdiff_t)p), &l3, &h3);
                    TRANSPOSE4(l0, l1, l2, l3);
                    TRANSPOSE4(h0, h1, h2, h3);
                    store4(bp + h, l0);
                    store4(bp + NR + h, l1);
                    store4(bp + 2 * NR + h, l2);
                    store4(bp + 3 * NR + h, l3);
                    store4(bp + 4 * NR + h, h0);
                    store4(bp + 5 * NR + h, h1);
                    store4(bp + 6 * NR + h, h2);
                    store4(bp + 7 * NR + h, h3);
                }
            }
        } else if (nr == NR && cs == 1) {              /* rows contiguous: 8 at a time */
            for (; p < kc; ++p, bp += NR)
                for (size_t h = 0; h < NR; h += 8) {
                    v4f lo, hi;
                    widen8(load8h(src + (ptrdiff_t)p * rs + (ptrdiff_t)h), &lo, &hi);
                    store4(bp + h, lo);
                    store4(bp + h + 4, hi);
                }
        }
        for (; p < kc; ++p, bp += NR)
            for (size_t c = 0; c < NR; ++c)
                bp[c] = c < nr ? half_to_float(src[(ptrdiff_t)p * rs + (ptrdiff_t)c * cs]) : 0.0f;
    }
}

/* The activations that cost a few instructions run on the registers (cheap_act); the others
 * (GELU, SiLU: polynomials and exp) on each finished block of C, row by row (activate_span):
 * inlined into the tile loop they cost it registers, and measured no faster than a pass over
 * the block, which is still in cache. */
static inline int cheap_act(int act) { return act == ACT_RELU || act == ACT_RELU6 || act == ACT_HARDSWISH; }

/* bias (if any) and a cheap activation on a row of 8 results `lo`, `hi` at (i, j) */
static inline void finish_row(v4f *lo, v4f *hi, const epilogue *ep, size_t i, size_t j, size_t nr) {
    if (ep->bias) {
        const float *bias = ep->bias + (ptrdiff_t)i * ep->bias_row + (ptrdiff_t)j * ep->bias_col;
        if (ep->bias_col == 0) {                     /* one value per row (a conv's channel bias) */
            v4f v = splat(*bias);
            *lo += v;
            *hi += v;
        } else {
            *lo += gather4(bias, ep->bias_col, nr);
            *hi += gather4(bias + 4 * ep->bias_col, ep->bias_col, nr > 4 ? nr - 4 : 0);
        }
    }
    if (cheap_act(ep->act)) {
        *lo = activate4(*lo, ep->act);
        *hi = activate4(*hi, ep->act);
    }
}

/* Store an MR x 8 tile at c (all of the tile, or an 8-column part of a wider one): add what c
 * holds (accumulate), apply the epilogue (ep, on the last k block only), write the valid mr x nr
 * part (nr <= 8). (i, j): its place in C. */
static void store_tile(v4f acc[MR][2], float *c, ptrdiff_t c_row, size_t mr, size_t nr, int accumulate,
                       const epilogue *ep, size_t i, size_t j) {
    for (size_t r = 0; r < mr; ++r) {
        float *cr = c + (ptrdiff_t)r * c_row;
        v4f lo = acc[r][0], hi = acc[r][1];
        if (accumulate) {
            lo += gather4(cr, 1, nr);
            hi += gather4(cr + 4, 1, nr > 4 ? nr - 4 : 0);
        }
        if (ep) finish_row(&lo, &hi, ep, i + r, j, nr);
        if (nr == 8) {
            store4(cr, lo);
            store4(cr + 4, hi);
        } else {
            for (size_t q = 0; q < nr; ++q) cr[q] = q < 4 ? lo[q] : hi[q - 4];
        }
    }
}

/* The register tile: MR rows of packed A times NR columns of B over kc, B rows b_step apart. */
#if GEMM_WIDE == 16
#include <immintrin.h>

/* each lane the fused multiply-add of the 4-lane madd: the same bits as four of them */
static void micro_tile(size_t kc, const float *ap, const float *bp, ptrdiff_t b_step, float *c, ptrdiff_t c_row,
                       size_t mr, size_t nr, int accumulate, const epilogue *ep, size_t i, size_t j) {
    __m512 acc[MR];
    for (size_t r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
    for (size_t p = 0; p < kc; ++p, ap += MR, bp += b_step) {
        __m512 b = _mm512_loadu_ps(bp);
        for (size_t r = 0; r < MR; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(ap[r]), b, acc[r]);
    }
    v4f lo[MR][2], hi[MR][2];
    for (size_t r = 0; r < MR; ++r) {
        lo[r][0] = (v4f)_mm512_extractf32x4_ps(acc[r], 0);
        lo[r][1] = (v4f)_mm512_extractf32x4_ps(acc[r], 1);
        hi[r][0] = (v4f)_mm512_extractf32x4_ps(acc[r], 2);
        hi[r][1] = (v4f)_mm512_extractf32x4_ps(acc[r], 3);
    }
    store_tile(lo, c, c_row, mr, nr < 8 ? nr : 8, accumulate, ep, i, j);
    if (nr > 8) store_tile(hi, c + 8, c_row, mr, nr - 8, accumulate, ep, i, j + 8);
}
#elif GEMM_WIDE == 8
typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));

/* each lane the fused multiply-add of the 4-lane madd: the same bits as two of them */
static void micro_tile(size_t kc, const float *ap, const float *bp, ptrdiff_t b_step, float *c, ptrdiff_t c_row,
                       size_t mr, size_t nr, int accumulate, const epilogue *ep, size_t i, size_t j) {
    v8f acc[MR];
    for (size_t r = 0; r < MR; ++r) acc[r] = (v8f){0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t p = 0; p < kc; ++p, ap += MR, bp += b_step) {
        v8f b = *(const v8f_u *)bp;
        for (size_t r = 0; r < MR; ++r) {
            float x = ap[r];
            acc[r] = __builtin_ia32_vfmaddps256((v8f){x, x, x, x, x, x, x, x}, b, acc[r]);
        }
    }
    v4f halves[MR][2];
    for (size_t r = 0; r < MR; ++r) {
        halves[r][0] = __builtin_shufflevector(acc[r], acc[r], 0, 1, 2, 3);
        halves[r][1] = __builtin_shufflevector(acc[r], acc[r], 4, 5, 6, 7);
    }
    store_tile(halves, c, c_row, mr, nr, accumulate, ep, i, j);
}
#else
static void micro_tile(size_t kc, const float *ap, const float *bp, ptrdiff_t b_step, float *c, ptrdiff_t c_row,
                       size_t mr, size_t nr, int accumulate, const epilogue *ep, size_t i, size_t j) {
    v4f acc[MR][2];
    for (size_t r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = splat(0.0f);
    for (size_t p = 0; p < kc; ++p, ap += MR, bp += b_step) {
        v4f b0 = load4(bp), b1 = load4(bp + 4);
        for (size_t r = 0; r < MR; ++r) {
            v4f a = splat(ap[r]);
            acc[r][0] = madd(a, b0, acc[r][0]);
            acc[r][1] = madd(a, b1, acc[r][1]);
        }
    }
    store_tile(acc, c, c_row, mr, nr, accumulate, ep, i, j);
}
#endif

/* One row block of C through packed tiles: ap holds mc rows of A packed over kc. */
static void tile_block(size_t mc, size_t nc, size_t kc, const float *ap, const float *bp, ptrdiff_t b_step,
                       const float *b_tail, float *c, ptrdiff_t c_row, int accumulate, const epilogue *ep,
                       size_t i0, size_t j0, int packed) {
    for (size_t ir = 0; ir < mc; ir += MR)                /* row tiles outside: C is written row by row */
        for (size_t jr = 0; jr < nc; jr += NR) {
            size_t nr = min_size(NR, nc - jr);
            const float *panel = packed ? bp + jr * kc : (nr == NR ? bp + jr : b_tail);
            ptrdiff_t step = packed || nr < NR ? NR : b_step;
            micro_tile(kc, ap + ir * kc, panel, step, c + (ptrdiff_t)ir * c_row + (ptrdiff_t)jr, c_row,
                       min_size(MR, mc - ir), nr, accumulate, ep, i0 + ir, j0 + jr);
        }
}

/* Dot products along k for `rows` (1 or 2) rows of A against 4 columns of B at a time. */
static inline void dot_rows(size_t rows, size_t n, size_t k, const float *a, ptrdiff_t a_row, matrix b,
                            float *c, ptrdiff_t c_row, const epilogue *ep, size_t i) {
    const float *a0 = a, *a1 = rows > 1 ? a + a_row : a;
    for (size_t j = 0; j < n; j += 4) {
        size_t cols = min_size(4, n - j);
        const float *bc[4];
        for (size_t q = 0; q < 4; ++q) bc[q] = b.p + (ptrdiff_t)(j + (q < cols ? q : 0)) * b.col;
        v4f s0[4], s1[4];
        for (size_t q = 0; q < 4; ++q) s0[q] = s1[q] = splat(0.0f);
        size_t p = 0;
        for (; p + 4 <= k; p += 4) {
            v4f x0 = load4(a0 + p), x1 = load4(a1 + p);
            for (size_t q = 0; q < 4; ++q) {
                v4f y = load4(bc[q] + p);
                s0[q] = madd(x0, y, s0[q]);
                if (rows > 1) s1[q] = madd(x1, y, s1[q]);
            }
        }
        v4f r0 = {hsum4(s0[0]), hsum4(s0[1]), hsum4(s0[2]), hsum4(s0[3])};
        v4f r1 = {hsum4(s1[0]), hsum4(s1[1]), hsum4(s1[2]), hsum4(s1[3])};
        for (; p < k; ++p) {
            v4f y = {bc[0][p], bc[1][p], bc[2][p], bc[3][p]};
            r0 += splat(a0[p]) * y;
            r1 += splat(a1[p]) * y;
        }
        for (size_t r = 0; r < rows; ++r) {
            v4f v = r ? r1 : r0, unused = splat(0.0f);
            if (ep) finish_row(&v, &unused, ep, i + r, j, cols);
            float *cr = c + (ptrdiff_t)r * c_row + (ptrdiff_t)j;
            for (size_t q = 0; q < cols; ++q) cr[q] = v[q];
            if (ep && ep->act && !cheap_act(ep->act)) activate_span(cols, cr, ep->act, cr);
        }
    }
}

/* Dot products of one or two rows of A (x0, x1) with 4 float16 rows of B^T (w0..w3), each
 * widened 8 elements at a time, once for both rows of A. The sums are named variables, the 4
 * weight rows unrolled: kept in an array, GCC stores them to memory at every step. */
#define HALF_STEP(s, t, widen)                                                      \
    do {                                                                            \
        v4f lo_, hi_;                                                               \
        widen;                                                                      \
        s = madd(xb, hi_, madd(xa, lo_, s));                                        \
        if (two) t = madd(yb, hi_, madd(ya, lo_, t));                               \
    } while (0)

static inline __attribute__((always_inline)) void dot4_half(int two, size_t k, const float *x0, const float *x1, const uint16_t *w0,
                             const uint16_t *w1, const uint16_t *w2, const uint16_t *w3, v4f *r0, v4f *r1) {
    v4f s0 = splat(0.0f), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
    size_t p = 0;
    for (; p + 8 <= k; p += 8) {
        v4f xa = load4(x0 + p), xb = load4(x0 + p + 4);
        v4f ya = two ? load4(x1 + p) : xa, yb = two ? load4(x1 + p + 4) : xb;
        PREFETCH(w0 + p + PREFETCH_AHEAD);
        HALF_STEP(s0, t0, widen8(load8h(w0 + p), &lo_, &hi_));
        HALF_STEP(s1, t1, widen8(load8h(w1 + p), &lo_, &hi_));
        HALF_STEP(s2, t2, widen8(load8h(w2 + p), &lo_, &hi_));
        HALF_STEP(s3, t3, widen8(load8h(w3 + p), &lo_, &hi_));
    }
    size_t tail = k - p;
    if (tail) {                                          /* zeros past k on both sides: 0 * 0 */
        v4f xa = gather4(x0 + p, 1, tail), xb = gather4(x0 + p + 4, 1, tail > 4 ? tail - 4 : 0);
        v4f ya = gather4(x1 + p, 1, tail), yb = gather4(x1 + p + 4, 1, tail > 4 ? tail - 4 : 0);
        HALF_STEP(s0, t0, widen_tail(w0 + p, tail, &lo_, &hi_));
        HALF_STEP(s1, t1, widen_tail(w1 + p, tail, &lo_, &hi_));
        HALF_STEP(s2, t2, widen_tail(w2 + p, tail, &lo_, &hi_));
        HALF_STEP(s3, t3, widen_tail(w3 + p, tail, &lo_, &hi_));
    }
    *r0 = (v4f){hsum4(s0), hsum4(s1), hsum4(s2), hsum4(s3)};
    *r1 = (v4f){hsum4(t0), hsum4(t1), hsum4(t2), hsum4(t3)};
}

/* Float16 weights against 1-4 rows of A (a decode step): each weight row streams once, against
 * all the rows of A at once, in groups of HALF_COLS weight rows.
 *
 * Natively with F16C (the library is built for the machine that runs it), vcvtph2ps widens 8
 * halves exactly, subnormals, inf and NaN included, and the products are 8-lane fused
 * multiply-adds: nothing to check.
 *
 * Elsewhere (WebAssembly, and the portable native baseline) the rows of A are copied into scratch
 * times 2^112 once per call (exact; any |x| >= 2^16 or NaN keeps the plain path, dot4_half), and
 * a normal half's bits with the exponent kept at e make w * 2^-112 (widen8_scaled, 5 integer ops
 * per 8 halves), so that x * 2^112 * w * 2^-112 is exactly x * w. A lane holding a zero,
 * subnormal, inf or NaN is zeroed before that widening (its exponent is 0 or 31: a lanewise
 * comparison and an unsigned minimum): a subnormal's w * 2^-112 would be a float32 denormal, which
 * x86 multiplies ~45x slower. No branch in the loop: the offset of each 8-block where some of the
 * group's lanes were zeroed is written to a list (the count advances by 0 or 1), and after the
 * loop the blocks in the list add their zeroed lanes' exact products (subnormal8: mantissa *
 * 2^-24 from the integer, times the unscaled rows). Whisper tiny.en's output head has 0.46% of
 * its halves subnormal, one 8-block of 4 rows in 7 on the list. A group where an inf or NaN was
 * zeroed is computed again on the plain path. The sums are of the same products in another
 * order. */
#if !defined(__wasm__) && defined(__F16C__) && defined(__AVX2__) && defined(__FMA__)
#define HALF_F16C 1
#include <immintrin.h>
#endif

#ifndef HALF_F16C
/* rows of A times 2^112 into z (rows x k floats), or 0 when some |x| >= 2^16 (the product
 * would overflow) or is NaN */
static int scale_rows(size_t rows, size_t k, const float *a, ptrdiff_t a_row, float *z) {
    const float scale = 5192296858534827628530496329220096.0f;     /* 2^112 */
    for (size_t r = 0; r < rows; ++r)
        for (size_t p = 0; p < k; ++p) {
            float x = a[(ptrdiff_t)r * a_row + (ptrdiff_t)p];
            if (!(x < 65536.0f && x > -65536.0f)) return 0;
            z[r * k + p] = x * scale;
        }
    return 1;
}
#endif

#define HALF_ROWS 4     /* rows of A at most */
#define HALF_COLS 4     /* weight rows in a group at most */

#ifdef HALF_F16C
/* sums[r][c] = row r of A (x[r]) . weight row c (w[c]), for r < R, c < C */
static inline __attribute__((always_inline)) void half_dot_group(const int R, const int C, size_t k,
                                                                 const float *const x[HALF_ROWS], const uint16_t *const w[HALF_COLS],
                                                                 float sums[HALF_ROWS][HALF_COLS]) {
    __m256 acc[HALF_ROWS][HALF_COLS];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    size_t p = 0;
    for (; p + 8 <= k; p += 8) {
        __m256 wv[HALF_COLS];
        for (int c = 0; c < C; ++c) {
            PREFETCH(w[c] + p + PREFETCH_AHEAD);
            wv[c] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w[c] + p)));
        }
        for (int r = 0; r < R; ++r) {
            __m256 xv = _mm256_loadu_ps(x[r] + p);
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            __m128 q = _mm_add_ps(_mm256_castps256_ps128(acc[r][c]), _mm256_extractf128_ps(acc[r][c], 1));
            float s = hsum4((v4f)q);
            for (size_t t = p; t < k; ++t) s += x[r][t] * half_to_float(w[c][t]);
            sums[r][c] = s;
        }
}
#else
/* One block of 8 halves of each of the group's C weight rows at p (the loop of half_dot_group):
 * the normal lanes' products into acc, p onto the list when some lane was zeroed. */
static inline __attribute__((always_inline)) size_t half_block(const int R, const int C, size_t k, size_t p,
                                                               const float *z, const uint16_t *const w[HALF_COLS],
                                                               uint32_t *list, size_t listed,
                                                               v4f acc[HALF_ROWS][HALF_COLS]) {
    PREFETCH(w[0] + p + PREFETCH_AHEAD);
    v8h e[HALF_COLS];
    v4f lo[HALF_COLS], hi[HALF_COLS];
    for (int c = 0; c < C; ++c) {
        v8h h = load8h(w[c] + p);
        e[c] = biased_exponent8(h);                      /* above 0x400 exactly for normal numbers */
        widen8_scaled(keep_lanes8(h, e[c] > (int16_t)0x400), &lo[c], &hi[c]);
    }
    for (int r = 0; r < R; ++r) {
        v4f xa = load4(z + (size_t)r * k + p), xb = load4(z + (size_t)r * k + p + 4);
        for (int c = 0; c < C; ++c) acc[r][c] = madd(xb, hi[c], madd(xa, lo[c], acc[r][c]));
    }
    v8h least = e[0];
    for (int c = 1; c < C; ++c) least = min8(least, e[c]);
    list[listed] = (uint32_t)p;
    return listed + (size_t)any_zero_lane8(least > (int16_t)0x400);
}

/* sums[r][c] = row r of A (x[r], times 2^112 in z + r * k) . weight row c (w[c]), for r < R, c < C;
 * list: k / 8 entries of scratch. Returns 0, or 1 when a weight row holds an inf or NaN (the sums
 * are then wrong: the caller takes the plain path). */
static inline __attribute__((always_inline)) int half_dot_group(const int R, const int C, size_t k,
                                                                const float *const x[HALF_ROWS], const float *z,
                                                                const uint16_t *const w[HALF_COLS], uint32_t *list,
                                                                float sums[HALF_ROWS][HALF_COLS]) {
    v4f acc[HALF_ROWS][HALF_COLS];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = splat(0.0f);
    size_t p = 0, listed = 0;
    for (; p + 8 <= k; p += 8) listed = half_block(R, C, k, p, z, w, list, listed, acc);
    v8h inf_nan = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = 0; i < listed; ++i) {                /* the zeroed lanes, exactly */
        size_t q = list[i];
        for (int c = 0; c < C; ++c) {
            v4f l, h;
            subnormal8(load8h(w[c] + q), &l, &h, &inf_nan);
            for (int r = 0; r < R; ++r) acc[r][c] = madd(load4(x[r] + q + 4), h, madd(load4(x[r] + q), l, acc[r][c]));
        }
    }
    if (p < k) {                                         /* the last k % 8: exact widening, zeros past k */
        size_t tail = k - p;
        for (int c = 0; c < C; ++c) {
            v4f l, h;
            widen_tail(w[c] + p, tail, &l, &h);
            for (int r = 0; r < R; ++r)
                acc[r][c] = madd(gather4(x[r] + p + 4, 1, tail > 4 ? tail - 4 : 0), h,
                                 madd(gather4(x[r] + p, 1, tail), l, acc[r][c]));
        }
    }
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) sums[r][c] = hsum4(acc[r][c]);
    return any_zero_lane8(~inf_nan);
}
#endif

/* the plain path of half_dot for a group of weight rows: pairs of rows of A against 4 weight rows
 * through dot4_half */
static void half_dot_plain(size_t rows, size_t cols, size_t k, const float *const x[HALF_ROWS],
                           const uint16_t *const w[HALF_COLS], float sums[HALF_ROWS][HALF_COLS]) {
    for (size_t q = 0; q < cols; q += 4)
        for (size_t r = 0; r < rows; r += 2) {
            const uint16_t *w0 = w[q], *w1 = q + 1 < cols ? w[q + 1] : w0, *w2 = q + 2 < cols ? w[q + 2] : w0;
            const uint16_t *w3 = q + 3 < cols ? w[q + 3] : w0;
            v4f r0, r1;
            if (r + 1 < rows) dot4_half(1, k, x[r], x[r + 1], w0, w1, w2, w3, &r0, &r1);
            else dot4_half(0, k, x[r], x[r], w0, w1, w2, w3, &r0, &r1);
            for (size_t c = 0; c < 4 && q + c < cols; ++c) {
                sums[r][q + c] = r0[c];
                if (r + 1 < rows) sums[r + 1][q + c] = r1[c];
            }
        }
}

/* weight rows per group against R rows of A (V8 has 16 vector registers: R x C accumulators, C
 * widened blocks of two vectors; measured) */
#ifndef HALF_COLS_1
#define HALF_COLS_1 4
#endif
#ifndef HALF_COLS_2
#define HALF_COLS_2 4
#endif
#ifndef HALF_COLS_3
#define HALF_COLS_3 1
#endif
#ifndef HALF_COLS_4
#define HALF_COLS_4 1
#endif

/* C (rows x n) = A (rows <= 4, contiguous rows a_row apart) B + epilogue for a float16 B with
 * contiguous columns (a weight's rows: b.col apart); scratch: GEMM_SCRATCH floats. */
static inline __attribute__((always_inline)) void half_dot_rows(const int R, const int C, size_t n, size_t k,
                                                                const float *a, ptrdiff_t a_row, matrix b, float *c,
                                                                ptrdiff_t c_row, const epilogue *ep, float *scratch) {
    const float *x[HALF_ROWS];
    for (int r = 0; r < HALF_ROWS; ++r) x[r] = a + (ptrdiff_t)(r < R ? r : 0) * a_row;
#ifdef HALF_F16C
    (void)scratch;
    const int fast = 1;
#else
    float *z = scratch;
    uint32_t *list = (uint32_t *)(scratch + (size_t)R * k);
    int fast = (size_t)R * k + k / 8 + 1 <= GEMM_SCRATCH && scale_rows((size_t)R, k, a, a_row, z);
#endif
    for (size_t j = 0; j < n; j += (size_t)C) {
        size_t cols = min_size((size_t)C, n - j);
        const uint16_t *w[HALF_COLS];
        for (int q = 0; q < C; ++q) w[q] = b.half + (ptrdiff_t)(j + ((size_t)q < cols ? (size_t)q : 0)) * b.col;
        float sums[HALF_ROWS][HALF_COLS];
        int plain = !fast;
        if (fast) {
#ifdef HALF_F16C
            half_dot_group(R, C, k, x, w, sums);
#else
            plain = half_dot_group(R, C, k, x, z, w, list, sums);
#endif
        }
        if (plain) half_dot_plain((size_t)R, cols, k, x, w, sums);
        for (int r = 0; r < R; ++r) {
            float *cr = c + (ptrdiff_t)r * c_row + (ptrdiff_t)j;
            for (size_t q = 0; q < cols; q += 4) {
                size_t part = min_size(4, cols - q);
                v4f v = {sums[r][q], sums[r][q + 1 < cols ? q + 1 : q], sums[r][q + 2 < cols ? q + 2 : q],
                         sums[r][q + 3 < cols ? q + 3 : q]}, unused = splat(0.0f);
                if (ep) finish_row(&v, &unused, ep, (size_t)r, j + q, part);
                for (size_t t = 0; t < part; ++t) cr[q + t] = v[t];
            }
            if (ep && ep->act && !cheap_act(ep->act)) activate_span(cols, cr, ep->act, cr);
        }
    }
}

/* one function per row count: each compiles (and tiers up in V8) on its own */
#define HALF_DOT_FN(R)                                                                                            \
    static __attribute__((noinline)) void half_dot_##R(size_t n, size_t k, const float *a, ptrdiff_t a_row,      \
                                                       matrix b, float *c, ptrdiff_t c_row, const epilogue *ep,   \
                                                       float *scratch) {                                          \
        half_dot_rows(R, HALF_COLS_##R, n, k, a, a_row, b, c, c_row, ep, scratch);                               \
    }
HALF_DOT_FN(1)
HALF_DOT_FN(2)
HALF_DOT_FN(3)
HALF_DOT_FN(4)

static void half_dot(size_t rows, size_t n, size_t k, const float *a, ptrdiff_t a_row, matrix b, float *c,
                     ptrdiff_t c_row, const epilogue *ep, float *scratch) {
    if (rows == 1) half_dot_1(n, k, a, a_row, b, c, c_row, ep, scratch);
    else if (rows == 2) half_dot_2(n, k, a, a_row, b, c, c_row, ep, scratch);
    else if (rows == 3) half_dot_3(n, k, a, a_row, b, c, c_row, ep, scratch);
    else half_dot_4(n, k, a, a_row, b, c, c_row, ep, scratch);
}

void gemm_packed_b(size_t m, size_t nc, size_t kc, matrix a, const float *bp, float *c, ptrdiff_t c_row,
                   int accumulate, const epilogue *ep, size_t j0, float *a_scratch) {
    if (m == 0 || nc == 0) return;
    if (ep && !ep->bias && !ep->act) ep = 0;
    for (size_t ic = 0; ic < m; ic += MC) {
        size_t mc = min_size(MC, m - ic);
        pack_a(mc, kc, a.p + (ptrdiff_t)ic * a.row, a.row, a.col, a_scratch);
        float *cb = c + (ptrdiff_t)ic * c_row;
        tile_block(mc, nc, kc, a_scratch, bp, NR, bp, cb, c_row, accumulate, ep, ic, j0, 1);
        if (ep && ep->act && !cheap_act(ep->act))
            for (size_t r = 0; r < mc; ++r) activate_span(nc, cb + (ptrdiff_t)r * c_row, ep->act, cb + (ptrdiff_t)r * c_row);
    }
}

void gemm_run(size_t m, size_t n, size_t k, matrix a, matrix b, float *c, ptrdiff_t c_row,
              const epilogue *ep, float *scratch) {
    if (m == 0 || n == 0) return;
    if (ep && !ep->bias && !ep->act) ep = 0;
    if (b.half && m <= SMALL_M_DOT_HALF && a.col == 1 && b.row == 1) {
        half_dot(m, n, k, a.p, a.row, b, c, c_row, ep, scratch);
        return;
    }
    if (!b.half && m <= SMALL_M_DOT && a.col == 1 && b.row == 1 && k >= 4) {
        size_t i = 0;                                    /* constant row counts: specialised */
        for (; i + 2 <= m; i += 2)
            dot_rows(2, n, k, a.p + (ptrdiff_t)i * a.row, a.row, b, c + (ptrdiff_t)i * c_row, c_row, ep, i);
        if (i < m)
            dot_rows(1, n, k, a.p + (ptrdiff_t)i * a.row, a.row, b, c + (ptrdiff_t)i * c_row, c_row, ep, i);
        return;
    }
    int packed = b.half || !(m <= SMALL_M_DIRECT && b.col == 1);
    float *bp = scratch, *ap = scratch + (size_t)KC * NC;
    for (size_t jc = 0; jc < n; jc += NC) {
        size_t nc = min_size(NC, n - jc);
        size_t pc = 0;
        do {                                             /* k == 0 still runs once: C = epilogue(0) */
            size_t kc = min_size(KC, k - pc);
            const float *bsrc = b.half ? 0 : b.p + (ptrdiff_t)pc * b.row + (ptrdiff_t)jc * b.col;
            size_t ragged = nc % NR;
            if (b.half) pack_b_half(kc, nc, b.half + (ptrdiff_t)pc * b.row + (ptrdiff_t)jc * b.col, b.row, b.col, bp);
            else if (packed) pack_b(kc, nc, bsrc, b.row, b.col, bp);
            else if (ragged) pack_b(kc, ragged, bsrc + (ptrdiff_t)(nc - ragged), b.row, 1, bp);
            for (size_t ic = 0; ic < m; ic += MC) {
                size_t mc = min_size(MC, m - ic);
                pack_a(mc, kc, a.p + (ptrdiff_t)ic * a.row + (ptrdiff_t)pc * a.col, a.row, a.col, ap);
                float *cb = c + (ptrdiff_t)ic * c_row + (ptrdiff_t)jc;
                tile_block(mc, nc, kc, ap, packed ? bp : bsrc, b.row, bp, cb, c_row, pc > 0, pc + kc >= k ? ep : 0,
                           ic, jc, packed);
                if (ep && ep->act && !cheap_act(ep->act) && pc + kc >= k)
                    for (size_t r = 0; r < mc; ++r)
                        activate_span(nc, cb + (ptrdiff_t)r * c_row, ep->act, cb + (ptrdiff_t)r * c_row);
            }
            pc += kc;
        } while (pc < k);
    }
}

/* Threads (pool.h): the batch when it divides evenly among them (or is large), else columns in
 * whole panels of NR, else rows (never fewer than SMALL_M_DIRECT + 1 a part, so that every part
 * takes the packed path the whole product would). Every element is then summed exactly as on one
 * thread: the same bits. Each part has its own GEMM_SCRATCH. */
#define GEMM_PART_WORK 65536       /* multiply-adds a part at least (measured: see README, Threads) */

enum { SPLIT_BATCH, SPLIT_COLUMNS, SPLIT_ROWS };

typedef struct {
    size_t batch, m, n, k;
    const float *a;
    ptrdiff_t a_batch, a_row, a_col;
    const float *b;
    const uint16_t *half;
    ptrdiff_t b_batch, b_row, b_col;
    float *c;
    ptrdiff_t c_batch, c_row;
    epilogue ep;
    float *scratch;
    int split;
} gemm_job;

static void gemm_part(void *arg, size_t part, size_t parts) {
    const gemm_job *g = arg;
    size_t q0 = 0, q1 = g->batch, i0 = 0, i1 = g->m, j0 = 0, j1 = g->n;
    if (g->split == SPLIT_BATCH) pool_range(g->batch, part, parts, &q0, &q1);
    else if (g->split == SPLIT_COLUMNS) pool_range_step(g->n, NR, part, parts, &j0, &j1);
    else pool_range_step(g->m, MR, part, parts, &i0, &i1);
    if (q0 >= q1 || i0 >= i1 || j0 >= j1) return;
    epilogue ep = g->ep;
    if (ep.bias) ep.bias += (ptrdiff_t)i0 * ep.bias_row + (ptrdiff_t)j0 * ep.bias_col;
    ptrdiff_t b_at = (ptrdiff_t)j0 * g->b_col;
    for (size_t q = q0; q < q1; ++q) {
        ptrdiff_t bq = (ptrdiff_t)q * g->b_batch + b_at;
        matrix ma = {g->a + (ptrdiff_t)q * g->a_batch + (ptrdiff_t)i0 * g->a_row, g->a_row, g->a_col, 0};
        matrix mb = {g->half ? 0 : g->b + bq, g->b_row, g->b_col, g->half ? g->half + bq : 0};
        gemm_run(i1 - i0, j1 - j0, g->k, ma, mb, g->c + (ptrdiff_t)q * g->c_batch + (ptrdiff_t)i0 * g->c_row +
                 (ptrdiff_t)j0, g->c_row, &ep, g->scratch + part * GEMM_SCRATCH);
    }
}

/* how many parts, and along which axis */
static size_t gemm_parts(size_t batch, size_t m, size_t n, size_t k, int *split) {
    unsigned long long work = (unsigned long long)batch * m * n * (k ? k : 1) / GEMM_PART_WORK;
    size_t parts = pool_parts(work > (size_t)-1 ? (size_t)-1 : (size_t)work, 1);
    if (parts <= 1) return 1;
    size_t panels = (n + NR - 1) / NR, row_parts = m / (SMALL_M_DIRECT + 1);
    if (batch >= parts && (batch % parts == 0 || batch >= 4 * parts || panels < 2)) {
        *split = SPLIT_BATCH;
        return parts;
    }
    if (panels >= 2) {
        *split = SPLIT_COLUMNS;
        return parts < panels ? parts : panels;
    }
    if (batch > 1) {
        *split = SPLIT_BATCH;
        return parts < batch ? parts : batch;
    }
    if (row_parts >= 2) {
        *split = SPLIT_ROWS;
        return parts < row_parts ? parts : row_parts;
    }
    return 1;
}

/* `batch` products, one gemm_run each (split among the threads); B's float32 pointer or (half)
 * its float16 one */
static size_t gemm_batched(size_t batch, size_t m, size_t n, size_t k,
                           const float *a, ptrdiff_t a_batch, ptrdiff_t a_row, ptrdiff_t a_col,
                           const float *b, const uint16_t *half, ptrdiff_t b_batch, ptrdiff_t b_row, ptrdiff_t b_col,
                           float *c, ptrdiff_t c_batch, ptrdiff_t c_row,
                           const float *bias, ptrdiff_t bias_row, ptrdiff_t bias_col, int act,
                           float *scratch, size_t scratch_size) {
    int split = SPLIT_BATCH;
    size_t parts = gemm_parts(batch, m, n, k, &split);
    if (scratch_size < parts * GEMM_SCRATCH) return parts * GEMM_SCRATCH;
    gemm_job job = {batch, m, n, k, a, a_batch, a_row, a_col, b, half, b_batch, b_row, b_col, c, c_batch, c_row,
                    {bias, bias_row, bias_col, act}, scratch, split};
    pool_run(parts, gemm_part, &job);
    return 0;
}

EXPORT size_t gemm_f32(size_t batch, size_t m, size_t n, size_t k,
                       const float *a, ptrdiff_t a_batch, ptrdiff_t a_row, ptrdiff_t a_col,
                       const float *b, ptrdiff_t b_batch, ptrdiff_t b_row, ptrdiff_t b_col,
                       float *c, ptrdiff_t c_batch, ptrdiff_t c_row,
                       const float *bias, ptrdiff_t bias_row, ptrdiff_t bias_col, int act,
                       float *scratch, size_t scratch_size) {
    return gemm_batched(batch, m, n, k, a, a_batch, a_row, a_col, b, 0, b_batch, b_row, b_col, c, c_batch, c_row,
                        bias, bias_row, bias_col, act, scratch, scratch_size);
}

/* gemm_f32 with B in float16 (a linear layer's weight kept as its checkpoint stores it), widened
 * exactly: the same products as gemm_f32 on B cast to float32, up to summation order. */
EXPORT size_t gemm_f16w_f32(size_t batch, size_t m, size_t n, size_t k,
                            const float *a, ptrdiff_t a_batch, ptrdiff_t a_row, ptrdiff_t a_col,
                            const uint16_t *b, ptrdiff_t b_batch, ptrdiff_t b_row, ptrdiff_t b_col,
                            float *c, ptrdiff_t c_batch, ptrdiff_t c_row,
                            const float *bias, ptrdiff_t bias_row, ptrdiff_t bias_col, int act,
                            float *scratch, size_t scratch_size) {
    return gemm_batched(batch, m, n, k, a, a_batch, a_row, a_col, 0, b, b_batch, b_row, b_col, c, c_batch, c_row,
                        bias, bias_row, bias_col, act, scratch, scratch_size);
}
