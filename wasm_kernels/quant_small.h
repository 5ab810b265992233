/* Internal interface of the GGML types of 32-element blocks (quant_small.c): Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0. Not exported. */
#ifndef ENGINE_KERNELS_QUANT_SMALL_H
#define ENGINE_KERNELS_QUANT_SMALL_H

#include "quant_acts.h"

/* y[(r0 + i) * y_row + n] = (weight row n) . (x row r0 + i) + bias[n] for n < count, i < r
 * (r is 1 or 4); weight rows row_bytes apart, nb blocks of 32 each */
void small_rows(int type, size_t r, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, const acts *a,
                size_t r0, const float *bias, float *y, size_t y_row);
/* weight rows 0..count-1 (row_bytes apart, nb blocks of 32 each) as panels of K rows (the last one
 * of the rows left) from out, one after the other */
void small_panel(int type, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, uint8_t *out, size_t K);
/* one row of `nb` blocks of 32 dequantized to out, bit for bit as engine.quants.dequantize */
void small_dequantize(int type, const uint8_t *w, size_t nb, float *out);

#endif
