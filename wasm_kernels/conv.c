/* 2-D convolution, NCHW: im2col + GEMM (any groups), direct 1x1; depthwise in depthwise.c.
 *
 * Padding is explicit (zeros outside the input), so no padded copy is needed; a
 * pre-padded input simply passes zero pads. Output extent per dim: out_extent (geometry.h).
 */
#include "exports.h"
#include "depthwise.h"
#include "gemm.h"
#include "geometry.h"
#include "pool.h"

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

static inline size_t min_size_conv(size_t a, size_t b) { return a < b ? a : b; }

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

/* The im2col columns straight in gemm_packed_b's layout (the GEMM's packed B): rows p0 <= p <
 * p0 + kc of the columns (p = (ch * kh + i) * kw + j) at the nc output positions from q0 = oy * wo
 * + ox, in panels of NR positions, bp[panel][p - p0][t], positions past nc zero. Making the
 * columns once, in the order the register tile reads them, saves a copy of the largest operand.
 * A panel whose taps all fall inside the image (most of them) copies NR inputs a row of the
 * panel from a table of offsets; the others check each tap. */
static void im2col_panels(size_t h, size_t w, const float *x, const geometry *g, size_t q0, size_t nc, size_t p0,
                          size_t kc, float *bp) {
    const size_t kh = g->kh, kw = g->kw, sh = g->sh, sw = g->sw, wo = g->wo, taps = kh * kw;
    const ptrdiff_t top = (ptrdiff_t)g->pad_top, left = (ptrdiff_t)g->pad_left, hh = (ptrdiff_t)h, ww = (ptrdiff_t)w;
    const ptrdiff_t reach_y = (ptrdiff_t)(g->dh * (kh - 1)), reach_x = (ptrdiff_t)(g->dw * (kw - 1));
    ptrdiff_t off[KC], dy[KC], dx[KC];                /* each row's tap, from the panel's top-left input */
    for (size_t p = 0, ch = p0 / taps, i = p0 % taps / kw, j = p0 % kw; p < kc; ++p) {
        dy[p] = (ptrdiff_t)(i * g->dh);
        dx[p] = (ptrdiff_t)(j * g->dw);
        off[p] = ((ptrdiff_t)ch * hh + dy[p]) * ww + dx[p];
        if (++j == kw) {
            j = 0;
            if (++i == kh) i = 0, ++ch;
        }
    }
    for (size_t j0 = 0; j0 < nc; j0 += NR, bp += kc * NR) {
        size_t nr = min_size_conv(NR, nc - j0), q = q0 + j0, oy = q / wo, ox = q % wo;
        ptrdiff_t iy = (ptrdiff_t)(oy * sh) - top, ix = (ptrdiff_t)(ox * sw) - left;
        if (nr == NR && ox + NR <= wo && iy >= 0 && iy + reach_y < hh && ix >= 0 &&
            ix + (ptrdiff_t)((NR - 1) * sw) + reach_x < ww) {
            const float *src = x + iy * ww + ix;
            float *d = bp;
            if (sw == 1) {
                for (size_t p = 0; p < kc; ++p, d += NR)
                    for (size_t t = 0; t < NR; t += 4) store4(d + t, load4(src + off[p] + t));
            } else if (sw == 2 && ix + (ptrdiff_t)(2 * NR) + reach_x <= ww) {    /* the even lanes of 2 NR */
                for (size_t p = 0; p < kc; ++p, d += NR)
                    for (size_t t = 0; t < NR; t += 4) {
                        const float *s2 = src + off[p] + 2 * t;
                        store4(d + t, __builtin_shufflevector(load4(s2), load4(s2 + 4), 0, 2, 4, 6));
                    }
            } else {
                for (size_t p = 0; p < kc; ++p, d += NR)
                    for (size_t t = 0; t < NR; ++t) d[t] = src[off[p] + (ptrdiff_t)(t * sw)];
            }
            continue;
        }
        if (nr == NR && ox + NR <= wo) {                /* in one output row, by the image's edge */
            float *d = bp;
            for (size_t p = 0; p < kc; ++p, d += NR) {
                ptrdiff_t yy = iy + dy[p], xx = ix + dx[p];
                const float *row = x + off[p] + iy * ww + ix;
                if (yy < 0 || yy >= hh) {
                    for (size_t t = 0; t < NR; t += 4) store4(d + t, splat(0.0f));
                } else if (sw == 1 && xx >= 0 && xx + (ptrdiff_t)NR <= ww) {
                    for (size_t t = 0; t < NR; t += 4) store4(d + t, load4(row + t));
                } else {
                    for (size_t t = 0; t < NR; ++t) {
                        ptrdiff_t at = xx + (ptrdiff_t)(t * sw);
                        d[t] = at >= 0 && at < ww ? row[(ptrdiff_t)(t * sw)] : 0.0f;
                    }
                }
            }
            continue;
        }
        ptrdiff_t ys[NR], xs[NR];                       /* each position's top-left input tap */
        for (size_t t = 0, y = oy, xo = ox; t < NR; ++t) {
            ys[t] = t < nr ? (ptrdiff_t)(y * sh) - top : -hh - reach_y - 1;     /* past nc: outside */
            xs[t] = (ptrdiff_t)(xo * sw) - left;
            if (++xo == wo) xo = 0, ++y;
        }
        float *d = bp;
        for (size_t p = 0; p < kc; ++p, d += NR)
            for (size_t t = 0; t < NR; ++t) {
                ptrdiff_t yy = ys[t] + dy[p], xx = xs[t] + dx[p];
                d[t] = yy >= 0 && yy < hh && xx >= 0 && xx < ww ? x[off[p] + ys[t] * ww + xs[t]] : 0.0f;
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

enum { CONV_IMAGES, CONV_ROWS, CONV_CHANNELS };

typedef struct {
    size_t n, c, h, w, o, groups, cg, og, depth, plane, rows_per_part, per_part;
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
    float *scratch = j->scratch + part * j->per_part;
    for (size_t img = img0; img < img1; ++img)
        for (size_t grp = 0; grp < j->groups; ++grp) {
            const float *xg = j->x + (img * j->c + grp * j->cg) * j->h * j->w;
            matrix a = {j->weight + (grp * j->og + m0) * j->depth, (ptrdiff_t)j->depth, 1, 0};
            epilogue ep = {j->bias ? j->bias + grp * j->og + m0 : 0, 1, 0, j->act};
            float *yg = j->y + (img * j->o + grp * j->og + m0) * j->plane;
            if (j->direct) {
                matrix b = {xg + oy0 * g->wo, (ptrdiff_t)j->plane, 1, 0};
                gemm_run(m1 - m0, (oy1 - oy0) * g->wo, j->depth, a, b, yg + oy0 * g->wo, (ptrdiff_t)j->plane, &ep,
                         scratch);
                continue;
            }
            /* the columns made a GEMM block at a time, already packed: the same k blocks, in the
               same order, as gemm_run */
            for (size_t q = oy0 * g->wo, end = oy1 * g->wo; q < end; q += NC) {
                size_t nc = min_size_conv(NC, end - q), pc = 0;
                do {
                    size_t kc = min_size_conv(KC, j->depth - pc);
                    im2col_panels(j->h, j->w, xg, g, q, nc, pc, kc, scratch);
                    matrix ak = {a.p + pc, a.row, 1, 0};
                    gemm_packed_b(m1 - m0, nc, kc, ak, scratch, yg + q, (ptrdiff_t)j->plane, pc > 0,
                                  pc + kc >= j->depth ? &ep : 0, q, scratch + (size_t)KC * NC);
                    pc += kc;
                } while (pc < j->depth);
            }
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
    size_t per_part = GEMM_SCRATCH;
    if (scratch_size < parts * per_part) return parts * per_part;
    conv_job job = {n, c, h, w, o, groups, cg, og, depth, plane, rows, per_part, x, weight, bias, &g, act,
                    direct, split, y, scratch};
    pool_run(parts, conv_part, &job);
    return 0;
}
