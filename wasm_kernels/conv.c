/* 2-D convolution, NCHW: im2col + GEMM (any groups), direct 1x1; depthwise in depthwise.c.
 *
 * Padding is explicit (zeros outside the input), so no padded copy is needed; a
 * pre-padded input simply passes zero pads. Output extent per dim:
 * (in + pad_before + pad_after - dilation * (kernel - 1) - 1) / stride + 1.
 */
#include "conv.h"
#include "gemm.h"
#include "pool.h"

static size_t out_extent(size_t in, size_t before, size_t after, size_t k, size_t s, size_t d) {
    size_t span = in + before + after, reach = d * (k - 1) + 1;
    return k == 0 || s == 0 || d == 0 || span < reach ? 0 : (span - reach) / s + 1;
}

geometry make_geometry(size_t h, size_t w, size_t kh, size_t kw, size_t sh, size_t sw, size_t dh, size_t dw,
                       size_t pad_top, size_t pad_left, size_t pad_bottom, size_t pad_right) {
    geometry g = {kh, kw, sh, sw, dh, dw, pad_top, pad_left,
                  out_extent(h, pad_top, pad_bottom, kh, sh, dh), out_extent(w, pad_left, pad_right, kw, sw, dw)};
    return g;
}

/* [*lo, *hi): the o in [0, count) with 0 <= o * s + off < n */
static void valid_range(ptrdiff_t off, size_t s, size_t n, size_t count, size_t *lo, size_t *hi) {
    ptrdiff_t l = off >= 0 ? 0 : (-off + (ptrdiff_t)s - 1) / (ptrdiff_t)s;
    ptrdiff_t top = (ptrdiff_t)n - 1 - off;
    ptrdiff_t h = top < 0 ? 0 : top / (ptrdiff_t)s + 1;
    if (h > (ptrdiff_t)count) h = (ptrdiff_t)count;
    if (l > h) l = h;
    *lo = (size_t)l;
    *hi = (size_t)h;
}

static inline void fill_zero(float *d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) store4(d + i, splat(0.0f));
    for (; i < n; ++i) d[i] = 0.0f;
}

/* cols[(ch * kh + i) * kw + j][(oy - oy0) * wo + ox] = x[ch][oy * sh + i * dh - pad_top][ox * sw + j * dw - pad_left]
 * for the output rows oy0 <= oy < oy1 */
static void im2col(size_t c, size_t h, size_t w, const float *x, const geometry *g, size_t oy0, size_t oy1,
                   float *cols) {
    size_t width = (oy1 - oy0) * g->wo;
    for (size_t ch = 0; ch < c; ++ch)
        for (size_t i = 0; i < g->kh; ++i)
            for (size_t j = 0; j < g->kw; ++j) {
                float *dst = cols + ((ch * g->kh + i) * g->kw + j) * width;
                ptrdiff_t xoff = (ptrdiff_t)(j * g->dw) - (ptrdiff_t)g->pad_left;
                size_t lo, hi, ylo, yhi;
                valid_range(xoff, g->sw, w, g->wo, &lo, &hi);
                valid_range((ptrdiff_t)(i * g->dh) - (ptrdiff_t)g->pad_top, g->sh, h, g->ho, &ylo, &yhi);
                for (size_t oy = oy0; oy < oy1; ++oy) {
                    float *d = dst + (oy - oy0) * g->wo;
                    if (oy < ylo || oy >= yhi || lo == hi) {
                        fill_zero(d, g->wo);
                        continue;
                    }
                    size_t iy = oy * g->sh + i * g->dh - g->pad_top;
                    const float *src = x + (ch * h + iy) * w + (size_t)((ptrdiff_t)(lo * g->sw) + xoff);
                    fill_zero(d, lo);
                    size_t q = 0, count = hi - lo;
                    if (g->sw == 1)
                        for (; q + 4 <= count; q += 4) store4(d + lo + q, load4(src + q));
                    for (; q < count; ++q) d[lo + q] = src[q * g->sw];
                    fill_zero(d + hi, g->wo - hi);
                }
            }
}

EXPORT void im2col_f32(size_t c, size_t h, size_t w, const float *x, size_t kh, size_t kw, size_t sh, size_t sw,
                       size_t dh, size_t dw, size_t pad_top, size_t pad_left, size_t pad_bottom, size_t pad_right,
                       float *cols) {
    geometry g = make_geometry(h, w, kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right);
    im2col(c, h, w, x, &g, 0, g.ho, cols);
}

/* Threads (pool.h): whole images when there are enough of them, else the output rows (each part
 * makes the im2col columns of its rows and multiplies them: the GEMM split by columns), else,
 * on planes too small to share, the output channels in whole register tiles (each part then
 * makes the columns of the whole plane). Every output is summed as on one thread: the same bits. */
#define CONV_PART_WORK 65536        /* multiply-adds a part at least (measured: see README, Threads) */
#define CONV_PART_COLUMNS 64        /* output positions a part at least when splitting rows */
#define CONV_BLOCK_FLOATS (1u << 19)  /* im2col columns made and multiplied at once: 2 MB, so they are
                                         read back from cache (whole 160x160 planes of YOLO's 3x3
                                         convolutions ran 1.5-5x slower through memory) */

enum { CONV_IMAGES, CONV_ROWS, CONV_CHANNELS };

typedef struct {
    size_t n, c, h, w, o, groups, cg, og, depth, plane, rows_per_part, per_part, block;
    const float *x, *weight, *bias;
    const geometry *g;
    int act, direct, split;
    float *y, *scratch;
} conv_job;

static void conv_part(void *arg, size_t part, size_t parts) {
    const conv_job *j = arg;
    const geometry *g = j->g;
    size_t img0 = 0, img1 = j->n, oy0 = 0, oy1 = g->ho, m0 = 0, m1 = j->og;
    if (j->split == CONV_IMAGES) pool_range(j->n, part, parts, &img0, &img1);
    else if (j->split == CONV_ROWS) pool_range(g->ho, part, parts, &oy0, &oy1);
    else pool_range_step(j->og, MR, part, parts, &m0, &m1);
    if (img0 >= img1 || oy0 >= oy1 || m0 >= m1) return;
    float *scratch = j->scratch + part * j->per_part, *cols = scratch + GEMM_SCRATCH;
    for (size_t img = img0; img < img1; ++img)
        for (size_t grp = 0; grp < j->groups; ++grp)
            for (size_t r0 = oy0; r0 < oy1; r0 += j->block) {     /* blocks of output rows: the same
                                                                    sums, the GEMM split by columns */
                size_t r1 = oy1 - r0 < j->block ? oy1 : r0 + j->block;
                size_t width = (r1 - r0) * g->wo, at = r0 * g->wo;
                const float *xg = j->x + (img * j->c + grp * j->cg) * j->h * j->w;
                matrix b = {j->direct ? xg + at : cols, j->direct ? (ptrdiff_t)j->plane : (ptrdiff_t)width, 1, 0};
                if (!j->direct) im2col(j->cg, j->h, j->w, xg, g, r0, r1, cols);
                matrix a = {j->weight + (grp * j->og + m0) * j->depth, (ptrdiff_t)j->depth, 1, 0};
                epilogue ep = {j->bias ? j->bias + grp * j->og + m0 : 0, 1, 0, j->act};
                gemm_run(m1 - m0, width, j->depth, a, b, j->y + (img * j->o + grp * j->og + m0) * j->plane + at,
                         (ptrdiff_t)j->plane, &ep, scratch);
            }
}

EXPORT size_t conv2d_f32(size_t n, size_t c, size_t h, size_t w, const float *x, size_t o, size_t kh, size_t kw,
                         const float *weight, size_t groups, size_t sh, size_t sw, size_t dh, size_t dw,
                         size_t pad_top, size_t pad_left, size_t pad_bottom, size_t pad_right,
                         const float *bias, int act, float *y, float *scratch, size_t scratch_size) {
    geometry g = make_geometry(h, w, kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right);
    if (g.ho == 0 || g.wo == 0 || groups == 0 || n == 0 || o == 0) return 0;
    if (groups == c && o == c) {
        size_t parts = depthwise_parts(n, c, &g), need = parts * depthwise_scratch(h, w, &g);
        if (scratch_size < need) return need;
        depthwise_run(n, c, h, w, x, weight, &g, bias, act, y, scratch, parts);
        return 0;
    }
    size_t cg = c / groups, og = o / groups, depth = cg * kh * kw, plane = g.ho * g.wo;
    int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && !(pad_top | pad_left | pad_bottom | pad_right);
    unsigned long long work = (unsigned long long)n * o * plane * depth / CONV_PART_WORK;
    size_t parts = pool_parts(work > (size_t)-1 ? (size_t)-1 : (size_t)work, 1), rows = g.ho;
    int split = CONV_IMAGES;
    if (parts > 1 && n < parts) {
        size_t by_rows = plane / CONV_PART_COLUMNS < g.ho ? plane / CONV_PART_COLUMNS : g.ho;
        size_t by_channels = og / (SMALL_M_DIRECT + 1);          /* every part on the packed path */
        if (by_rows >= parts || (by_rows >= 2 && by_rows >= by_channels)) {
            split = CONV_ROWS;
            parts = parts < by_rows ? parts : by_rows;
            rows = (g.ho + parts - 1) / parts;
        } else if (by_channels >= 2) {
            split = CONV_CHANNELS;
            parts = parts < by_channels ? parts : by_channels;
        } else {
            parts = n > 1 ? n : 1;
        }
    }
    size_t block = rows;
    if (!direct) {
        size_t fit = CONV_BLOCK_FLOATS / (depth * g.wo);
        block = fit < 1 ? 1 : fit < rows ? fit : rows;
    }
    size_t per_part = GEMM_SCRATCH + (direct ? 0 : depth * block * g.wo);
    if (scratch_size < parts * per_part) return parts * per_part;
    conv_job job = {n, c, h, w, o, groups, cg, og, depth, plane, rows, per_part, block, x, weight, bias, &g, act,
                    direct, split, y, scratch};
    pool_run(parts, conv_part, &job);
    return 0;
}
