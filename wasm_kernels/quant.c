/* The quantized kernels of engine.ops: linear_q (x times a GGML-quantized weight, transposed)
 * and embedding_q (rows of it, dequantized). The weight is GGML's own bytes, row after row.
 *
 * linear_q quantizes x per block of 32 to 14-bit integers (quant_acts.c). One row of x (decoding)
 * streams the weight once, unpacking each block as it comes. Several rows of a 32-element block
 * type (a prompt) take the panel path (quant_common.h): x and each chunk of weight rows are laid
 * out once as int16 panels, then a tile of PANEL_R rows of x times PANEL_C weight rows runs over
 * them with nothing but multiply-adds in its loop. Q4_K, Q5_K and Q6_K take it too, their
 * sub-block scales multiplied into the int16 values (quant_k.c; 1.8-1.9x the GFLOP/s of their
 * four-rows path natively, 128 rows x 1536 -> 8960). Q2_K and Q3_K run the rows of x four at a
 * time against every weight row of a chunk small enough to stay in cache (each block unpacked
 * once for the four), then the rows left one at a time. */
#include "exports.h"
#include "quant_common.h"
#include "quant_acts.h"
#include "quant_k.h"
#include "quant_small.h"
#include "pool.h"

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

/* --- many rows of x: panels (quant_common.h) ----------------------------------------------------- */
#define PANEL_MIN_ROWS 2          /* one row of x (decoding) streams the weight instead (no reuse to pay for unpacking) */
#define PANEL_R 5                 /* rows of x per tile */
#define PANEL_C 2                 /* weight rows per tile */
#define PANEL_CHUNK_BYTES 98304   /* unpacked weight rows per chunk (L2-resident, reused by every tile of x) */
_Static_assert(PANEL_R * PANEL_C <= 16, "the float sums of a tile share 16 vectors of scratch with quantize_panel_row");

/* The panels must give what the one-row path gives, bit for bit: a prompt fed whole and the same
 * tokens fed one by one (a chat reusing its cache) must not drift apart. So a group of 2 or 1
 * blocks, whose vectors spread a block over 4 / blocks lanes, has its sums (integers: exact) and
 * its scales gathered to one lane per block, block b in lane b % 4 with zeros elsewhere, before
 * any float arithmetic, as rows_of has them; and a row's 4 lanes are summed as hsum4 does. */
static inline v4i tail_sums(v4i s, size_t blocks, size_t lane) {
    if (blocks == 2) return hadd4(s, splati(0));                 /* (b0, b1, 0, 0) */
    v4i t = splati(0);
    t[lane] = (s[0] + s[1]) + (s[2] + s[3]);
    return t;
}
/* v: a tail group's per-lane scales, repeated over a block's lanes or in its first lane only */
static inline v4f tail_scales(v4f v, size_t blocks, size_t lane) {
    if (blocks == 2) return __builtin_shufflevector(v, splat(0.0f), 0, 2, 4, 4);
    v4f t = splat(0.0f);
    t[lane] = v[0];
    return t;
}
/* hsum4 of a, b, c, e in one vector: lane i = (v0 + v2) + (v1 + v3) of the i-th */
static inline v4f hsum4x4(v4f a, v4f b, v4f c, v4f e) {
    v4f ab02 = __builtin_shufflevector(a, b, 0, 4, 2, 6), ce02 = __builtin_shufflevector(c, e, 0, 4, 2, 6);
    v4f ab13 = __builtin_shufflevector(a, b, 1, 5, 3, 7), ce13 = __builtin_shufflevector(c, e, 1, 5, 3, 7);
    v4f even = __builtin_shufflevector(ab02, ce02, 0, 1, 4, 5) + __builtin_shufflevector(ab02, ce02, 2, 3, 6, 7);
    v4f odd = __builtin_shufflevector(ab13, ce13, 0, 1, 4, 5) + __builtin_shufflevector(ab13, ce13, 2, 3, 6, 7);
    return even + odd;
}

/* y[r * y_row + c] = (x row r) . (weight row c) + bias[c], r < R, c < C, from a panel of R rows of
 * x and one of C weight rows: per group of blocks R x C int32 accumulators (lane i: block i, or
 * its share of lanes) over the group's multiply-adds, then the scales: acc += float(sums) * dx * d
 * (+ dx sum(q) * m). The loop over a group's vectors stays a loop: unrolled (by clang, or by hand)
 * V8 loads the whole body first and spills (1.1-1.8x slower). The float accumulators live in memory
 * (acc: R * C vectors of scratch), stored after each group: with the int32 ones, the rows of x
 * and the weights they would outgrow V8's 16 vector registers and spill inside the loop. */
static inline __attribute__((always_inline)) void panel_tile(size_t R, size_t C, int mins, size_t nb,
                                                             const uint8_t *x, const uint8_t *w, v4f *acc,
                                                             const float *bias, float *y, size_t y_row) {
    for (size_t i = 0; i < R * C; ++i) acc[i] = splat(0.0f);
    for (size_t g = 0; g < panel_groups(nb); ++g) {
        const size_t vectors = 4 * group_blocks(nb, g);
        const v8i16 *xv = (const v8i16 *)x, *wv = (const v8i16 *)w;
        /* named accumulators, not an array: clang kept the array on the wasm stack and stored all
         * of it at every step (a store per multiply-add: 1.3x slower in Chromium) */
        _Static_assert(PANEL_R == 5 && PANEL_C == 2, "one named accumulator per (row, column) of a tile");
        v4i s00 = splati(0), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00, s31 = s00,
            s40 = s00, s41 = s00;
#ifdef __clang__
#pragma clang loop unroll(disable)
#endif
        for (size_t v = 0; v < vectors; ++v, xv += R, wv += C) {
            const v8i16 w0 = wv[0], w1 = C > 1 ? wv[1] : w0;
#define PANEL_ROW(r)                                  \
            if (R > r) {                              \
                const v8i16 xr = xv[r];               \
                s##r##0 += madd16(xr, w0);            \
                if (C > 1) s##r##1 += madd16(xr, w1); \
            }
            PANEL_ROW(0) PANEL_ROW(1) PANEL_ROW(2) PANEL_ROW(3) PANEL_ROW(4)
#undef PANEL_ROW
        }
        /* the scales, read before acc is written (clang cannot tell that acc is not the panels) */
        const v4f *xs = (const v4f *)xv, *ws = (const v4f *)wv;
        const size_t blocks = vectors / 4, lane = group_first(nb, g) % 4;
        v4f d[PANEL_C], m[PANEL_C];
        for (size_t c = 0; c < C; ++c) {
            d[c] = blocks == 4 ? ws[c] : tail_scales(ws[c], blocks, lane);
            m[c] = blocks == 4 ? ws[C + c] : tail_scales(ws[C + c], blocks, lane);
        }
        /* as rows_of: d * dx, then the min term; sums straight from the named accumulators */
#define PANEL_SCALE(r, c)                                                                           \
        if (R > r && C > c) {                                                                       \
            const v4i sums = blocks == 4 ? s##r##c : tail_sums(s##r##c, blocks, lane);              \
            v4f a = madd(__builtin_convertvector(sums, v4f), d[c] * dx, acc[r * C + c]);            \
            if (mins) a = madd(m[c], xsum, a);                                                      \
            acc[r * C + c] = a;                                                                     \
        }
#define PANEL_SCALE_ROW(r)                                                                          \
        if (R > r) {                                                                                \
            v4f dx = xs[r], xsum = xs[R + r];                                                       \
            if (blocks < 4) {                                                                       \
                dx = tail_scales(dx, blocks, lane);                                                 \
                xsum = tail_scales(xsum, blocks, lane);                                             \
            }                                                                                       \
            PANEL_SCALE(r, 0) PANEL_SCALE(r, 1)                                                     \
        }
        PANEL_SCALE_ROW(0) PANEL_SCALE_ROW(1) PANEL_SCALE_ROW(2) PANEL_SCALE_ROW(3) PANEL_SCALE_ROW(4)
#undef PANEL_SCALE_ROW
#undef PANEL_SCALE
        __asm__ volatile("" ::: "memory");      /* acc stays in memory (see above) */
        x = (const uint8_t *)(xs + 2 * R);
        w = (const uint8_t *)(ws + 2 * C);
    }
    if (C == 2) {                               /* two rows at a time: their 4 sums in one vector */
        const v4f b = bias ? (v4f){bias[0], bias[1], bias[0], bias[1]} : splat(0.0f);
        for (size_t r = 0; r < R; r += 2) {
            const size_t r1 = r + 1 < R ? r + 1 : r;
            v4f h = hsum4x4(acc[2 * r], acc[2 * r + 1], acc[2 * r1], acc[2 * r1 + 1]) + b;
            y[r * y_row] = h[0];
            y[r * y_row + 1] = h[1];
            if (r1 != r) {
                y[r1 * y_row] = h[2];
                y[r1 * y_row + 1] = h[3];
            }
        }
    } else {
        for (size_t r = 0; r < R; ++r)
            for (size_t c = 0; c < C; ++c) y[r * y_row + c] = hsum4(acc[r * C + c]) + (bias ? bias[c] : 0.0f);
    }
}

/* A tile of R rows of x (panel x) times `count` weight rows (panels of PANEL_C rows from w, the
 * last one of the rows left): y[r * y_row + n] + bias[n]. panel_tile with R (1..PANEL_R), C and
 * mins as compile-time constants, each its own unrolled body. */
#define STRIPS(R_, M_)                                                                              \
    do {                                                                                            \
        size_t c0 = 0;                                                                              \
        for (; c0 + PANEL_C <= count; c0 += PANEL_C)                                                \
            panel_tile(R_, PANEL_C, M_, nb, x, w + c0 * stride, acc, bias ? bias + c0 : 0, y + c0, y_row); \
        for (; c0 < count; ++c0)                                                                    \
            panel_tile(R_, 1, M_, nb, x, w + c0 * stride, acc, bias ? bias + c0 : 0, y + c0, y_row);       \
    } while (0)
#define TILES(M_)                                   \
    switch (R) {                                    \
    case 1: STRIPS(1, M_); break;                   \
    case 2: STRIPS(2, M_); break;                   \
    case 3: STRIPS(3, M_); break;                   \
    case 4: STRIPS(4, M_); break;                   \
    default: STRIPS(PANEL_R, M_); break;            \
    }
static __attribute__((noinline)) void panel_tiles(size_t R, int mins, size_t nb, const uint8_t *x, const uint8_t *w,
                                                  size_t count, v4f *acc, const float *bias, float *y, size_t y_row) {
    const size_t stride = panel_stride(nb);
    if (mins) TILES(1) else TILES(0)
}

/* the rows of x in tiles of PANEL_R or one fewer (37 = 5 x 5 + 3 x 4: no tile of 1 or 2 rows, which
 * would run at a fraction of the speed): tile t's first row */
static inline size_t tile_start(size_t m, size_t tiles, size_t t) {
    return t * (m / tiles) + (t < m % tiles ? t : m % tiles);
}

/* x (m rows) quantized to panels of up to PANEL_R rows (evens: 16 vectors of scratch) */
static void quantize_panels(size_t m, size_t nb, const float *x, ptrdiff_t x_row, uint8_t *xp, v4u *evens) {
    const size_t stride = panel_stride(nb), tiles = (m + PANEL_R - 1) / PANEL_R;
    for (size_t t = 0; t < tiles; ++t) {
        const size_t r0 = tile_start(m, tiles, t), R = tile_start(m, tiles, t + 1) - r0;
        for (size_t k = 0; k < R; ++k)
            quantize_panel_row(nb, x + (ptrdiff_t)(r0 + k) * x_row, xp + r0 * stride, R, k, evens);
    }
}

/* weight rows [n0, n1) against the panels of x: per chunk of weight rows, the chunk unpacked to
 * panels of PANEL_C rows (wp), and every tile of x against them (the chunk is read from L2 once per
 * tile of x; a tile of x stays in L1). y rows are y_row apart. */
static void panel_products(int type, size_t m, size_t n0, size_t n1, size_t nb, size_t row_bytes, size_t chunk,
                           const uint8_t *xp, const uint8_t *weight, const float *bias, float *y, size_t y_row,
                           uint8_t *wp) {
    const size_t stride = panel_stride(nb), tiles = (m + PANEL_R - 1) / PANEL_R;
    const int mins = type == Q4_1 || type == Q5_1 || type == Q4_K || type == Q5_K;
    v4f *acc = (v4f *)(wp + chunk * stride);                 /* 16 vectors: the tiles' float sums */
    for (size_t n = n0; n < n1; n += chunk) {
        const size_t count = n1 - n < chunk ? n1 - n : chunk;
        if (is_small(type)) small_panel(type, weight + n * row_bytes, count, row_bytes, nb, wp, PANEL_C);
        else k_panel(type, weight + n * row_bytes, count, row_bytes, nb, wp, PANEL_C);
        for (size_t t = 0; t < tiles; ++t) {
            const size_t r0 = tile_start(m, tiles, t), R = tile_start(m, tiles, t + 1) - r0;
            panel_tiles(R, mins, nb, xp + r0 * stride, wp, count, acc, bias ? bias + n : 0, y + r0 * y_row + n, y_row);
        }
    }
}

/* Threads (pool.h): the weight rows (outputs), in even runs of QUANT_PART_STEP, x quantized once
 * beforehand by the caller; each part has its own unpacked chunk. Every output is summed as on
 * one thread: the same bits. */
#define QUANT_PART_WORK 131072          /* weights a part at least (measured: see README, Threads) */
#define QUANT_PART_STEP 4

typedef struct {
    int type, panels;
    size_t m, rows, nb, row_bytes, chunk, per_part;
    const acts *a;
    const uint8_t *xp, *weight;
    const float *bias;
    float *y;
    uint8_t *parts_base;
} linear_q_job;

static void linear_q_part(void *arg, size_t part, size_t parts) {
    const linear_q_job *j = arg;
    size_t n0, n1;
    pool_range_step(j->rows, QUANT_PART_STEP, part, parts, &n0, &n1);
    if (n0 >= n1) return;
    if (j->panels) {
        panel_products(j->type, j->m, n0, n1, j->nb, j->row_bytes, j->chunk, j->xp, j->weight, j->bias, j->y,
                       j->rows, j->parts_base + part * j->per_part);
        return;
    }
    for (size_t n = n0; n < n1; n += j->chunk) {
        size_t count = n1 - n < j->chunk ? n1 - n : j->chunk;
        const uint8_t *w = j->weight + n * j->row_bytes;
        const float *b = j->bias ? j->bias + n : 0;
        for (size_t r = 0; r < j->m;) {
            size_t step = j->m - r >= ROWS_AT_ONCE ? ROWS_AT_ONCE : 1;
            float *out = j->y + r * j->rows + n;
            if (is_small(j->type)) small_rows(j->type, step, w, count, j->row_bytes, j->nb, j->a, r, b, out, j->rows);
            else k_rows(j->type, step, w, count, j->row_bytes, j->nb, j->a, r, b, out, j->rows);
            r += step;
        }
    }
}

/* y (m, rows) = x (m, cols; rows x_row apart) times the weight (rows, cols) transposed, + bias.
 * Needs (round16 of) m quantized rows of x in scratch, and with panels per part a chunk of
 * unpacked weight rows and 16 vectors more. */
EXPORT size_t linear_q_f32(int type, size_t m, size_t rows, size_t cols, const float *x, ptrdiff_t x_row,
                           const uint8_t *weight, const float *bias, float *y, float *scratch, size_t scratch_size) {
    const size_t nb = cols / 32, row_bytes = row_bytes_of(type, cols);
    const int panels = (is_small(type) || k_panelled(type)) && m >= PANEL_MIN_ROWS && nb > 0;
    unsigned long long work = (unsigned long long)m * rows * cols / QUANT_PART_WORK;
    size_t steps = (rows + QUANT_PART_STEP - 1) / QUANT_PART_STEP;
    size_t parts = row_bytes ? pool_parts(work > steps ? steps : (size_t)work, 1) : 1;
    size_t chunk = 0, per_part = 0, need;
    acts a = act_layout(nb);
    if (panels) {                                        /* whole tiles of weight rows per chunk */
        chunk = PANEL_CHUNK_BYTES / panel_stride(nb) / PANEL_C * PANEL_C;
        size_t most = (rows + parts - 1) / parts;
        chunk = chunk < PANEL_C ? PANEL_C : chunk > most ? (most + PANEL_C - 1) / PANEL_C * PANEL_C : chunk;
        per_part = chunk * panel_stride(nb) + 16 * 16;
        need = (m * panel_stride(nb) + parts * per_part + 16) / sizeof(float) + 1;
    } else {
        need = (m * a.stride + 16) / sizeof(float) + 1;
    }
    if (scratch_size < need) return need;
    if (!row_bytes) {                                    /* unknown type, or no columns */
        for (size_t i = 0; i < m * rows; ++i) y[i] = cols ? __builtin_nanf("") : bias ? bias[i % rows] : 0.0f;
        return 0;
    }
    uint8_t *aligned = (uint8_t *)(((uintptr_t)scratch + 15) & ~(uintptr_t)15);
    linear_q_job job = {type, panels, m, rows, nb, row_bytes, chunk, per_part, &a, aligned, weight, bias, y,
                        aligned + m * panel_stride(nb)};
    if (panels) {
        quantize_panels(m, nb, x, x_row, aligned, (v4u *)job.parts_base);
    } else {
        a.base = aligned;
        for (size_t r = 0; r < m; ++r) quantize_row(nb, x + (ptrdiff_t)r * x_row, &a, r);
        job.chunk = m == 1 ? rows : CHUNK_BYTES / row_bytes ? CHUNK_BYTES / row_bytes : 1;
    }
    pool_run(parts, linear_q_part, &job);
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
