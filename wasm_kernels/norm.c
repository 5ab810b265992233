/* Row-wise kernels: softmax, layer norm (also of a sum with a residual), RMS norm, and the
 * per-channel affine + activation of inference batch norm, plus clamp and the activations
 * alone. Outputs are contiguous. */
#include "exports.h"
#include "common.h"

static inline void store_lanes(float *p, v4f v, size_t count) {
    if (count >= 4) {
        store4(p, v);
        return;
    }
    for (size_t l = 0; l < count; ++l) p[l] = v[l];
}

/* softmax of one row (n elements, xs apart) into contiguous y */
static void softmax_row(size_t n, const float *x, ptrdiff_t xs, float *y) {
    v4f m4 = splat(-__builtin_inff());
    size_t j = 0;
    for (; j + 4 <= n; j += 4) m4 = vmax(m4, gather4(x + (ptrdiff_t)j * xs, xs, 4));
    float m = hmax4(m4);
    for (; j < n; ++j) m = x[(ptrdiff_t)j * xs] > m ? x[(ptrdiff_t)j * xs] : m;
    v4f s4 = splat(0.0f);
    for (j = 0; j + 4 <= n; j += 4) {
        v4f e = exp4(gather4(x + (ptrdiff_t)j * xs, xs, 4) - splat(m));
        store4(y + j, e);
        s4 += e;
    }
    float s = hsum4(s4);
    for (; j < n; ++j) {
        float e = exp4(splat(x[(ptrdiff_t)j * xs] - m))[0];
        y[j] = e;
        s += e;
    }
    for (j = 0; j + 4 <= n; j += 4) store4(y + j, load4(y + j) / splat(s));
    for (; j < n; ++j) y[j] /= s;
}

/* softmax down `lanes` (<= 4) neighbouring columns at once: elements j of column l at
 * x[j * xs + l * xl], written to y[j * ys + l] */
static void softmax_lanes(size_t n, const float *x, ptrdiff_t xs, ptrdiff_t xl, size_t lanes, float *y, size_t ys) {
    v4f m = splat(-__builtin_inff()), s = splat(0.0f);
    for (size_t j = 0; j < n; ++j) m = vmax(m, gather4(x + (ptrdiff_t)j * xs, xl, lanes));
    for (size_t j = 0; j < n; ++j) {
        v4f e = exp4(gather4(x + (ptrdiff_t)j * xs, xl, lanes) - m);
        store_lanes(y + j * ys, e, lanes);
        s += e;
    }
    for (size_t j = 0; j < n; ++j) store_lanes(y + j * ys, gather4(y + j * ys, 1, lanes) / s, lanes);
}

/* softmax over the middle axis of an (outer, n, inner) strided view; y contiguous (outer, n, inner) */
EXPORT void softmax_f32(size_t outer, size_t n, size_t inner, const float *x, ptrdiff_t xs_outer, ptrdiff_t xs_n,
                        ptrdiff_t xs_inner, float *y) {
    for (size_t o = 0; o < outer; ++o) {
        const float *xo = x + (ptrdiff_t)o * xs_outer;
        float *yo = y + o * n * inner;
        if (inner == 1) {
            softmax_row(n, xo, xs_n, yo);
            continue;
        }
        for (size_t i = 0; i < inner; i += 4)
            softmax_lanes(n, xo + (ptrdiff_t)i * xs_inner, xs_n, xs_inner, inner - i < 4 ? inner - i : 4, yo + i,
                          inner);
    }
}

static float row_sum(size_t n, const float *x, float shift, int squares) {
    v4f s0 = splat(0.0f), s1 = splat(0.0f), c = splat(shift);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        v4f a = load4(x + j) - c, b = load4(x + j + 4) - c;
        s0 += squares ? a * a : a;
        s1 += squares ? b * b : b;
    }
    float s = hsum4(s0 + s1);
    for (; j < n; ++j) {
        float a = x[j] - shift;
        s += squares ? a * a : a;
    }
    return s;
}

/* yr = (xr - mean) / sqrt(var + eps) * weight + bias for one row of n contiguous elements
 * (yr may be xr); weight and bias may be NULL. Two passes (centred variance). */
static void layer_norm_row(size_t n, const float *xr, float *yr, const float *weight, const float *bias, float eps) {
    float first = n ? xr[0] : 0.0f;                      /* shifted sum: exact-ish under a large offset */
    float mean = first + row_sum(n, xr, first, 0) / (float)n;
    float var = row_sum(n, xr, mean, 1) / (float)n;
    v4f inv = splat(1.0f / __builtin_sqrtf(var + eps)), m = splat(mean);
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        v4f v = (load4(xr + j) - m) * inv;
        if (weight) v *= load4(weight + j);
        if (bias) v += load4(bias + j);
        store4(yr + j, v);
    }
    for (; j < n; ++j) {
        float v = (xr[j] - mean) * inv[0];
        if (weight) v *= weight[j];
        if (bias) v += bias[j];
        yr[j] = v;
    }
}

/* layer norm over rows of n contiguous elements, rows x_row apart; y contiguous (rows, n) */
EXPORT void layer_norm_f32(size_t rows, size_t n, const float *x, ptrdiff_t x_row, float *y, const float *weight,
                           const float *bias, float eps) {
    for (size_t r = 0; r < rows; ++r) layer_norm_row(n, x + (ptrdiff_t)r * x_row, y + r * n, weight, bias, eps);
}

/* y = layer_norm((x + input_bias) + residual): the sum (added in that order, as the composite
 * does) goes into y's row, which is then normalized in place. input_bias may be NULL. */
EXPORT void add_layer_norm_f32(size_t rows, size_t n, const float *x, ptrdiff_t x_row, const float *input_bias,
                               const float *residual, ptrdiff_t r_row, float *y, const float *weight,
                               const float *bias, float eps) {
    for (size_t r = 0; r < rows; ++r) {
        const float *xr = x + (ptrdiff_t)r * x_row, *rr = residual + (ptrdiff_t)r * r_row;
        float *yr = y + r * n;
        size_t j = 0;
        if (input_bias) {
            for (; j + 4 <= n; j += 4) store4(yr + j, (load4(xr + j) + load4(input_bias + j)) + load4(rr + j));
            for (; j < n; ++j) yr[j] = (xr[j] + input_bias[j]) + rr[j];
        } else {
            for (; j + 4 <= n; j += 4) store4(yr + j, load4(xr + j) + load4(rr + j));
            for (; j < n; ++j) yr[j] = xr[j] + rr[j];
        }
        layer_norm_row(n, yr, yr, weight, bias, eps);
    }
}

/* y = x / sqrt(mean(x^2) + eps) * weight; weight may be NULL */
EXPORT void rms_norm_f32(size_t rows, size_t n, const float *x, ptrdiff_t x_row, float *y, const float *weight,
                         float eps) {
    for (size_t r = 0; r < rows; ++r) {
        const float *xr = x + (ptrdiff_t)r * x_row;
        float *yr = y + r * n;
        v4f inv = splat(1.0f / __builtin_sqrtf(row_sum(n, xr, 0.0f, 1) / (float)n + eps));
        size_t j = 0;
        for (; j + 4 <= n; j += 4) {
            v4f v = load4(xr + j) * inv;
            store4(yr + j, weight ? v * load4(weight + j) : v);
        }
        for (; j < n; ++j) yr[j] = weight ? xr[j] * inv[0] * weight[j] : xr[j] * inv[0];
    }
}

/* Rotary position embedding, transformers' convention (rotate_half): for each of `outer` blocks
 * of t rows of d (even) elements, y = x * cos + cat(-x[d/2:], x[:d/2]) * sin, with cos and sin
 * contiguous (t, d). x's blocks are x_outer elements apart and its rows x_row apart (a head view
 * of a stacked q/k/v projection passes without a copy); y is contiguous (outer, t, d).
 * Multiply, multiply, add: NumPy's roundings (x * cos + (-x) * sin; -(a * b) is exact). */
EXPORT void rope_f32(size_t outer, size_t t, size_t d, const float *x, ptrdiff_t x_outer, ptrdiff_t x_row,
                     const float *cos, const float *sin, float *y) {
    const size_t h = d / 2;
    for (size_t o = 0; o < outer; ++o) {
        const float *xo = x + (ptrdiff_t)o * x_outer;
        for (size_t r = 0; r < t; ++r, y += d) {
            const float *xr = xo + (ptrdiff_t)r * x_row, *c = cos + r * d, *s = sin + r * d;
            size_t j = 0;
            for (; j + 4 <= h; j += 4) {
                v4f lo = load4(xr + j), hi = load4(xr + h + j);
                store4(y + j, lo * load4(c + j) + -hi * load4(s + j));
                store4(y + h + j, hi * load4(c + h + j) + lo * load4(s + h + j));
            }
            for (; j < h; ++j) {
                y[j] = xr[j] * c[j] + -xr[h + j] * s[j];
                y[h + j] = xr[h + j] * c[h + j] + xr[j] * s[h + j];
            }
        }
    }
}

/* y[o][ch][i] = act(x[o][ch][i] * scale[ch] + shift[ch]), x and y contiguous (outer, c, inner):
 * inference batch norm. Multiply then add, two roundings, as NumPy does. */
EXPORT void scale_shift_f32(size_t outer, size_t c, size_t inner, const float *x, const float *scale,
                            const float *shift, int act, float *y) {
    for (size_t plane = 0; plane < outer * c; ++plane) {
        const float *xp = x + plane * inner;
        float *yp = y + plane * inner;
        v4f a = splat(scale[plane % c]), b = splat(shift[plane % c]);
        size_t i = 0;
        for (; i + 4 <= inner; i += 4) store4(yp + i, activate4(load4(xp + i) * a + b, act));
        if (i < inner) store_lanes(yp + i, activate4(gather4(xp + i, 1, inner - i) * a + b, act), inner - i);
    }
}

/* y = act(x) over count contiguous elements (the GEMM epilogue's activations: GELU is x Phi(x)) */
EXPORT void activation_f32(size_t count, const float *x, int act, float *y) { activate_span(count, x, act, y); }

/* y (rows, n) contiguous = silu(gate) * up (SwiGLU's product), gate and up rows of n contiguous
 * elements g_row and u_row apart (the two halves of a stacked gate/up projection read where they
 * lie); silu as activation_f32 computes it, then one rounded multiply */
EXPORT void silu_mul_f32(size_t rows, size_t n, const float *gate, ptrdiff_t g_row, const float *up, ptrdiff_t u_row,
                         float *y) {
    for (size_t r = 0; r < rows; ++r, gate += g_row, up += u_row, y += n) {
        size_t i = 0;
        for (; i + 4 <= n; i += 4) store4(y + i, silu4(load4(gate + i)) * load4(up + i));
        if (i < n) store_lanes(y + i, silu4(gather4(gate + i, 1, n - i)) * gather4(up + i, 1, n - i), n - i);
    }
}

/* y = a + b over count contiguous elements (a residual connection): one rounded add, as np.add */
EXPORT void add_f32(size_t count, const float *a, const float *b, float *y) {
    size_t i = 0;
    for (; i + 4 <= count; i += 4) store4(y + i, load4(a + i) + load4(b + i));
    if (i < count) store_lanes(y + i, gather4(a + i, 1, count - i) + gather4(b + i, 1, count - i), count - i);
}

/* y = min(max(x, lo), hi) over count contiguous elements; NaN stays NaN (np.clip) */
EXPORT void clamp_f32(size_t count, const float *x, float lo, float hi, float *y) {
    size_t i = 0;
    for (; i + 4 <= count; i += 4) store4(y + i, min4(max4(load4(x + i), splat(lo)), splat(hi)));
    if (i < count) store_lanes(y + i, min4(max4(gather4(x + i, 1, count - i), splat(lo)), splat(hi)), count - i);
}
