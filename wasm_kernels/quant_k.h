/* Internal interface of the K-quants (quant_k.c): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K. Not exported. */
#ifndef ENGINE_KERNELS_QUANT_K_H
#define ENGINE_KERNELS_QUANT_K_H

#include "quant_acts.h"

/* y[(r0 + i) * y_row + n] = (weight row n) . (x row r0 + i) + bias[n] for n < count, i < r (r is
 * 1 or 4): weight rows row_bytes apart, nb blocks of 32 each (nb / 8 super-blocks) */
void k_rows(int type, size_t r, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, const acts *a,
            size_t r0, const float *bias, float *y, size_t y_row);
/* one row of `nb` blocks of 32 (nb / 8 super-blocks) dequantized to out, bit for bit as
 * engine.quants.dequantize */
void k_dequantize(int type, const uint8_t *w, size_t nb, float *out);
/* Whether `type` takes the panel path, and its weight rows to panels of K rows (quant_common.h) */
int k_panelled(int type);
void k_panel(int type, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, uint8_t *out, size_t K);

#endif
