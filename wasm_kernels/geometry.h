/* The geometry of a 2-D convolution, shared by conv.c and depthwise.c (not exported). */
#ifndef ENGINE_KERNELS_GEOMETRY_H
#define ENGINE_KERNELS_GEOMETRY_H

#include "common.h"

/* kernel, stride, dilation, leading pads and the output extent of a 2-D convolution */
typedef struct {
    size_t kh, kw, sh, sw, dh, dw, pad_top, pad_left, ho, wo;
} geometry;

/* (in + pad_before + pad_after - dilation * (kernel - 1) - 1) / stride + 1, or 0 */
static inline size_t out_extent(size_t in, size_t before, size_t after, size_t k, size_t s, size_t d) {
    size_t span = in + before + after, reach = d * (k - 1) + 1;
    return k == 0 || s == 0 || d == 0 || span < reach ? 0 : (span - reach) / s + 1;
}

static inline geometry make_geometry(size_t h, size_t w, size_t kh, size_t kw, size_t sh, size_t sw, size_t dh,
                                     size_t dw, size_t pad_top, size_t pad_left, size_t pad_bottom, size_t pad_right) {
    geometry g = {kh, kw, sh, sw, dh, dw, pad_top, pad_left,
                  out_extent(h, pad_top, pad_bottom, kh, sh, dh), out_extent(w, pad_left, pad_right, kw, sw, dw)};
    return g;
}

#endif
