/* x quantized for the integer products of the quantized kernels (quant_acts.h): per block of 32,
 * q = round(x / dx) with dx = max|x| / QMAX, as the rows of acts (quant.c's one-row and K-quant
 * paths) or as rows of the panels (quant_common.h). */
#include "quant_acts.h"

typedef int16_t v4i16 __attribute__((vector_size(8)));
typedef int16_t v4i16_u __attribute__((vector_size(8), aligned(1), may_alias));

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

acts act_layout(size_t nb) {
    acts a;
    a.base = 0;
    a.dx = round16(nb * 32 * 2);
    a.xs = a.dx + round16(4 * nb);
    a.s32 = a.xs + round16(4 * nb);
    a.s16 = a.s32 + round16(4 * nb);
    a.stride = a.s16 + round16(8 * nb);
    return a;
}

/* x rounded to nearest even (|x| < 2^22) */
static inline v4i round4(v4f x) {
    return (v4i)(x + splat(12582912.0f)) - (v4i)splat(12582912.0f);
}

/* A block of 32 x -> q = round(x / dx) with dx = max|x| / QMAX (|q| <= QMAX): q[k] holds elements
 * 4k..4k+3; sum(q) over elements 0-15 in *lo, 16-31 in *hi. A block holding inf or NaN gets
 * dx = NaN, so that what it touches is NaN. */
static inline float quantize_block(const float *x, v4i q[8], int32_t *lo, int32_t *hi) {
    v4f v[8], amax = splat(0.0f);
    v4i finite = splati(-1);
    for (int k = 0; k < 8; ++k) {
        v[k] = load4(x + 4 * k);
        v4f m = (v4f)((v4i)v[k] & 0x7fffffff);                 /* |x| */
        finite &= m <= splat(3.4028234664e38f);                 /* false for inf and NaN */
        amax = select4(m > amax, m, amax);
    }
    float top = hmax4(amax), dx, inverse;
    if (top < 0x1p-100f) {              /* a tiny block is scaled by 2^100 first (exactly), so that QMAX / max stays finite */
        for (int k = 0; k < 8; ++k) v[k] *= splat(0x1p100f);
        dx = top * 0x1p100f / (float)QMAX * 0x1p-100f;
        inverse = top > 0.0f ? (float)QMAX / (top * 0x1p100f) : 0.0f;
    } else {
        dx = top / (float)QMAX;
        inverse = (float)QMAX / top;
    }
    if (!all4(finite)) {
        dx = __builtin_nanf("");
        inverse = 0.0f;
    }
    v4i sums[2] = {splati(0), splati(0)};
    for (int k = 0; k < 8; ++k) {
        q[k] = round4(v[k] * splat(inverse));
        sums[k / 4] += q[k];
    }
    *lo = sums[0][0] + sums[0][1] + sums[0][2] + sums[0][3];
    *hi = sums[1][0] + sums[1][1] + sums[1][2] + sums[1][3];
    return dx;
}

void quantize_row(size_t nb, const float *x, const acts *a, size_t r) {
    uint8_t *row = (uint8_t *)a->base + r * a->stride;
    float *dxs = (float *)(row + a->dx), *xss = (float *)(row + a->xs);
    int32_t *s32 = (int32_t *)(row + a->s32), *s16 = (int32_t *)(row + a->s16);
    for (size_t j = 0; j < nb; ++j, x += 32) {
        v4i q[8];
        int32_t lo, hi;
        float dx = quantize_block(x, q, &lo, &hi);
        for (int k = 0; k < 8; k += 2) {                /* per 16: the evens, then the odds */
            int16_t *out = (int16_t *)row + 32 * j + 16 * (k / 4) + 4 * (k / 2 % 2);
            *(v4i16_u *)out = __builtin_convertvector(__builtin_shufflevector(q[k], q[k + 1], 0, 2, 4, 6), v4i16);
            *(v4i16_u *)(out + 8) = __builtin_convertvector(__builtin_shufflevector(q[k], q[k + 1], 1, 3, 5, 7), v4i16);
        }
        s16[2 * j] = lo;
        s16[2 * j + 1] = hi;
        s32[j] = lo + hi;
        dxs[j] = dx;
        xss[j] = dx * (float)(lo + hi);
    }
}

/* --- rows of the panels (quant_common.h) --------------------------------------------------------- */
/* A panel row: q of each block (quantize_block) in quant_common.h's order; per lane dx and
 * dx * sum(q) of its block. A group of 4 blocks goes through `evens`: each block's evens and odds
 * of elements 0-15 and 16-31 (32-bit lane l of those: elements 4l, 4l+2 / 4l+1, 4l+3 / 16 + ...),
 * then the four blocks' vectors transposed (lane i = block i), as the weights' nibbles are. */
void quantize_panel_row(size_t nb, const float *x, uint8_t *panel, size_t K, size_t k, v4u *evens) {
    for (size_t g = 0; g < panel_groups(nb); ++g) {
        const size_t blocks = group_blocks(nb, g), first = group_first(nb, g);
        uint8_t *values = panel + panel_values(nb, K, k, g);
        v4f dx = splat(0.0f), xs = splat(0.0f);
        for (size_t i = 0; i < blocks; ++i) {
            v4i q[8];
            int32_t lo, hi;
            const float d = quantize_block(x + 32 * (first + i), q, &lo, &hi);
            const size_t lane = i * 4 / blocks;                 /* the block's first lane */
            for (size_t l = lane; l < lane + 4 / blocks; ++l) {
                dx[l] = d;
                xs[l] = d * (float)(lo + hi);
            }
            if (blocks == 4) {                       /* evens, odds of 0-15, then of 16-31 */
                for (int h = 0; h < 2; ++h) {
                    const v4i *p = q + 4 * h;
                    evens[4 * (2 * h) + i] = (v4u)narrow16(__builtin_shufflevector(p[0], p[1], 0, 2, 4, 6),
                                                           __builtin_shufflevector(p[2], p[3], 0, 2, 4, 6));
                    evens[4 * (2 * h + 1) + i] = (v4u)narrow16(__builtin_shufflevector(p[0], p[1], 1, 3, 5, 7),
                                                               __builtin_shufflevector(p[2], p[3], 1, 3, 5, 7));
                }
            } else {                                 /* per 8 (2 blocks, 4 lanes each) or 16 elements: evens, odds */
                for (int e = 0; e < 8; e += 2) {
                    v4i16 even = __builtin_convertvector(__builtin_shufflevector(q[e], q[e + 1], 0, 2, 4, 6), v4i16);
                    v4i16 odd = __builtin_convertvector(__builtin_shufflevector(q[e], q[e + 1], 1, 3, 5, 7), v4i16);
                    const size_t v = blocks == 2 ? e : 2 * (e / 4), half = blocks == 2 ? i : e / 2 % 2;
                    *(v4i16_u *)(values + 16 * K * v + 8 * half) = even;
                    *(v4i16_u *)(values + 16 * K * (v + 1) + 8 * half) = odd;
                }
            }
        }
        if (blocks == 4)
            for (size_t c = 0; c < 4; ++c) {         /* vectors 4l + c */
                v4u t[4];
                transpose_words(evens + 4 * c, t);
                for (size_t l = 0; l < 4; ++l) *(v4u *)(values + 16 * K * (4 * l + c)) = t[l];
            }
        store4((float *)(panel + panel_scales(nb, K, k, g)), dx);
        store4((float *)(panel + panel_mins(nb, K, k, g)), xs);
    }
}
