/* 2-D convolution, NCHW: im2col + GEMM (any groups), direct 1x1; depthwise in depthwise.c.
 *
 * Padding is explicit (zeros outside the input), so no padded copy is needed; a
 * pre-padded input simply passes zero pads. Output extent per dim:
 * (in + pad_before + pad_after - dilation * (kernel - 1) - 1) / stride + 1.
 */
#include "conv.h"
#include "gemm.h"

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

/* cols[(ch * kh + i) * kw + j][oy * wo + ox] = x[ch][oy * sh + i * dh - pad_top][ox * sw + j * dw - pad_left] */
static void im2col(size_t c, size_t h, size_t w, const float *x, const geometry *g, float *cols) {
    size_t plane = g->ho * g->wo;
    for (size_t ch = 0; ch < c; ++ch)
        for (size_t i = 0; i < g->kh; ++i)
            for (size_t j = 0; j < g->kw; ++j) {
                float *dst = cols + ((ch * g->kh + i) * g->kw + j) * plane;
                ptrdiff_t xoff = (ptrdiff_t)(j * g->dw) - (ptrdiff_t)g->pad_left;
                size_t lo, hi, ylo, yhi;
                valid_range(xoff, g->sw, w, g->wo, &lo, &hi);
                valid_range((ptrdiff_t)(i * g->dh) - (ptrdiff_t)g->pad_top, g->sh, h, g->ho, &ylo, &yhi);
                for (size_t oy = 0; oy < g->ho; ++oy) {
                    float *d = dst + oy * g->wo;
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
    im2col(c, h, w, x, &g, cols);
}

EXPORT size_t conv2d_f32(size_t n, size_t c, size_t h, size_t w, const float *x, size_t o, size_t kh, size_t kw,
                         const float *weight, size_t groups, size_t sh, size_t sw, size_t dh, size_t dw,
                         size_t pad_top, size_t pad_left, size_t pad_bottom, size_t pad_right,
                         const float *bias, int act, float *y, float *scratch, size_t scratch_size) {
    geometry g = make_geometry(h, w, kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right);
    if (g.ho == 0 || g.wo == 0 || groups == 0 || n == 0 || o == 0) return 0;
    if (groups == c && o == c) {
        size_t need = depthwise_scratch(h, w, &g);
        if (scratch_size < need) return need;
        depthwise_run(n, c, h, w, x, weight, &g, bias, act, y, scratch);
        return 0;
    }
    size_t cg = c / groups, og = o / groups, depth = cg * kh * kw, plane = g.ho * g.wo;
    int direct = kh == 1 && kw == 1 && sh == 1 && sw == 1 && !(pad_top | pad_left | pad_bottom | pad_right);
    size_t need = GEMM_SCRATCH + (direct ? 0 : depth * plane);
    if (scratch_size < need) return need;
    float *cols = scratch + GEMM_SCRATCH;
    for (size_t img = 0; img < n; ++img)
        for (size_t grp = 0; grp < groups; ++grp) {
            const float *xg = x + (img * c + grp * cg) * h * w;
            matrix b = {direct ? xg : cols, (ptrdiff_t)plane, 1};
            if (!direct) im2col(cg, h, w, xg, &g, cols);
            matrix a = {weight + grp * og * depth, (ptrdiff_t)depth, 1};
            epilogue ep = {bias ? bias + grp * og : 0, 1, 0, act};
            gemm_run(og, plane, depth, a, b, y + (img * o + grp * og) * plane, (ptrdiff_t)plane, &ep, scratch);
        }
    return 0;
}
