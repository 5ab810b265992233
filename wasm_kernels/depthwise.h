/* Internal interface of the direct depthwise convolution (depthwise.c), which conv2d_f32 runs
 * when groups == channels (not exported). */
#ifndef ENGINE_KERNELS_DEPTHWISE_H
#define ENGINE_KERNELS_DEPTHWISE_H

#include "geometry.h"

/* floats of scratch one part of depthwise_run needs for (h, w) planes */
size_t depthwise_scratch(size_t h, size_t w, const geometry *g);
/* how many parts depthwise_run splits into (threads: pool.h) */
size_t depthwise_parts(size_t n, size_t c, const geometry *g);

/* y (n, c, ho, wo) = act(depthwise(x (n, c, h, w), weight (c, 1, kh, kw)) + bias (c) or 0),
 * in `parts` parts (depthwise_parts), each with depthwise_scratch floats of scratch */
void depthwise_run(size_t n, size_t c, size_t h, size_t w, const float *x, const float *weight, const geometry *g,
                   const float *bias, int act, float *y, float *scratch, size_t parts);

#endif
