/* The K-quants: super-blocks of 256 elements in sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 32
 * (Q4_K, Q5_K) with integer scales (and mins) under f16 super-scales (layouts: engine/quants.py).
 * Products take a super-block as two groups of 4 blocks of 32 (see quant_common.h): the
 * sub-block scales multiply the exact int32 sums per sub-block, the super-scales the group's 4
 * sums. */
#include "quant_k.h"

#define INLINE static inline __attribute__((always_inline))

INLINE size_t super_bytes(int t) {
    return t == Q2_K ? 84 : t == Q3_K ? 110 : t == Q4_K ? 144 : t == Q5_K ? 176 : 210;
}
INLINE int subs_of_16(int t) { return t == Q2_K || t == Q3_K || t == Q6_K; }
/* w = (d * sc) * (q - offset) [- (dmin * m)] */
INLINE int offset_of(int t) { return t == Q3_K ? 4 : t == Q6_K ? 32 : 0; }
INLINE int has_min(int t) { return t == Q2_K || t == Q4_K || t == Q5_K; }
/* the types that also take the panel path (quant_common.h) for many rows of x: their sub-block
 * scales fit in the int16 weight values (|sc (q - offset)| <= 4096), a block of 32 has one min */
INLINE int panelled(int t) { return t == Q4_K || t == Q5_K || t == Q6_K; }

/* the 32 quants of block j (elements 32j..32j+31) of super-block sb, unsigned (0..63):
 * elements 0-15 in lo, 16-31 in hi. Bit planes as engine.quants._planes reads them. */
INLINE void unpack_k(int t, const uint8_t *sb, int j, v16i8 *lo, v16i8 *hi) {
    const uint8_t *q;
    switch (t) {
    case Q2_K:                                   /* 2-bit planes, two runs of 32 bytes */
        q = sb + 16 + 32 * (j / 4);
        *lo = shr_bytes(load_i8x16(q), 2 * (j % 4)) & splat8(3);
        *hi = shr_bytes(load_i8x16(q + 16), 2 * (j % 4)) & splat8(3);
        break;
    case Q3_K:                                   /* the same, plus hmask bit j as 4 */
        q = sb + 32 + 32 * (j / 4);
        *lo = (shr_bytes(load_i8x16(q), 2 * (j % 4)) & splat8(3)) | bit_of_bytes(load_i8x16(sb), j, 2);
        *hi = (shr_bytes(load_i8x16(q + 16), 2 * (j % 4)) & splat8(3)) | bit_of_bytes(load_i8x16(sb + 16), j, 2);
        break;
    case Q4_K:                                   /* nibble planes, four runs of 32 bytes */
    case Q5_K:                                   /* plus qh bit j as 16 */
        q = sb + (t == Q4_K ? 16 : 48) + 32 * (j / 2);
        *lo = shr_bytes(load_i8x16(q), 4 * (j % 2)) & splat8(15);
        *hi = shr_bytes(load_i8x16(q + 16), 4 * (j % 2)) & splat8(15);
        if (t == Q5_K) {
            *lo |= bit_of_bytes(load_i8x16(sb + 16), j, 4);
            *hi |= bit_of_bytes(load_i8x16(sb + 32), j, 4);
        }
        break;
    default:                                     /* Q6_K: low nibbles in two runs of 64 bytes, */
        q = sb + 64 * (j / 4) + 32 * (j % 2);    /* 2-bit high parts in two runs of 32 */
        *lo = shr_bytes(load_i8x16(q), 4 * (j % 4 / 2)) & splat8(15);
        *hi = shr_bytes(load_i8x16(q + 16), 4 * (j % 4 / 2)) & splat8(15);
        q = sb + 128 + 32 * (j / 4);
        *lo |= shl_bytes(shr_bytes(load_i8x16(q), 2 * (j % 4)) & splat8(3), 4);
        *hi |= shl_bytes(shr_bytes(load_i8x16(q + 16), 2 * (j % 4)) & splat8(3), 4);
    }
}

/* A super-block's scales as int32, four per vector: sc[0..3] the 16 sub-block scales (8 for
 * Q4_K/Q5_K, in sc[0..1]), mn[] the mins likewise; d and dmin the super-scales. */
typedef struct {
    v4i sc[4], mn[4];
    float d, dmin;
} scales;

#define LOW6 0x3f3f3f3fu
#define LOW4 0x0f0f0f0fu
#define LOW2 0x03030303u

INLINE void scales_of(int t, const uint8_t *sb, scales *s) {
    switch (t) {
    case Q2_K:                                   /* bytes 0-15: scale in the low nibble, min in the high */
        for (int k = 0; k < 4; ++k) {
            uint32_t w = load_u32(sb + 4 * k);
            s->sc[k] = bytes_u(w & LOW4);
            s->mn[k] = bytes_u((w >> 4) & LOW4);
        }
        s->d = half1(sb + 80);
        s->dmin = half1(sb + 82);
        break;
    case Q3_K: {                                 /* low 4 bits in nibbles of 0-7, high 2 in planes of 8-11 */
        uint32_t a = load_u32(sb + 96), b = load_u32(sb + 100), high = load_u32(sb + 104);
        s->sc[0] = bytes_u((a & LOW4) | ((high & LOW2) << 4)) - 32;
        s->sc[1] = bytes_u((b & LOW4) | (((high >> 2) & LOW2) << 4)) - 32;
        s->sc[2] = bytes_u(((a >> 4) & LOW4) | (((high >> 4) & LOW2) << 4)) - 32;
        s->sc[3] = bytes_u(((b >> 4) & LOW4) | (((high >> 6) & LOW2) << 4)) - 32;
        s->d = half1(sb + 108);
        break;
    }
    case Q4_K:
    case Q5_K: {                                 /* 6-bit scales and mins, engine.quants._k_scales_mins */
        uint32_t low = load_u32(sb + 4), high = load_u32(sb + 8), extra = load_u32(sb + 12);
        s->sc[0] = bytes_u(low & LOW6);
        s->sc[1] = bytes_u((extra & LOW4) | (((low >> 6) & LOW2) << 4));
        s->mn[0] = bytes_u(high & LOW6);
        s->mn[1] = bytes_u(((extra >> 4) & LOW4) | (((high >> 6) & LOW2) << 4));
        s->d = half1(sb);
        s->dmin = half1(sb + 2);
        break;
    }
    default:                                     /* Q6_K: 16 signed bytes */
        for (int k = 0; k < 4; ++k) s->sc[k] = bytes_s(sb + 192 + 4 * k);
        s->d = half1(sb + 208);
    }
}

/* -dmin m of blocks 4g..4g+3 (Q4_K, Q5_K), exact in float32 (f16 times 6 bits): what a block's
 * min adds per unit of x's dx sum(q) */
INLINE v4f block_mins(const scales *s, int g) { return splat(-s->dmin) * __builtin_convertvector(s->mn[g], v4f); }

/* block i (of 8) of super-block sb times block j of x rows r0..r0+R-1: per row, 4 partial sums
 * (sub-blocks of 16: lanes 0-1 the first half's, 2-3 the second's, kept apart) */
INLINE void block_sums(int t, size_t R, const uint8_t *sb, int i, size_t j, const acts *a, size_t r0, v4i *s) {
    v16i8 lo, hi;
    unpack_k(t, sb, i, &lo, &hi);
    for (size_t r = 0; r < R; ++r) {
        s[r] = dot32(act_q(a, r0 + r, j * 32), lo, hi, 0, subs_of_16(t));
        pin(s[r]);
    }
}

/* blocks 4g..4g+3 of super-block sb (number `index` in the row) times x rows r0.., into acc[r] */
INLINE void group_k(int t, size_t R, const uint8_t *sb, size_t index, int g, const scales *s, const acts *a,
                    size_t r0, v4f *acc) {
    const size_t j0 = 8 * index + 4 * g;           /* the first block of 32 in the row */
    v4i s0[ROWS_AT_ONCE], s1[ROWS_AT_ONCE], h01[ROWS_AT_ONCE], h23[ROWS_AT_ONCE];
    block_sums(t, R, sb, 4 * g, j0, a, r0, s0);
    block_sums(t, R, sb, 4 * g + 1, j0 + 1, a, r0, s1);
    for (size_t r = 0; r < R; ++r) h01[r] = hadd4(s0[r], s1[r]);
    block_sums(t, R, sb, 4 * g + 2, j0 + 2, a, r0, s0);
    block_sums(t, R, sb, 4 * g + 3, j0 + 3, a, r0, s1);
    for (size_t r = 0; r < R; ++r) h23[r] = hadd4(s0[r], s1[r]);
    for (size_t r = 0; r < R; ++r) {
        v4i sums, mins = splati(0);                /* per block of 32: sum sc q, sum m q_x */
        if (subs_of_16(t)) {                       /* h01, h23: the 8 sub-block sums */
            const int32_t *s16 = act_s16(a, r0 + r) + 2 * j0;
            v4i x01 = load_i32x4(s16), x23 = load_i32x4(s16 + 4);
            v4i t01 = h01[r] - offset_of(t) * x01, t23 = h23[r] - offset_of(t) * x23;
            sums = hadd4(t01 * s->sc[2 * g], t23 * s->sc[2 * g + 1]);
            if (has_min(t)) mins = hadd4(x01 * s->mn[2 * g], x23 * s->mn[2 * g + 1]);
        } else {
            sums = hadd4(h01[r], h23[r]) * s->sc[g];
            mins = load_i32x4(act_s32(a, r0 + r) + j0) * s->mn[g];
        }
        v4f dx = load4(act_dx(a, r0 + r) + j0);
        if (panelled(t)) {                         /* as panel_tile (quant.c), bit for bit */
            acc[r] = madd(__builtin_convertvector(sums, v4f), splat(s->d) * dx, acc[r]);
            if (has_min(t)) acc[r] = madd(block_mins(s, g), load4(act_xs(a, r0 + r) + j0), acc[r]);
        } else {
            v4f f = __builtin_convertvector(sums, v4f) * splat(s->d);
            if (has_min(t)) f -= __builtin_convertvector(mins, v4f) * splat(s->dmin);
            acc[r] = madd(f, dx, acc[r]);
        }
    }
}

INLINE void rows_of(int t, size_t R, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, const acts *a,
                    size_t r0, const float *bias, float *y, size_t y_row) {
    for (size_t n = 0; n < count; ++n, w += row_bytes) {
        v4f acc[ROWS_AT_ONCE];
        for (size_t r = 0; r < R; ++r) acc[r] = splat(0.0f);
        const uint8_t *sb = w;
        for (size_t i = 0; i < nb / 8; ++i, sb += super_bytes(t)) {
            scales s;
            scales_of(t, sb, &s);
            group_k(t, R, sb, i, 0, &s, a, r0, acc);
            group_k(t, R, sb, i, 1, &s, a, r0, acc);
        }
        for (size_t r = 0; r < R; ++r) y[r * y_row + n] = hsum4(acc[r]) + (bias ? bias[n] : 0.0f);
    }
}

void k_rows(int type, size_t r, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, const acts *a,
            size_t r0, const float *bias, float *y, size_t y_row) {
    switch (type) {
        ROWS(Q2_K);
        ROWS(Q3_K);
        ROWS(Q4_K);
        ROWS(Q5_K);
        ROWS(Q6_K);
    }
}

/* --- panels (quant_common.h) for Q4_K, Q5_K, Q6_K: the sub-block scales multiplied into the
 * values (int16), the super-scale d as every block's scale, -dmin m as its min ---------------------- */
/* group h (blocks 4h..4h+3) of super-block sb, as quant_small.c's group4 lays a group out; its
 * scales and mins after PANEL_GROUP bytes per row */
INLINE void group_k_panel(int t, const uint8_t *sb, const scales *s, int h, uint8_t *values, size_t step,
                          uint8_t *scales_out, size_t K) {
    const v8i16 offset = (v8i16){0, 0, 0, 0, 0, 0, 0, 0} + (int16_t)offset_of(t);
    v4u in[4], upper[4], tr[4];
    for (int i = 0; i < 4; ++i) {
        v16i8 lo, hi;
        unpack_k(t, sb, 4 * h + i, &lo, &hi);
        in[i] = (v4u)lo;
        upper[i] = (v4u)hi;
    }
    v4i first, second;                             /* each block's scale of elements 0-15, of 16-31 */
    if (subs_of_16(t)) {                           /* Q6_K: sub-blocks 2j, 2j + 1 of block j */
        first = __builtin_shufflevector(s->sc[2 * h], s->sc[2 * h + 1], 0, 2, 4, 6);
        second = __builtin_shufflevector(s->sc[2 * h], s->sc[2 * h + 1], 1, 3, 5, 7);
    } else {
        first = second = s->sc[h];
    }
    for (int half = 0; half < 2; ++half, values += 2 * step) {
        const v4i sc = half ? second : first;      /* lanes 2i, 2i + 1: block i's */
        const v8i16 scale = __builtin_convertvector(__builtin_shufflevector(sc, sc, 0, 0, 1, 1, 2, 2, 3, 3), v8i16);
        transpose_words(half ? upper : in, tr);    /* lane i: elements 16 half + 4l..4l+3 of block i */
        for (int l = 0; l < 4; ++l) {
            *(v8i16_u *)(values + 4 * l * step) = (even_bytes(tr[l], 0) - offset) * scale;
            *(v8i16_u *)(values + (4 * l + 1) * step) = (odd_bytes(tr[l], 0) - offset) * scale;
        }
    }
    store4((float *)scales_out, splat(s->d));
    store4((float *)(scales_out + 16 * K), has_min(t) ? block_mins(s, h) : splat(0.0f));
}

INLINE void panel_of_k(int t, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, uint8_t *out, size_t K) {
    const size_t stride = panel_stride(nb);
    for (size_t n = 0; n < count; ++n, w += row_bytes) {
        const size_t n0 = n - n % K, rows = count - n0 < K ? count - n0 : K;
        uint8_t *p = out + n0 * stride + 16 * (n % K);        /* row n % K of the panel of rows n0.. */
        const uint8_t *sb = w;
        for (size_t i = 0; i < nb / 8; ++i, sb += super_bytes(t)) {
            scales s;
            scales_of(t, sb, &s);
            for (int h = 0; h < 2; ++h, p += rows * (PANEL_GROUP + 32))
                group_k_panel(t, sb, &s, h, p, 16 * rows, p + rows * PANEL_GROUP, rows);
        }
    }
}

int k_panelled(int type) { return panelled(type); }

void k_panel(int type, const uint8_t *w, size_t count, size_t row_bytes, size_t nb, uint8_t *out, size_t K) {
    switch (type) {
    case Q4_K: panel_of_k(Q4_K, w, count, row_bytes, nb, out, K); break;
    case Q5_K: panel_of_k(Q5_K, w, count, row_bytes, nb, out, K); break;
    case Q6_K: panel_of_k(Q6_K, w, count, row_bytes, nb, out, K); break;
    }
}

/* 16 quants q times the sub-block's float scale (and minus its float min), as engine.quants */
INLINE void dequantize16(int t, v16i8 q, float scale, float min, float *out) {
    v4f v[4];
    bytes_to_f32(q - splat8(offset_of(t)), v);
    for (int k = 0; k < 4; ++k)
        store4(out + 4 * k, has_min(t) ? splat(scale) * v[k] - splat(min) : splat(scale) * v[k]);
}

INLINE void dequantize_of(int t, const uint8_t *w, size_t nb, float *out) {
    for (size_t i = 0; i < nb / 8; ++i, w += super_bytes(t)) {
        scales s;
        scales_of(t, w, &s);
        for (int j = 0; j < 8; ++j, out += 32) {
            v16i8 lo, hi;
            unpack_k(t, w, j, &lo, &hi);
            int a = subs_of_16(t) ? 2 * j : j, b = subs_of_16(t) ? 2 * j + 1 : j;     /* sub-blocks */
            float sa = s.d * (float)s.sc[a / 4][a % 4], sb = s.d * (float)s.sc[b / 4][b % 4];
            float ma = has_min(t) ? s.dmin * (float)s.mn[a / 4][a % 4] : 0.0f;
            float mb = has_min(t) ? s.dmin * (float)s.mn[b / 4][b % 4] : 0.0f;
            dequantize16(t, lo, sa, ma, out);
            dequantize16(t, hi, sb, mb, out + 16);
        }
    }
}

void k_dequantize(int type, const uint8_t *w, size_t nb, float *out) {
    switch (type) {
    case Q2_K: dequantize_of(Q2_K, w, nb, out); break;
    case Q3_K: dequantize_of(Q3_K, w, nb, out); break;
    case Q4_K: dequantize_of(Q4_K, w, nb, out); break;
    case Q5_K: dequantize_of(Q5_K, w, nb, out); break;
    case Q6_K: dequantize_of(Q6_K, w, nb, out); break;
    }
}
