/* The kernels' exports, declared once: every file that defines one includes this (so a definition
 * that differs from its declaration does not compile), and program.c calls them all by id.
 * The Python side's ctypes signatures (engine/backends/simd/library.py SIGNATURES) list the same
 * exports in the same order; tests/kernels/test_program.py runs each one both ways. */
#ifndef ENGINE_KERNELS_EXPORTS_H
#define ENGINE_KERNELS_EXPORTS_H

#include "common.h"

EXPORT size_t gemm_f32(size_t batch, size_t m, size_t n, size_t k,
                       const float *a, ptrdiff_t a_batch, ptrdiff_t a_row, ptrdiff_t a_col,
                       const float *b, ptrdiff_t b_batch, ptrdiff_t b_row, ptrdiff_t b_col,
                       float *c, ptrdiff_t c_batch, ptrdiff_t c_row,
                       const float *bias, ptrdiff_t bias_row, ptrdiff_t bias_col, int act,
                       float *scratch, size_t scratch_size);
EXPORT size_t gemm_f16w_f32(size_t batch, size_t m, size_t n, size_t k,
                            const float *a, ptrdiff_t a_batch, ptrdiff_t a_row, ptrdiff_t a_col,
                            const uint16_t *b, ptrdiff_t b_batch, ptrdiff_t b_row, ptrdiff_t b_col,
                            float *c, ptrdiff_t c_batch, ptrdiff_t c_row,
                            const float *bias, ptrdiff_t bias_row, ptrdiff_t bias_col, int act,
                            float *scratch, size_t scratch_size);
EXPORT void im2col_f32(size_t c, size_t h, size_t w, const float *x, size_t kh, size_t kw, size_t sh, size_t sw,
                       size_t dh, size_t dw, size_t pad_top, size_t pad_left, size_t pad_bottom, size_t pad_right,
                       float *cols);
EXPORT size_t conv2d_f32(size_t n, size_t c, size_t h, size_t w, const float *x, size_t o, size_t kh, size_t kw,
                         const float *weight, size_t groups, size_t sh, size_t sw, size_t dh, size_t dw,
                         size_t pad_top, size_t pad_left, size_t pad_bottom, size_t pad_right,
                         const float *bias, int act, float *y, float *scratch, size_t scratch_size);
EXPORT size_t depthwise_conv2d_f32(size_t n, size_t c, size_t h, size_t w, const float *x, size_t kh, size_t kw,
                                   const float *weight, size_t sh, size_t sw, size_t dh, size_t dw, size_t pad_top,
                                   size_t pad_left, size_t pad_bottom, size_t pad_right, const float *bias, int act,
                                   float *y, float *scratch, size_t scratch_size);
EXPORT void softmax_f32(size_t outer, size_t n, size_t inner, const float *x, ptrdiff_t xs_outer, ptrdiff_t xs_n,
                        ptrdiff_t xs_inner, float *y);
EXPORT void layer_norm_f32(size_t rows, size_t n, const float *x, ptrdiff_t x_row, float *y, const float *weight,
                           const float *bias, float eps);
EXPORT void add_layer_norm_f32(size_t rows, size_t n, const float *x, ptrdiff_t x_row, const float *input_bias,
                               const float *residual, ptrdiff_t r_row, float *y, const float *weight,
                               const float *bias, float eps);
EXPORT void rms_norm_f32(size_t rows, size_t n, const float *x, ptrdiff_t x_row, float *y, const float *weight,
                         float eps);
EXPORT void rope_f32(size_t outer, size_t t, size_t d, const float *x, ptrdiff_t x_outer, ptrdiff_t x_row,
                     const float *cos, const float *sin, float *y);
EXPORT void scale_shift_f32(size_t outer, size_t c, size_t inner, const float *x, const float *scale,
                            const float *shift, int act, float *y);
EXPORT void activation_f32(size_t count, const float *x, int act, float *y);
EXPORT void silu_mul_f32(size_t rows, size_t n, const float *gate, ptrdiff_t g_row, const float *up, ptrdiff_t u_row,
                         float *y);
EXPORT void add_f32(size_t count, const float *a, const float *b, float *y);
EXPORT void clamp_f32(size_t count, const float *x, float lo, float hi, float *y);
EXPORT size_t attention_f32(size_t batch, size_t heads, size_t kv_heads, size_t l, size_t s, size_t d, size_t dv,
                            const float *q, ptrdiff_t qs_b, ptrdiff_t qs_h, ptrdiff_t qs_l, ptrdiff_t qs_d,
                            const float *k, ptrdiff_t ks_b, ptrdiff_t ks_h, ptrdiff_t ks_s, ptrdiff_t ks_d,
                            const float *v, ptrdiff_t vs_b, ptrdiff_t vs_h, ptrdiff_t vs_s, ptrdiff_t vs_d,
                            const void *mask, int mask_kind, ptrdiff_t ms_b, ptrdiff_t ms_h, ptrdiff_t ms_l,
                            ptrdiff_t ms_s, int causal, float scale, float *out, float *scratch,
                            size_t scratch_size);
EXPORT void f16_to_f32(size_t count, const uint16_t *src, float *dst);
EXPORT void bf16_to_f32(size_t count, const uint16_t *src, float *dst);
EXPORT void f32_to_bf16(size_t count, const float *src, uint16_t *dst);
EXPORT size_t index_copy_f32(size_t outer, size_t n, size_t inner, float *dest, ptrdiff_t d_outer, ptrdiff_t d_row,
                             const int64_t *index, size_t count, const float *source, ptrdiff_t s_outer,
                             ptrdiff_t s_row);
EXPORT size_t linear_q_f32(int type, size_t m, size_t rows, size_t cols, const float *x, ptrdiff_t x_row,
                           const uint8_t *weight, const float *bias, float *y, float *scratch, size_t scratch_size);
EXPORT size_t embedding_q_f32(int type, size_t count, const int64_t *ids, size_t rows, size_t cols,
                              const uint8_t *weight, float *y);

#endif
