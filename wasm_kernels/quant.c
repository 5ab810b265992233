/* The quantized kernels of engine.ops: linear_q (x times a GGML-quantized weight, transposed)
 * and embedding_q (rows of it, dequantized). The weight is GGML's own bytes, row after row.
 *
 * linear_q quantizes x per block of 32 to 14-bit integers (see quant.h), then for each chunk of weight
 * rows small enough to stay in cache runs the rows of x four at a time against every weight
 * row of the chunk (each block unpacked once for the four), then the rows left one at a time.
 * One row of x (decoding) streams the weight once. */
#include "quant.h"

#define CHUNK_BYTES 32768            /* weight bytes reused across the rows of x */

static inline int is_small(int t) { return t == Q4_0 || t == Q4_1 || t == Q5_0 || t == Q5_1 || t == Q8_0; }
static inline int is_k(int t) { return t == Q2_K || t == Q3_K || t == Q4_K || t == Q5_K || t == Q6_K; }

/* bytes of one row of `cols` elements */
static size_t row_bytes_of(int t, size_t cols) {
    switch (t) {
    case Q4_0: return cols / 32 * 18;
    case Q4_1: return cols / 32 * 20;
    case Q5_0: return cols / 32 * 22;
    case Q5_1: return cols / 32 * 24;
    case Q8_0: return cols / 32 * 34;
    case Q2_K: return cols / 256 * 84;
    case Q3_K: return cols / 256 * 110;
    case Q4_K: return cols / 256 * 144;
    case Q5_K: return cols / 256 * 176;
    case Q6_K: return cols / 256 * 210;
    default: return 0;
    }
}

typedef int16_t v4i16 __attribute__((vector_size(8)));
typedef int16_t v4i16_u __attribute__((vector_size(8), aligned(1), may_alias));

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* where the parts of a quantized row of x go (quant.h's acts), for nb blocks of 32 */
static acts act_layout(size_t nb) {
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

/* Row x (nb blocks of 32) -> q = round(x / dx) with dx = max|x| / QMAX per block (|q| <= QMAX).
 * A block holding inf or NaN gets dx = NaN, so that what it touches is NaN. */
static void quantize_row(size_t nb, const float *x, const acts *a, size_t r) {
    uint8_t *row = (uint8_t *)a->base + r * a->stride;
    float *dxs = (float *)(row + a->dx), *xss = (float *)(row + a->xs);
    int32_t *s32 = (int32_t *)(row + a->s32), *s16 = (int32_t *)(row + a->s16);
    for (size_t j = 0; j < nb; ++j, x += 32) {
        v4f v[8], amax = splat(0.0f);
        v4i finite = splati(-1);
        for (int k = 0; k < 8; ++k) {
            v[k] = load4(x + 4 * k);
            v4f m = select4(v[k] < splat(0.0f), -v[k], v[k]);
            finite &= m <= splat(3.4028234664e38f);
            amax = select4(m > amax, m, amax);
        }
        /* a tiny block is scaled by 2^100 first (exactly), so that QMAX / max stays finite */
        float top = hmax4(amax), up = top < 0x1p-100f ? 0x1p100f : 1.0f, down = top < 0x1p-100f ? 0x1p-100f : 1.0f;
        float dx = all4(finite) ? top * up / (float)QMAX * down : __builtin_nanf("");
        float inverse = top > 0.0f && all4(finite) ? (float)QMAX / (top * up) : 0.0f;
        v4i sums[2] = {splati(0), splati(0)};
        v4i q[8];
        for (int k = 0; k < 8; ++k) {
            q[k] = round4(v[k] * splat(up) * splat(inverse));
            sums[k / 4] += q[k];
        }
        for (int k = 0; k < 8; k += 2) {                /* per 16: the evens, then the odds */
            int16_t *out = (int16_t *)row + 32 * j + 16 * (k / 4) + 4 * (k / 2 % 2);
            *(v4i16_u *)out = __builtin_convertvector(__builtin_shufflevector(q[k], q[k + 1], 0, 2, 4, 6), v4i16);
            *(v4i16_u *)(out + 8) = __builtin_convertvector(__builtin_shufflevector(q[k], q[k + 1], 1, 3, 5, 7), v4i16);
        }
        int32_t lo = sums[0][0] + sums[0][1] + sums[0][2] + sums[0][3];
        int32_t hi = sums[1][0] + sums[1][1] + sums[1][2] + sums[1][3];
        s16[2 * j] = lo;
        s16[2 * j + 1] = hi;
        s32[j] = lo + hi;
        dxs[j] = dx;
        xss[j] = dx * (float)(lo + hi);
    }
}

/* y (m, rows) = x (m, cols; rows x_row apart) times the weight (rows, cols) transposed, + bias.
 * Needs (round16 of) m quantized rows of x in scratch. */
EXPORT size_t linear_q_f32(int type, size_t m, size_t rows, size_t cols, const float *x, ptrdiff_t x_row,
                           const uint8_t *weight, const float *bias, float *y, float *scratch, size_t scratch_size) {
    const size_t nb = cols / 32, row_bytes = row_bytes_of(type, cols);
    acts a = act_layout(nb);
    size_t need = (m * a.stride + 16) / sizeof(float) + 1;
    if (scratch_size < need) return need;
    if (!row_bytes) {                                    /* unknown type, or no columns */
        for (size_t i = 0; i < m * rows; ++i) y[i] = cols ? __builtin_nanf("") : bias ? bias[i % rows] : 0.0f;
        return 0;
    }
    a.base = (const uint8_t *)(((uintptr_t)scratch + 15) & ~(uintptr_t)15);
    for (size_t r = 0; r < m; ++r) quantize_row(nb, x + (ptrdiff_t)r * x_row, &a, r);
    size_t chunk = m == 1 ? rows : CHUNK_BYTES / row_bytes ? CHUNK_BYTES / row_bytes : 1;
    for (size_t n0 = 0; n0 < rows; n0 += chunk) {
        size_t count = rows - n0 < chunk ? rows - n0 : chunk;
        const uint8_t *w = weight + n0 * row_bytes;
        const float *b = bias ? bias + n0 : 0;
        for (size_t r = 0; r < m;) {
            size_t step = m - r >= ROWS_AT_ONCE ? ROWS_AT_ONCE : 1;
            float *out = y + r * rows + n0;
            if (is_small(type)) small_rows(type, step, w, count, row_bytes, nb, &a, r, b, out, rows);
            else k_rows(type, step, w, count, row_bytes, nb, &a, r, b, out, rows);
            r += step;
        }
    }
    return 0;
}

/* y (count, cols) = rows ids[i] of the weight (rows, cols), dequantized as engine.quants does.
 * Returns 0, or i + 1 for the first id out of [0, rows) (then nothing is written). */
EXPORT size_t embedding_q_f32(int type, size_t count, const int64_t *ids, size_t rows, size_t cols,
                              const uint8_t *weight, float *y) {
    for (size_t i = 0; i < count; ++i)
        if (ids[i] < 0 || (uint64_t)ids[i] >= rows) return i + 1;
    const size_t row_bytes = row_bytes_of(type, cols);
    for (size_t i = 0; i < count; ++i, y += cols) {
        const uint8_t *row = weight + (size_t)ids[i] * row_bytes;
        if (is_small(type)) small_dequantize(type, row, cols / 32, y);
        else if (is_k(type)) k_dequantize(type, row, cols / 32, y);
        else for (size_t c = 0; c < cols; ++c) y[c] = __builtin_nanf("");
    }
    return 0;
}
