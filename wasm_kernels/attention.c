/* Scaled dot-product attention, out = softmax(q k^T * scale + mask) v, per (batch, head),
 * without materialising the (L, S) scores: ROWS query rows at a time, their scores in a
 * ROWS x S tile of scratch.
 *
 * Per (batch, KV head): K^T is packed once into scratch (k-major, S padded to 8 with zeros;
 * V too when its columns are not contiguous, its rows are apart (for 8 query rows or more) or Dv
 * is not a multiple of 4), then every query head
 * that shares it (grouped-query attention: head h reads KV head h / (heads / kv_heads)) runs
 * over it in tiles of ROWS query rows (the rows of all those heads together, so that decoding
 * one token with grouped heads still fills a tile):
 *   - scores: a ROWS x 8 register tile over the depth, as in the GEMM, times `scale`;
 *   - the mask: causal (key j > query i), bool (0 = masked) or additive float, a masked
 *     score becoming -inf exactly as the composite's masked_fill does;
 *   - per row the max, then e_j = exp(x_j - max) and their sum, as softmax_f32 does it, so a
 *     row with no finite score (all masked) gives NaN, as the composite does, and NaN or +inf
 *     anywhere in a row makes the row NaN;
 *   - the e_j transposed (query-interleaved) times V in a ROWS x 8 register tile over keys,
 *     each output row divided by its sum at the end (the composite divides before the product:
 *     the same to rounding).
 * Masked keys are multiplied like the others (0 * v), so inf/NaN in V behave as in a product.
 */
#include "exports.h"
#include "common.h"
#include "pool.h"

#define ROWS 4                      /* query rows per tile */

static inline size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
static inline v4f lane(v4f v, int i) {
    switch (i) {
    case 0: return __builtin_shufflevector(v, v, 0, 0, 0, 0);
    case 1: return __builtin_shufflevector(v, v, 1, 1, 1, 1);
    case 2: return __builtin_shufflevector(v, v, 2, 2, 2, 2);
    default: return __builtin_shufflevector(v, v, 3, 3, 3, 3);
    }
}

/* dst[p * ld + c] = row c's element p (rows[c][p * step]) for 4 rows and p < d: a transposed copy,
 * 4x4 blocks where the rows are contiguous */
static void transpose_rows4(const float *const rows[4], ptrdiff_t step, size_t d, float *dst, size_t ld) {
    size_t p = 0;
    if (step == 1) {
        for (; p + 4 <= d; p += 4) {
            v4f r0 = load4(rows[0] + p), r1 = load4(rows[1] + p), r2 = load4(rows[2] + p), r3 = load4(rows[3] + p);
            TRANSPOSE4(r0, r1, r2, r3);
            store4(dst + p * ld, r0);
            store4(dst + (p + 1) * ld, r1);
            store4(dst + (p + 2) * ld, r2);
            store4(dst + (p + 3) * ld, r3);
        }
    }
    for (; p < d; ++p)
        for (size_t c = 0; c < 4; ++c) dst[p * ld + c] = rows[c][(ptrdiff_t)p * step];
}

/* kt[p * sp + j] = k[j][p] for j < s, 0 for s <= j < sp (sp a multiple of 4) */
static void pack_kt(size_t s, size_t d, const float *k, ptrdiff_t ks_s, ptrdiff_t ks_d, float *kt, size_t sp) {
    for (size_t j = 0; j < sp; j += 4) {
        if (j + 4 <= s) {
            const float *rows[4] = {k + (ptrdiff_t)j * ks_s, k + (ptrdiff_t)(j + 1) * ks_s,
                                    k + (ptrdiff_t)(j + 2) * ks_s, k + (ptrdiff_t)(j + 3) * ks_s};
            transpose_rows4(rows, ks_d, d, kt + j, sp);
            continue;
        }
        for (size_t c = j; c < j + 4; ++c)
            for (size_t p = 0; p < d; ++p) kt[p * sp + c] = c < s ? k[(ptrdiff_t)c * ks_s + (ptrdiff_t)p * ks_d] : 0.0f;
    }
}

/* vp[j * dvp + c] = v[j][c] for c < dv, 0 for dv <= c < dvp */
static void pack_v(size_t s, size_t dv, const float *v, ptrdiff_t vs_s, ptrdiff_t vs_d, float *vp, size_t dvp) {
    for (size_t j = 0; j < s; ++j) {
        const float *src = v + (ptrdiff_t)j * vs_s;
        float *dst = vp + j * dvp;
        for (size_t c = 0; c < dvp; ++c) dst[c] = c < dv ? src[(ptrdiff_t)c * vs_d] : 0.0f;
    }
}

/* The register tile both products use: acc[r][h] = sum over t < n of x[t * ROWS + r] * y[t * ys + 4h .. +4],
 * x holding ROWS rows interleaved (query rows, or the exps transposed), y 8 columns of K^T or V. */
static inline void tile_4x8(size_t n, const float *x, const float *y, ptrdiff_t ys, v4f acc[ROWS][2]) {
    v4f a00 = splat(0.0f), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
    for (size_t t = 0; t < n; ++t, y += ys) {
        v4f q = load4(x + t * ROWS), y0 = load4(y), y1 = load4(y + 4);
        v4f q0 = lane(q, 0), q1 = lane(q, 1), q2 = lane(q, 2), q3 = lane(q, 3);
        a00 = madd(q0, y0, a00); a01 = madd(q0, y1, a01);
        a10 = madd(q1, y0, a10); a11 = madd(q1, y1, a11);
        a20 = madd(q2, y0, a20); a21 = madd(q2, y1, a21);
        a30 = madd(q3, y0, a30); a31 = madd(q3, y1, a31);
    }
    acc[0][0] = a00; acc[0][1] = a01; acc[1][0] = a10; acc[1][1] = a11;
    acc[2][0] = a20; acc[2][1] = a21; acc[3][0] = a30; acc[3][1] = a31;
}

/* scores of ROWS query rows (qp[p * ROWS + r]) against all keys: sc[r * sp + j] */
static void score_tile(size_t d, size_t sp, const float *qp, const float *kt, float scale, float *sc) {
    v4f sv = splat(scale), acc[ROWS][2];
    for (size_t j = 0; j < sp; j += 8) {
        tile_4x8(d, qp, kt + j, (ptrdiff_t)sp, acc);
        for (size_t r = 0; r < ROWS; ++r) {
            store4(sc + r * sp + j, acc[r][0] * sv);
            store4(sc + r * sp + j + 4, acc[r][1] * sv);
        }
    }
}

/* one row of the mask as 4-lane words: bool -> all-ones (attend) or 0 (as floats' bits), float -> the value */
static void mask_row(size_t s, const void *mask, int kind, ptrdiff_t ms_s, float *mrow) {
    if (kind == 1) {
        const uint8_t *m = (const uint8_t *)mask;
        int32_t *out = (int32_t *)mrow;
        for (size_t j = 0; j < s; ++j) out[j] = m[(ptrdiff_t)j * ms_s] ? -1 : 0;
    } else {
        const float *m = (const float *)mask;
        for (size_t j = 0; j < s; ++j) mrow[j] = m[(ptrdiff_t)j * ms_s];
    }
}

/* the mask, then the unnormalised softmax in place, of one row of s scores (query i):
 * e_j = exp(x_j - max); returns the sum of the e_j (the caller divides the output by it).
 * mrow: mask_row's words, or NULL. */
static float softmax_row(size_t s, float *row, size_t i, const float *mrow, int kind, int causal) {
    const float minus_inf = -__builtin_inff();
    if (causal)
        for (size_t j = i + 1; j < s; ++j) row[j] = minus_inf;
    v4f m4 = splat(minus_inf);
    size_t j = 0;
    for (; j + 4 <= s; j += 4) {
        v4f x = load4(row + j);
        if (kind == 1) x = select4((v4i)load4(mrow + j), x, splat(minus_inf));
        if (kind == 2) x += load4(mrow + j);
        store4(row + j, x);
        m4 = vmax(m4, x);
    }
    float m = hmax4(m4);
    for (; j < s; ++j) {
        float x = row[j];
        if (kind == 1 && !((const int32_t *)mrow)[j]) x = minus_inf;
        if (kind == 2) x += mrow[j];
        row[j] = x;
        m = x > m ? x : m;
    }
    v4f s4 = splat(0.0f), mv = splat(m);
    for (j = 0; j + 4 <= s; j += 4) {
        v4f e = flush4(exp4(load4(row + j) - mv));        /* read Dv times by P V: no subnormals */
        store4(row + j, e);
        s4 += e;
    }
    float sum = hsum4(s4);
    for (; j < s; ++j) {
        float e = flush4(exp4(splat(row[j] - m)))[0];
        row[j] = e;
        sum += e;
    }
    return sum;
}

/* pt[j * ROWS + r] = sc[r * sp + j] for j < sp (a multiple of 4) */
static void transpose_tile(size_t sp, const float *sc, float *pt) {
    for (size_t j = 0; j < sp; j += 4) {
        v4f r0 = load4(sc + j), r1 = load4(sc + sp + j), r2 = load4(sc + 2 * sp + j), r3 = load4(sc + 3 * sp + j);
        TRANSPOSE4(r0, r1, r2, r3);
        store4(pt + j * ROWS, r0);
        store4(pt + j * ROWS + 4, r1);
        store4(pt + j * ROWS + 8, r2);
        store4(pt + j * ROWS + 12, r3);
    }
}

/* outs[r] (r < rows) = pt (s x ROWS) times v (s x dvp, rows vs apart) / sums[r], dv columns kept */
static void value_tile(size_t s, size_t dv, size_t dvp, const float *pt, const float *v, ptrdiff_t vs,
                       const float *sums, size_t rows, float *const outs[ROWS]) {
    size_t c = 0;
    for (; c + 8 <= dvp; c += 8) {
        v4f acc[ROWS][2];
        tile_4x8(s, pt, v + c, vs, acc);
        for (size_t r = 0; r < rows; ++r) {
            acc[r][0] /= splat(sums[r]);
            acc[r][1] /= splat(sums[r]);
            float *o = outs[r] + c;
            for (int h = 0; h < 2; ++h) {
                size_t left = dv > c + 4 * h ? dv - c - 4 * h : 0;
                if (left >= 4) store4(o + 4 * h, acc[r][h]);
                else for (size_t l = 0; l < left; ++l) o[4 * h + l] = acc[r][h][l];
            }
        }
    }
    if (c < dvp) {                                   /* a last chunk of 4 columns */
        v4f a0 = splat(0.0f), a1 = a0, a2 = a0, a3 = a0;
        const float *vj = v + c;
        for (size_t j = 0; j < s; ++j, vj += vs) {
            v4f p = load4(pt + j * ROWS), v0 = load4(vj);
            a0 = madd(lane(p, 0), v0, a0); a1 = madd(lane(p, 1), v0, a1);
            a2 = madd(lane(p, 2), v0, a2); a3 = madd(lane(p, 3), v0, a3);
        }
        v4f acc[ROWS] = {a0, a1, a2, a3};
        size_t left = dv - c;
        for (size_t r = 0; r < rows; ++r) {
            acc[r] /= splat(sums[r]);
            float *o = outs[r] + c;
            if (left >= 4) store4(o, acc[r]);
            else for (size_t l = 0; l < left; ++l) o[l] = acc[r][l];
        }
    }
}

/* One query row reading a KV head (decoding one token without grouped heads: a ROWS-row tile would
 * repeat it 4 times): the same sums as the tile's row 0, in the same order, so the same bits.
 * Scores: each key's sum over the depth in order from 0, times scale (score_tile), with 4x4 blocks
 * of K (rows ks_s apart, contiguous, d a multiple of 4) transposed in registers instead of K^T
 * packed; 16 keys at a time, keys past s repeat the last (their scores are never read). */
static void score_row(size_t s, size_t d, const float *q, const float *k, ptrdiff_t ks_s, float scale, float *sc) {
    v4f sv = splat(scale);
    for (size_t j = 0; j < s; j += 16) {
        const float *rows[16];
        for (size_t c = 0; c < 16; ++c) rows[c] = k + (ptrdiff_t)(j + c < s ? j + c : s - 1) * ks_s;
        v4f a0 = splat(0.0f), a1 = a0, a2 = a0, a3 = a0;
        for (size_t p = 0; p < d; p += 4) {
            v4f qv = load4(q + p), q0 = lane(qv, 0), q1 = lane(qv, 1), q2 = lane(qv, 2), q3 = lane(qv, 3);
#define SCORE_QUAD(acc, at)                                                                          \
            do {                                                                                     \
                v4f r0 = load4(rows[at] + p), r1 = load4(rows[at + 1] + p), r2 = load4(rows[at + 2] + p); \
                v4f r3 = load4(rows[at + 3] + p);                                                    \
                TRANSPOSE4(r0, r1, r2, r3);                                                          \
                acc = madd(q3, r3, madd(q2, r2, madd(q1, r1, madd(q0, r0, acc))));                   \
            } while (0)
            SCORE_QUAD(a0, 0);
            SCORE_QUAD(a1, 4);
            SCORE_QUAD(a2, 8);
            SCORE_QUAD(a3, 12);
#undef SCORE_QUAD
        }
        v4f out[4] = {a0 * sv, a1 * sv, a2 * sv, a3 * sv};
        for (size_t c = 0; c < 16 && j + c < s; c += 4) {
            if (j + c + 4 <= s) store4(sc + j + c, out[c / 4]);
            else for (size_t l = 0; j + c + l < s; ++l) sc[j + c + l] = out[c / 4][l];
        }
    }
}

/* out = e (s weights) times v (s x dv, rows vs apart, contiguous, dv a multiple of 4) / sum: each
 * column's sum over the keys in order from 0 (value_tile's row 0), 8 vectors of columns a pass */
static void value_row(size_t s, size_t dv, const float *e, const float *v, ptrdiff_t vs, float sum, float *out) {
    for (size_t c = 0; c < dv; c += 32) {
        size_t n = dv - c < 32 ? (dv - c) / 4 : 8;
        v4f acc[8];
        for (size_t h = 0; h < 8; ++h) acc[h] = splat(0.0f);
        const float *vj = v + c;
        if (n == 8) {
            for (size_t j = 0; j < s; ++j, vj += vs) {
                v4f p = splat(e[j]);
                for (size_t h = 0; h < 8; ++h) acc[h] = madd(p, load4(vj + 4 * h), acc[h]);
            }
        } else {
            for (size_t j = 0; j < s; ++j, vj += vs) {
                v4f p = splat(e[j]);
                for (size_t h = 0; h < n; ++h) acc[h] = madd(p, load4(vj + 4 * h), acc[h]);
            }
        }
        for (size_t h = 0; h < n; ++h) store4(out + c + 4 * h, acc[h] / splat(sum));
    }
}

typedef struct {
    size_t batch, heads, kv_heads, l, s, d, dv, sp, dvp, need, tiles;
    const float *q, *k, *v;
    ptrdiff_t qs_b, qs_h, qs_l, qs_d, ks_b, ks_h, ks_s, ks_d, vs_b, vs_h, vs_s, vs_d;
    const void *mask;
    int mask_kind, causal, pack_values, single_row;
    ptrdiff_t ms_b, ms_h, ms_l, ms_s;
    float scale;
    float *out, *scratch;
} attention_job;

/* the units [u0, u1) of batch x KV heads x tiles of ROWS query rows, in that order; K^T (and V
 * packed) made whenever a unit starts another (batch, KV head) */
static void attention_units(const attention_job *j, size_t u0, size_t u1, float *scratch) {
    const size_t s = j->s, d = j->d, dv = j->dv, sp = j->sp, dvp = j->dvp, l = j->l;
    /* K^T, scores, probabilities transposed, the tile's queries, the mask rows, V packed */
    float *kt = scratch, *sc = kt + d * sp, *pt = sc + ROWS * sp, *qp = pt + ROWS * sp, *mrows = qp + d * ROWS;
    float *vp = mrows + ROWS * sp;
    size_t rep = j->heads / j->kv_heads, group_rows = rep * l;
    ptrdiff_t elem = j->mask_kind == 1 ? 1 : (ptrdiff_t)sizeof(float);  /* the mask's element, in bytes */
    int mask_per_row = j->mask_kind && (j->ms_l != 0 || j->ms_h != 0);  /* else one row for all (key padding) */
    size_t current = (size_t)-1;                                        /* the (batch, KV head) packed */
    const float *vg = 0;
    ptrdiff_t v_row = 0;
    for (size_t u = u0; u < u1; ++u) {
        size_t pair = u / j->tiles, b = pair / j->kv_heads, g = pair % j->kv_heads, t0 = u % j->tiles * ROWS;
        const char *mb = j->mask_kind ? (const char *)j->mask + elem * (ptrdiff_t)b * j->ms_b : 0;
        if (j->single_row) {                        /* one query row reads this KV head */
            const float *kg = j->k + (ptrdiff_t)b * j->ks_b + (ptrdiff_t)g * j->ks_h;
            const float *q = j->q + (ptrdiff_t)b * j->qs_b + (ptrdiff_t)g * j->qs_h;
            for (size_t p = 0; p < d; ++p) qp[p] = q[(ptrdiff_t)p * j->qs_d];
            score_row(s, d, qp, kg, j->ks_s, j->scale, sc);
            if (j->mask_kind) mask_row(s, mb + elem * (ptrdiff_t)g * j->ms_h, j->mask_kind, j->ms_s, mrows);
            float sum = softmax_row(s, sc, 0, j->mask_kind ? mrows : 0, j->mask_kind, j->causal);
            value_row(s, dv, sc, j->v + (ptrdiff_t)b * j->vs_b + (ptrdiff_t)g * j->vs_h, j->vs_s, sum,
                      j->out + (b * j->heads + g) * dv);
            continue;
        }
        if (pair != current) {
            if (j->mask_kind && !mask_per_row) mask_row(s, mb, j->mask_kind, j->ms_s, mrows);
            pack_kt(s, d, j->k + (ptrdiff_t)b * j->ks_b + (ptrdiff_t)g * j->ks_h, j->ks_s, j->ks_d, kt, sp);
            vg = j->v + (ptrdiff_t)b * j->vs_b + (ptrdiff_t)g * j->vs_h;
            v_row = j->vs_s;
            if (j->pack_values) {
                pack_v(s, dv, vg, j->vs_s, j->vs_d, vp, dvp);
                vg = vp;
                v_row = (ptrdiff_t)dvp;
            }
            current = pair;
        }
        /* the rows of every query head reading this KV head, ROWS at a time: row t is query
         * t % l of head g * rep + t / l (decoding one token, the grouped heads fill a tile) */
        size_t rows = group_rows - t0 < ROWS ? group_rows - t0 : ROWS;
        const float *qr[ROWS];
        float *outs[ROWS], sums[ROWS];
        size_t query[ROWS], head[ROWS];
        for (size_t r = 0; r < ROWS; ++r) {      /* missing rows repeat the last one */
            size_t t = t0 + (r < rows ? r : rows - 1);
            head[r] = g * rep + t / l;
            query[r] = t % l;
            qr[r] = j->q + (ptrdiff_t)b * j->qs_b + (ptrdiff_t)head[r] * j->qs_h + (ptrdiff_t)query[r] * j->qs_l;
            outs[r] = j->out + ((b * l + query[r]) * j->heads + head[r]) * dv;     /* (N, L, H, Dv) */
        }
        transpose_rows4(qr, j->qs_d, d, qp, ROWS);
        score_tile(d, sp, qp, kt, j->scale, sc);
        for (size_t r = 0; r < ROWS; ++r) {
            float *mrow = mrows + (mask_per_row ? r * sp : 0);
            if (mask_per_row)
                mask_row(s, mb + elem * ((ptrdiff_t)head[r] * j->ms_h + (ptrdiff_t)query[r] * j->ms_l),
                         j->mask_kind, j->ms_s, mrow);
            sums[r] = softmax_row(s, sc + r * sp, query[r], j->mask_kind ? mrow : 0, j->mask_kind, j->causal);
        }
        transpose_tile(sp, sc, pt);
        value_tile(s, dv, dvp, pt, vg, v_row, sums, rows, outs);
    }
}

static void attention_part(void *arg, size_t part, size_t parts) {
    const attention_job *j = arg;
    size_t u0, u1;
    pool_range(j->batch * j->kv_heads * j->tiles, part, parts, &u0, &u1);
    if (u0 < u1) attention_units(j, u0, u1, j->scratch + part * j->need);
}

/* Threads (pool.h): the tiles of query rows of every (batch, KV head), in even runs; a part
 * packs K^T (and V) again where its run starts inside a KV head. Every row is computed as on one
 * thread: the same bits. Each part has its own scratch. */
#define ATTENTION_PART_WORK 65536       /* multiply-adds a part at least (measured: see README, Threads) */

EXPORT size_t attention_f32(size_t batch, size_t heads, size_t kv_heads, size_t l, size_t s, size_t d, size_t dv,
                            const float *q, ptrdiff_t qs_b, ptrdiff_t qs_h, ptrdiff_t qs_l, ptrdiff_t qs_d,
                            const float *k, ptrdiff_t ks_b, ptrdiff_t ks_h, ptrdiff_t ks_s, ptrdiff_t ks_d,
                            const float *v, ptrdiff_t vs_b, ptrdiff_t vs_h, ptrdiff_t vs_s, ptrdiff_t vs_d,
                            const void *mask, int mask_kind, ptrdiff_t ms_b, ptrdiff_t ms_h, ptrdiff_t ms_l,
                            ptrdiff_t ms_s, int causal, float scale, float *out, float *scratch,
                            size_t scratch_size) {
    size_t sp = round_up(s, 8);
    /* V packed when its columns are not dense, or when its rows are apart (heads interleaved, as
     * in a fused q/k/v projection's output) and enough query rows read it: every tile streams
     * all S rows, which a row stride of kilobytes spreads over one page each (3x slower in wasm
     * for Whisper's encoder, 1500 rows) */
    size_t reads = kv_heads ? heads / kv_heads * l : 0;
    int pack_values = vs_d != 1 || dv % 4 != 0 || (vs_s != (ptrdiff_t)dv && reads >= 2 * ROWS);
    size_t dvp = pack_values ? round_up(dv, 4) : dv;
    size_t need = d * sp + 2 * ROWS * sp + d * ROWS + ROWS * sp + (pack_values ? s * dvp : 0);
    size_t tiles = (reads + ROWS - 1) / ROWS, units = batch * kv_heads * tiles;
    unsigned long long work = (unsigned long long)units * ROWS * s * (d + dv) / ATTENTION_PART_WORK;
    size_t parts = pool_parts(work > units ? units : (size_t)work, 1);
    if (scratch_size < parts * need) return parts * need;
    if (!batch || !heads || !kv_heads || !l || !dv) return 0;
    /* one query row per KV head, K and V rows contiguous: score_row and value_row, no packing */
    int single_row = reads == 1 && ks_d == 1 && vs_d == 1 && d % 4 == 0 && dv % 4 == 0 && s > 0;
    attention_job job = {batch, heads, kv_heads, l, s, d, dv, sp, dvp, need, tiles, q, k, v,
                         qs_b, qs_h, qs_l, qs_d, ks_b, ks_h, ks_s, ks_d, vs_b, vs_h, vs_s, vs_d,
                         mask, mask_kind, causal, pack_values, single_row, ms_b, ms_h, ms_l, ms_s, scale, out, scratch};
    pool_run(parts, attention_part, &job);
    return 0;
}
