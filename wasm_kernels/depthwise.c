/* Direct depthwise convolution (groups == channels, one filter per channel), NCHW.
 *
 * Depthwise layers are memory-bound multiply-adds on planes that may be as small as 7x7,
 * where bounds checks would dominate. So each plane is first copied into a zero-padded
 * scratch plane (the padding, plus slack on the right so that the last vector of a row
 * may run past the output's end); every output vector is then branch-free: 8 outputs
 * at a time (two f32x4 accumulators sharing each weight), then 4, the last one stored in
 * part. Stride 2 reads 8 neighbours and keeps the even lanes; other strides gather.
 */
#include "exports.h"
#include "depthwise.h"
#include "pool.h"

/* multiply-adds a part at least (measured: see README, Threads) */
#define DEPTHWISE_PART_WORK 32768

static inline size_t round_up4(size_t n) { return (n + 3) & ~(size_t)3; }

/* the padded plane: rows of h + pads, row pitch covering the input and every vector's reach */
static size_t padded_pitch(size_t w, const geometry *g) {
    size_t reach = (round_up4(g->wo) - 1) * g->sw + (g->kw - 1) * g->dw + 1 + (g->sw == 2);
    return reach > g->pad_left + w ? reach : g->pad_left + w;
}

/* rows any output reads: the bottom padding past them is never touched */
static size_t padded_rows(const geometry *g) { return (g->ho - 1) * g->sh + (g->kh - 1) * g->dh + 1; }

size_t depthwise_scratch(size_t h, size_t w, const geometry *g) {
    if (g->ho == 0 || g->wo == 0) return 0;
    return padded_rows(g) * padded_pitch(w, g);
}

/* four outputs' inputs for one tap: contiguous, even lanes of eight, or gathered */
static inline v4f tap4(const float *p, size_t sw) {
    if (sw == 1) return load4(p);
    if (sw == 2) return __builtin_shufflevector(load4(p), load4(p + 4), 0, 2, 4, 6);
    return gather4(p, (ptrdiff_t)sw, 4);
}

/* `rows` (1 or 2) output rows at yr from the padded rows at base (the next output row's inputs
 * `row_step` floats further): two rows share each weight splat and, at stride 1, the loads of
 * the input rows they both read (the taps unroll, so the compiler sees equal addresses) */
static inline __attribute__((always_inline)) void row_block(const float *base, size_t pitch, size_t row_step,
                                                            const float *wk, float bias, size_t wo, int act,
                                                            float *yr, size_t rows, size_t kh, size_t kw, size_t sw,
                                                            size_t dh, size_t dw) {
    size_t ox = 0;
    for (; ox + 8 <= wo; ox += 8) {
        v4f acc[2][2] = {{splat(bias), splat(bias)}, {splat(bias), splat(bias)}};
        for (size_t i = 0; i < kh; ++i)
            for (size_t j = 0; j < kw; ++j) {
                v4f wv = splat(wk[i * kw + j]);
                for (size_t r = 0; r < rows; ++r) {
                    const float *p = base + r * row_step + i * dh * pitch + ox * sw + j * dw;
                    acc[r][0] = madd(wv, tap4(p, sw), acc[r][0]);
                    acc[r][1] = madd(wv, tap4(p + 4 * sw, sw), acc[r][1]);
                }
            }
        for (size_t r = 0; r < rows; ++r) {
            store4(yr + r * wo + ox, activate4(acc[r][0], act));
            store4(yr + r * wo + ox + 4, activate4(acc[r][1], act));
        }
    }
    for (; ox < wo; ox += 4) {
        v4f acc[2] = {splat(bias), splat(bias)};
        for (size_t i = 0; i < kh; ++i)
            for (size_t j = 0; j < kw; ++j) {
                v4f wv = splat(wk[i * kw + j]);
                for (size_t r = 0; r < rows; ++r)
                    acc[r] = madd(wv, tap4(base + r * row_step + i * dh * pitch + ox * sw + j * dw, sw), acc[r]);
            }
        for (size_t r = 0; r < rows; ++r) {
            v4f v = activate4(acc[r], act);
            float *y = yr + r * wo + ox;
            if (ox + 4 <= wo) store4(y, v);
            else
                for (size_t q = 0; q < wo - ox; ++q) y[q] = v[q];
        }
    }
}

/* one plane from the padded copy `pad` (pitch floats per row), two output rows at a time; the
 * kernel size, stride and dilation are constants where inlined (the common 3x3 and 5x5 cases),
 * so the tap loops unroll */
static inline __attribute__((always_inline)) void plane_rows(const float *pad, size_t pitch, const float *wk,
                                                             float bias, const geometry *g, int act, float *yp,
                                                             size_t kh, size_t kw, size_t sw, size_t dh, size_t dw) {
    size_t wo = g->wo, step = g->sh * pitch, oy = 0;
    for (; oy + 2 <= g->ho; oy += 2)
        row_block(pad + oy * step, pitch, step, wk, bias, wo, act, yp + oy * wo, 2, kh, kw, sw, dh, dw);
    if (oy < g->ho)
        row_block(pad + oy * step, pitch, step, wk, bias, wo, act, yp + oy * wo, 1, kh, kw, sw, dh, dw);
}

/* one plane through the specialised loop for its geometry, else the general one (a switch, not
 * function pointers: the side module then needs no indirect-call table) */
static void depthwise_plane(const float *pad, size_t pitch, const float *wk, float bias, const geometry *g, int act,
                            float *yp) {
    int square = g->kh == g->kw && g->dh == 1 && g->dw == 1 && g->sh == g->sw;
    switch (square ? g->kh * 10 + g->sw : 0) {
    case 31: plane_rows(pad, pitch, wk, bias, g, act, yp, 3, 3, 1, 1, 1); break;
    case 32: plane_rows(pad, pitch, wk, bias, g, act, yp, 3, 3, 2, 1, 1); break;
    case 51: plane_rows(pad, pitch, wk, bias, g, act, yp, 5, 5, 1, 1, 1); break;
    case 52: plane_rows(pad, pitch, wk, bias, g, act, yp, 5, 5, 2, 1, 1); break;
    default: plane_rows(pad, pitch, wk, bias, g, act, yp, g->kh, g->kw, g->sw, g->dh, g->dw);
    }
}

/* planes [p0, p1) of the n * c, each through the padded scratch plane */
static void depthwise_planes(size_t p0, size_t p1, size_t c, size_t h, size_t w, const float *x, const float *weight,
                             const geometry *g, const float *bias, int act, float *y, float *scratch) {
    size_t rows = padded_rows(g), pitch = padded_pitch(w, g), total = rows * pitch;
    for (size_t i = 0; i < total; ++i) scratch[i] = 0.0f;         /* the padding, zeroed once */
    size_t first = g->pad_top, last = g->pad_top + h < rows ? g->pad_top + h : rows;
    for (size_t plane = p0; plane < p1; ++plane) {
        const float *xp = x + plane * h * w;
        for (size_t r = first; r < last; ++r) {
            const float *src = xp + (r - g->pad_top) * w;
            float *dst = scratch + r * pitch + g->pad_left;
            size_t q = 0;
            for (; q + 4 <= w; q += 4) store4(dst + q, load4(src + q));
            for (; q < w; ++q) dst[q] = src[q];
        }
        size_t ch = plane % c;
        const float *wk = weight + ch * g->kh * g->kw;
        float b = bias ? bias[ch] : 0.0f;
        float *yp = y + plane * g->ho * g->wo;
        depthwise_plane(scratch, pitch, wk, b, g, act, yp);
    }
}

typedef struct {
    size_t n, c, h, w;
    const float *x, *weight;
    const geometry *g;
    const float *bias;
    int act;
    float *y, *scratch;
} depthwise_job;

static void depthwise_part(void *arg, size_t part, size_t parts) {
    const depthwise_job *d = arg;
    size_t p0, p1;
    pool_range(d->n * d->c, part, parts, &p0, &p1);
    if (p0 < p1)
        depthwise_planes(p0, p1, d->c, d->h, d->w, d->x, d->weight, d->g, d->bias, d->act, d->y,
                         d->scratch + part * depthwise_scratch(d->h, d->w, d->g));
}

/* threads: the planes (channels of every image), each part with its own scratch plane */
size_t depthwise_parts(size_t n, size_t c, const geometry *g) {
    unsigned long long work = (unsigned long long)n * c * g->ho * g->wo * g->kh * g->kw / DEPTHWISE_PART_WORK;
    size_t parts = pool_parts(work > n * c ? n * c : (size_t)work, 1);
    return parts ? parts : 1;
}

void depthwise_run(size_t n, size_t c, size_t h, size_t w, const float *x, const float *weight, const geometry *g,
                   const float *bias, int act, float *y, float *scratch, size_t parts) {
    if (g->ho == 0 || g->wo == 0) return;
    depthwise_job job = {n, c, h, w, x, weight, g, bias, act, y, scratch};
    pool_run(parts, depthwise_part, &job);
}

EXPORT size_t depthwise_conv2d_f32(size_t n, size_t c, size_t h, size_t w, const float *x, size_t kh, size_t kw,
                                   const float *weight, size_t sh, size_t sw, size_t dh, size_t dw, size_t pad_top,
                                   size_t pad_left, size_t pad_bottom, size_t pad_right, const float *bias, int act,
                                   float *y, float *scratch, size_t scratch_size) {
    geometry g = make_geometry(h, w, kh, kw, sh, sw, dh, dw, pad_top, pad_left, pad_bottom, pad_right);
    size_t parts = depthwise_parts(n, c, &g), need = parts * depthwise_scratch(h, w, &g);
    if (scratch_size < need) return need;
    depthwise_run(n, c, h, w, x, weight, &g, bias, act, y, scratch, parts);
    return 0;
}
