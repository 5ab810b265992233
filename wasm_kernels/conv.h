/* Internal interface of the convolution kernels (not exported). */
#ifndef ENGINE_KERNELS_CONV_H
#define ENGINE_KERNELS_CONV_H

#include "common.h"

/* kernel, stride, dilation, leading pads and the output extent of a 2-D convolution */
typedef struct {
    size_t kh, kw, sh, sw, dh, dw, pad_top, pad_left, ho, wo;
} geometry;

geometry make_geometry(size_t h, size_t w, size_t kh, size_t kw, size_t sh, size_t sw, size_t dh, size_t dw,
                       size_t pad_top, size_t pad_left, size_t pad_bottom, size_t pad_right);

/* floats of scratch one part of depthwise_run needs for (h, w) planes */
size_t depthwise_scratch(size_t h, size_t w, const geometry *g);
/* how many parts depthwise_run splits into (threads: pool.h) */
size_t depthwise_parts(size_t n, size_t c, const geometry *g);

/* y (n, c, ho, wo) = act(depthwise(x (n, c, h, w), weight (c, 1, kh, kw)) + bias (c) or 0),
 * in `parts` parts (depthwise_parts), each with depthwise_scratch floats of scratch */
void depthwise_run(size_t n, size_t c, size_t h, size_t w, const float *x, const float *weight, const geometry *g,
                   const float *bias, int act, float *y, float *scratch, size_t parts);

#endif
