/* Internal interface between the GEMM and the convolution drivers (not exported). */
#ifndef ENGINE_KERNELS_GEMM_H
#define ENGINE_KERNELS_GEMM_H

#include "common.h"

/* Register tile MR x NR (NR = two f32x4 in WebAssembly) and cache blocks: the packed B block (KC x NC)
 * stays in L2, the packed A block (MC x KC) in L1/L2, one B micro-panel (KC x NR) in L1. */
#if !defined(__wasm__) && defined(__AVX512F__) && defined(__FMA__)
/* natively with AVX-512 (the library is built for the machine that runs it): a row of the tile
 * is one 16-lane vector (NR = 16), 8 rows, so that 8 multiply-adds are in flight */
#define GEMM_WIDE 16
#define MR 8
#define NR 16
#elif !defined(__wasm__) && defined(__AVX2__) && defined(__FMA__)
/* with AVX2 and FMA: a row of the tile is one 8-lane vector, 8 rows */
#define GEMM_WIDE 8
#define MR 8
#define NR 8
#else
#define MR 4
#define NR 8
#endif
#define KC 256
#define MC 96
#define NC 512
#define GEMM_SCRATCH ((size_t)KC * NC + (size_t)MC * KC)   /* floats */
#define SMALL_M_DIRECT 16          /* rows of A up to which B is read in place (B with contiguous rows) */

/* a strided matrix view: element (i, j) at p[i * row + j * col], strides in elements; float16
 * elements at half[...] instead when half is set (B only: a linear layer's float16 weight) */
typedef struct {
    const float *p;
    ptrdiff_t row, col;
    const uint16_t *half;
} matrix;

/* what happens to a finished tile: + bias[i * bias_row + j * bias_col], then activation */
typedef struct {
    const float *bias;
    ptrdiff_t bias_row, bias_col;
    int act;
} epilogue;

/* C (m x n, row stride c_row, columns contiguous) = A (m x k) B (k x n) + epilogue;
 * scratch: GEMM_SCRATCH floats. */
void gemm_run(size_t m, size_t n, size_t k, matrix a, matrix b, float *c, ptrdiff_t c_row,
              const epilogue *ep, float *scratch);

/* One k block of gemm_run with B already packed (bp: kc x nc in panels of NR columns, k-major,
 * columns past nc zero, as gemm_run packs it): C (m x nc) = A (m x kc) bp, added to what C holds
 * when accumulate, then the epilogue (or 0) at C's column j0. Called on the k blocks KC apart in
 * order, it sums exactly as gemm_run. a_scratch: MC * KC floats. */
void gemm_packed_b(size_t m, size_t nc, size_t kc, matrix a, const float *bp, float *c, ptrdiff_t c_row,
                   int accumulate, const epilogue *ep, size_t j0, float *a_scratch);

#endif
