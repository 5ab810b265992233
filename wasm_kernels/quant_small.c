/* The GGML types of 32-element blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (layouts: engine/quants.py).
 * Products take the blocks 4 at a time (see quant_common.h); dequantization one block at a time. */
#include "quant_small.h"

#define INLINE static inline __attribute__((always_inline))

INLINE size_t block_bytes(int t) {
    return t == Q4_0 ? 18 : t == Q4_1 ? 20 : t == Q5_0 ? 22 : t == Q5_1 ? 24 : 34;
}
/* w = d * (q - offset) [+ m] */
INLINE int offset_of(int t) { return t == Q4_0 ? 8 : t == Q5_0 ? 16 : 0; }
INLINE int has_min(int t) { return t == Q4_1 || t == Q5_1; }

/* byte i of qs: element i in its low nibble, element i + 16 in its high one */
INLINE void nibbles(const uint8_t *qs, v16i8 *lo, v16i8 *hi) {
    v16i8 v = load_i8x16(qs);
    *lo = v & splat8(15);
    *hi = shr_bytes(v, 4) & splat8(15);
}

/* bit j of qh is the 5th bit (16) of element j */
INLINE void fifth_bits(uint32_t qh, v16i8 *lo, v16i8 *hi) {
    const v16i8 bit = {1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128};
    v16i8 bytes = (v16i8)(v4u){qh, qh, qh, qh};
    v16i8 b01 = __builtin_shufflevector(bytes, bytes, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    v16i8 b23 = __builtin_shufflevector(bytes, bytes, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    *lo |= ((b01 & bit) != 0) & splat8(16);
    *hi |= ((b23 & bit) != 0) & splat8(16);
}

/* the 32 quants of a block, elements 0-15 in lo and 16-31 in hi: 0..31 (Q8_0: signed bytes) */
INLINE void unpack(int t, const uint8_t *b, v16i8 *lo, v16i8 *hi) {
    switch (t) {
    case Q4_0: nibbles(b + 2, lo, hi); break;
    case Q4_1: nibbles(b + 4, lo, hi); break;
    case Q5_0: nibbles(b + 6, lo, hi); fifth_bits(load_u32(b + 2), lo, hi); break;
    case Q5_1: nibbles(b + 8, lo, hi); fifth_bits(load_u32(b + 4), lo, hi); break;
    default: *lo = load_i8x16(b + 2); *hi = load_i8x16(b + 18);
    }
}

/* the first 4 bytes of n (<= 4) blocks bs apart (the f16 d, and m for Q4_1/Q5_1), 0 past n.
 * Four vector loads (a block is at least 18 bytes) and unpacks: built lane by lane, GCC's SSE2
 * code assembles the vector in memory and stalls reading it back. */
INLINE v4u heads(const uint8_t *b, size_t bs, size_t n) {
    if (n == 4) {
        v4u ab = __builtin_shufflevector((v4u)load_i32x4(b), (v4u)load_i32x4(b + bs), 0, 4, 1, 5);
        v4u cd = __builtin_shufflevector((v4u)load_i32x4(b + 2 * bs), (v4u)load_i32x4(b + 3 * bs), 0, 4, 1, 5);
        return __builtin_shufflevector(ab, cd, 0, 1, 4, 5);
    }
    v4u h = {0, 0, 0, 0};
    for (size_t k = 0; k < n; ++k) h[k] = load_u32(b + k * bs);
    return h;
}

/* block k (of n) of the group at b times x rows r0..r0+R-1: 4 partial sums per row in s[r] */
INLINE void block_sums(int t, size_t R, const uint8_t *b, size_t k, size_t n, size_t j, const acts *a, size_t r0,
                       v4i *s) {
    v16i8 lo, hi;
    for (size_t r = 0; r < R; ++r) s[r] = splati(0);
    if (k >= n) return;
    unpack(t, b + k * block_bytes(t), &lo, &hi);
    for (size_t r = 0; r < R; ++r) {
        s[r] = dot32(act_q(a, r0 + r, (j + k) * 32), lo, hi, t == Q8_0, 0);
        pin(s[r]);
    }
}

/* blocks j..j+n-1 (n <= 4, at b) times blocks j.. of x rows r0..r0+R-1, added to acc[r] */
INLINE void group(int t, size_t R, const uint8_t *b, size_t n, size_t j, const acts *a, size_t r0, v4f *acc) {
    const size_t bs = block_bytes(t);
    /* pairs of blocks reduced as they come (fewer live registers) */
    v4i s0[ROWS_AT_ONCE], s1[ROWS_AT_ONCE], h01[ROWS_AT_ONCE], h23[ROWS_AT_ONCE];
    block_sums(t, R, b, 0, n, j, a, r0, s0);
    block_sums(t, R, b, 1, n, j, a, r0, s1);
    for (size_t r = 0; r < R; ++r) h01[r] = hadd4(s0[r], s1[r]);
    block_sums(t, R, b, 2, n, j, a, r0, s0);
    block_sums(t, R, b, 3, n, j, a, r0, s1);
    for (size_t r = 0; r < R; ++r) h23[r] = hadd4(s0[r], s1[r]);
    v4u h = heads(b, bs, n);
    v4f d = half4(h), m = has_min(t) ? half4(h >> 16) : splat(0.0f);        /* half4 reads the low 16 bits */
    for (size_t r = 0; r < R; ++r) {
        v4i s = hadd4(h01[r], h23[r]);                        /* the n blocks' integer dot products */
        if (offset_of(t)) s -= offset_of(t) * gather_i32(act_s32(a, r0 + r) + j, n);
        acc[r] = madd(__builtin_convertvector(s, v4f), d * gather4(act_dx(a, r0 + r) + j, 1, n), acc[r]);
        if (has_min(t)) acc[r] = madd(m, gather4(act_xs(a, r0 + r) + j, 1, n), acc[r]);
    }
}

INLINE void rows_of(int t, size_t R, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, const acts *a,
                    size_t r0, const float *bias, float *y, size_t y_row) {
    const size_t bs = block_bytes(t);
    for (size_t n = 0; n < count; ++n, w += row_bytes) {
        v4f acc[ROWS_AT_ONCE];
        for (size_t r = 0; r < R; ++r) acc[r] = splat(0.0f);
        size_t j = 0;
        for (; j + 4 <= nb; j += 4) group(t, R, w + j * bs, 4, j, a, r0, acc);
        switch (nb - j) {                           /* the last 1-3 blocks, as specialised groups */
        case 1: group(t, R, w + j * bs, 1, j, a, r0, acc); break;
        case 2: group(t, R, w + j * bs, 2, j, a, r0, acc); break;
        case 3: group(t, R, w + j * bs, 3, j, a, r0, acc); break;
        }
        for (size_t r = 0; r < R; ++r) y[r * y_row + n] = hsum4(acc[r]) + (bias ? bias[n] : 0.0f);
    }
}

void small_rows(int type, size_t r, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, const acts *a,
                size_t r0, const float *bias, float *y, size_t y_row) {
    switch (type) {
        ROWS(Q4_0);
        ROWS(Q4_1);
        ROWS(Q5_0);
        ROWS(Q5_1);
        ROWS(Q8_0);
    }
}

/* --- panels (quant_common.h): weight rows unpacked once for many rows of x ----------------------- */
/* 16 int16 vectors from 4 blocks at b (bs bytes apart) in quant_common.h's order, offsets
 * subtracted, to values (vectors `step` bytes apart). Q4_0/Q4_1: the nibble bytes themselves
 * transposed (32-bit lane i = block i), then each 16-bit lane's 4 nibbles shifted and masked out.
 * Otherwise the blocks unpacked as for the products (elements 0-15, 16-31 as bytes), each half
 * transposed and its even and odd bytes widened. Each half is stored before the next is made: V8
 * keeps fewer vectors live. */
INLINE void group4(int t, const uint8_t *b, size_t bs, uint8_t *values, size_t step) {
    const int sign = t == Q8_0;
    const v8i16 offset = (v8i16){0, 0, 0, 0, 0, 0, 0, 0} + (int16_t)offset_of(t);
    v4u in[4], tr[4];
    if (t == Q4_0 || t == Q4_1) {
        for (size_t i = 0; i < 4; ++i) in[i] = (v4u)load_i8x16(b + i * bs + (t == Q4_0 ? 2 : 4));
        transpose_words(in, tr);                 /* lane i: bytes 4l..4l+3 of block i: elements 4l.., 16 + 4l.. */
        for (size_t l = 0; l < 4; ++l, values += 4 * step) {
            v8u16 v = (v8u16)tr[l];
            *(v8i16_u *)values = (v8i16)(v & 15) - offset;
            *(v8i16_u *)(values + step) = (v8i16)((v >> 8) & 15) - offset;
            *(v8i16_u *)(values + 2 * step) = (v8i16)((v >> 4) & 15) - offset;
            *(v8i16_u *)(values + 3 * step) = (v8i16)(v >> 12) - offset;
        }
        return;
    }
    v4u upper[4];
    for (size_t i = 0; i < 4; ++i) {
        v16i8 l, h;
        unpack(t, b + i * bs, &l, &h);
        in[i] = (v4u)l;
        upper[i] = (v4u)h;
    }
    for (size_t half = 0; half < 2; ++half, values += 2 * step) {
        transpose_words(half ? upper : in, tr);   /* lane i: elements 16 half + 4l..4l+3 of block i */
        for (size_t l = 0; l < 4; ++l) {
            *(v8i16_u *)(values + 4 * l * step) = even_bytes(tr[l], sign) - offset;
            *(v8i16_u *)(values + (4 * l + 1) * step) = odd_bytes(tr[l], sign) - offset;
        }
    }
}

/* the same for a group of 2 blocks (8 vectors: their 8-byte halves interleaved) or 1 (4 vectors) */
INLINE void group_tail(int t, const uint8_t *b, size_t bs, size_t blocks, uint8_t *values, size_t step) {
    const int sign = t == Q8_0;
    const v8i16 offset = (v8i16){0, 0, 0, 0, 0, 0, 0, 0} + (int16_t)offset_of(t);
    v16i8 lo0, hi0, lo1, hi1;
    v4u bytes[4];                                 /* bytes[l]: vectors 2l, 2l + 1 */
    unpack(t, b, &lo0, &hi0);
    if (blocks == 2) {                            /* 8 bytes of each block: elements 8l.. */
        unpack(t, b + bs, &lo1, &hi1);
        bytes[0] = __builtin_shufflevector((v4u)lo0, (v4u)lo1, 0, 1, 4, 5);
        bytes[1] = __builtin_shufflevector((v4u)lo0, (v4u)lo1, 2, 3, 6, 7);
        bytes[2] = __builtin_shufflevector((v4u)hi0, (v4u)hi1, 0, 1, 4, 5);
        bytes[3] = __builtin_shufflevector((v4u)hi0, (v4u)hi1, 2, 3, 6, 7);
    } else {                                      /* elements 16l.. */
        bytes[0] = (v4u)lo0;
        bytes[1] = (v4u)hi0;
    }
    for (size_t l = 0; l < 2 * blocks; ++l, values += 2 * step) {
        *(v8i16_u *)values = even_bytes(bytes[l], sign) - offset;
        *(v8i16_u *)(values + step) = odd_bytes(bytes[l], sign) - offset;
    }
}

/* the scales (and mins) of a group's blocks, f16 -> f32, to the panel: heads() gives block i's
 * in lane i (0 past the group's blocks); a group of 2 or 1 blocks repeats d over the block's
 * lanes and puts m in its first lane only */
INLINE void group_scales(int t, const uint8_t *b, size_t bs, size_t blocks, uint8_t *scales, size_t K) {
    const v4u h = heads(b, bs, blocks);
    v4u d = h;
    v4f m = has_min(t) ? half4(h >> 16) : splat(0.0f);
    if (blocks == 2) {
        d = __builtin_shufflevector(h, h, 0, 0, 1, 1);
        m = __builtin_shufflevector(m, m, 0, 2, 1, 3);          /* (m0, 0, m1, 0) */
    }
    if (blocks == 1) d = __builtin_shufflevector(h, h, 0, 0, 0, 0);
    store4((float *)scales, half4(d));
    store4((float *)(scales + 16 * K), m);
}

/* Weight rows to panels (quant_common.h), group by group: the values (group4, group_tail), then
 * the scales. Offsets are subtracted from the values (signed int16 from then on), so the products
 * need no sum(q) correction. */
INLINE void panel_of(int t, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, uint8_t *out, size_t K) {
    const size_t bs = block_bytes(t), stride = panel_stride(nb);
    for (size_t n = 0; n < count; ++n, w += row_bytes) {
        const size_t n0 = n - n % K, rows = count - n0 < K ? count - n0 : K;
        uint8_t *p = out + n0 * stride + 16 * (n % K);        /* row n % K of the panel of rows n0.. */
        const uint8_t *b = w;
        for (size_t g = 0; g < nb / 4; ++g, b += 4 * bs, p += rows * (PANEL_GROUP + 32)) {
            group4(t, b, bs, p, 16 * rows);
            group_scales(t, b, bs, 4, p + rows * PANEL_GROUP, rows);
        }
        if (nb % 4 >= 2) {
            group_tail(t, b, bs, 2, p, 16 * rows);
            group_scales(t, b, bs, 2, p + rows * PANEL_GROUP / 2, rows);
            b += 2 * bs;
            p += rows * (PANEL_GROUP / 2 + 32);
        }
        if (nb % 2) {
            group_tail(t, b, bs, 1, p, 16 * rows);
            group_scales(t, b, bs, 1, p + rows * PANEL_GROUP / 4, rows);
        }
    }
}

void small_panel(int type, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, uint8_t *out, size_t K) {
    switch (type) {
    case Q4_0: panel_of(Q4_0, w, count, row_bytes, nb, out, K); break;
    case Q4_1: panel_of(Q4_1, w, count, row_bytes, nb, out, K); break;
    case Q5_0: panel_of(Q5_0, w, count, row_bytes, nb, out, K); break;
    case Q5_1: panel_of(Q5_1, w, count, row_bytes, nb, out, K); break;
    case Q8_0: panel_of(Q8_0, w, count, row_bytes, nb, out, K); break;
    }
}

/* float32 as engine.quants: d * (q - offset), or d * q + m; one rounding each */
INLINE void dequantize_of(int t, const uint8_t *w, size_t nb, float *out) {
    const size_t bs = block_bytes(t);
    for (size_t j = 0; j < nb; ++j, w += bs, out += 32) {
        v16i8 lo, hi;
        unpack(t, w, &lo, &hi);
        lo -= splat8(offset_of(t));
        hi -= splat8(offset_of(t));
        v4f d = splat(half1(w)), m = splat(has_min(t) ? half1(w + 2) : 0.0f), q[8];
        bytes_to_f32(lo, q);
        bytes_to_f32(hi, q + 4);
        for (int k = 0; k < 8; ++k) store4(out + 4 * k, has_min(t) ? d * q[k] + m : d * q[k]);
    }
}

void small_dequantize(int type, const uint8_t *w, size_t nb, float *out) {
    switch (type) {
    case Q4_0: dequantize_of(Q4_0, w, nb, out); break;
    case Q4_1: dequantize_of(Q4_1, w, nb, out); break;
    case Q5_0: dequantize_of(Q5_0, w, nb, out); break;
    case Q5_1: dequantize_of(Q5_1, w, nb, out); break;
    case Q8_0: dequantize_of(Q8_0, w, nb, out); break;
    }
}
