/* The rows of x quantized for the integer products (quant_acts.c; quant_common.h says why): per
 * block of 32, 14-bit integers (|q| <= QMAX) with one float scale dx, as rows (acts: one row of x,
 * and the K-quants) or as rows of a panel (several rows of the 32-element types). Not exported. */
#ifndef ENGINE_KERNELS_QUANT_ACTS_H
#define ENGINE_KERNELS_QUANT_ACTS_H

#include "quant_common.h"

/* Row r of x, quantized, at base + r * stride: the values (cols int16, each 16 as evens then
 * odds: see dot16), then per block of 32 the scale dx (float), the sum of the
 * dequantized values dx * sum(q) (float) and sum(q) (int32), then sum(q) per 16 (int32). */
typedef struct {
    const uint8_t *base;
    size_t stride, dx, xs, s32, s16;    /* bytes */
} acts;

static inline const uint8_t *act_q(const acts *a, size_t r, size_t element) {
    return a->base + r * a->stride + 2 * element;
}
static inline const float *act_dx(const acts *a, size_t r) { return (const float *)(a->base + r * a->stride + a->dx); }
static inline const float *act_xs(const acts *a, size_t r) { return (const float *)(a->base + r * a->stride + a->xs); }
static inline const int32_t *act_s32(const acts *a, size_t r) {
    return (const int32_t *)(a->base + r * a->stride + a->s32);
}
static inline const int32_t *act_s16(const acts *a, size_t r) {
    return (const int32_t *)(a->base + r * a->stride + a->s16);
}
/* count (<= 4) int32 from p, zeros after */
static inline v4i gather_i32(const int32_t *p, size_t count) {
    if (count >= 4) return load_i32x4(p);
    v4i v = splati(0);
    for (size_t i = 0; i < count; ++i) v[i] = p[i];
    return v;
}

/* where the parts of a quantized row of x go, for nb blocks of 32 (base 0: the caller sets it) */
acts act_layout(size_t nb);
/* Row x (nb blocks of 32) -> quantized row r of a */
void quantize_row(size_t nb, const float *x, const acts *a, size_t r);
/* Row x (nb blocks of 32) -> row k of a panel of K rows (quant_common.h); evens: scratch for 16
 * vectors */
void quantize_panel_row(size_t nb, const float *x, uint8_t *panel, size_t K, size_t k, v4u *evens);

#endif
