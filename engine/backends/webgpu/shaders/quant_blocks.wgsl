// GGML blocks on the device, read as 32-bit words (layout: webgpu/quantized.py). W holds every
// block's body, BODY words each, blocks in row order; q4_0, q5_0, q8_0, q3_k and q6_k keep
// their one f16 scale d apart (it would break the body's word alignment): all the blocks' d,
// two to a word, from word `scales` on. The kernel declares W.
// A unit is 8 weights of one block: two runs of 4 consecutive elements, at `at` and `at + HI`
// in the block, chosen so that one unit reads one or two words of packed quants (every word
// of a block's quants belongs to consecutive units, so neighbouring threads read neighbouring
// words). unit_<type>(blk, u, scales) dequantizes unit u of block blk (counted over the whole
// tensor) as engine.quants does: every product there is exact in f32 (an f16 scale has 11
// significant bits, the sub-block scales and quants at most 8 and 6), so only the final add
// rounds and a fused multiply-add gives the same bits.
// Template: QTYPE (the type's name), UNITS (units per block), BLOCK (elements per block), HI.
struct Unit { lo: vec4<f32>, hi: vec4<f32>, at: u32 }

const UNITS: u32 = {{UNITS}}u;
const BLOCK: u32 = {{BLOCK}}u;
const HI: u32 = {{HI}}u;

fn unit(blk: u32, u: u32, scales: u32) -> Unit {
    return unit_{{QTYPE}}(blk, u, scales);
}

// each byte of w shifted right by `shift` and masked: byte i in component i
fn fields(w: u32, shift: u32, mask: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(mask);
}

// bits first..first+3 of w, each as 0 or 16 (the 5th bit of a q5 quant)
fn fifth(w: u32, first: u32) -> vec4<u32> {
    return ((vec4<u32>(w) >> (vec4<u32>(0u, 1u, 2u, 3u) + first)) & vec4<u32>(1u)) << vec4<u32>(4u);
}

fn int8x4(w: u32) -> vec4<f32> {
    return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// byte k of the bytes starting at word `base`
fn byte_at(base: u32, k: u32) -> u32 {
    return (W[base + k / 4u] >> (8u * (k % 4u))) & 0xffu;
}

fn lone_scale(blk: u32, scales: u32) -> f32 {
    return unpack2x16float(W[scales + blk / 2u])[blk & 1u];
}

// --- 32-element blocks: 4 units; q4/q5 unit u is qs word u, elements 4u.. (low nibbles) and
// 4u + 16.. (high nibbles)
fn unit_q4_0(blk: u32, u: u32, scales: u32) -> Unit {        // body: qs[4]
    let d = lone_scale(blk, scales);
    let q = W[blk * 4u + u];
    return Unit(d * (vec4<f32>(fields(q, 0u, 15u)) - 8.0), d * (vec4<f32>(fields(q, 4u, 15u)) - 8.0), 4u * u);
}

fn unit_q4_1(blk: u32, u: u32, scales: u32) -> Unit {        // body: d m, qs[4]
    let b = blk * 5u;
    let dm = unpack2x16float(W[b]);
    let q = W[b + 1u + u];
    return Unit(dm.x * vec4<f32>(fields(q, 0u, 15u)) + dm.y, dm.x * vec4<f32>(fields(q, 4u, 15u)) + dm.y, 4u * u);
}

fn unit_q5_0(blk: u32, u: u32, scales: u32) -> Unit {        // body: qh, qs[4]
    let d = lone_scale(blk, scales);
    let b = blk * 5u;
    let qh = W[b];
    let q = W[b + 1u + u];
    let lo = vec4<f32>(fields(q, 0u, 15u) | fifth(qh, 4u * u)) - 16.0;
    let hi = vec4<f32>(fields(q, 4u, 15u) | fifth(qh, 4u * u + 16u)) - 16.0;
    return Unit(d * lo, d * hi, 4u * u);
}

fn unit_q5_1(blk: u32, u: u32, scales: u32) -> Unit {        // body: d m, qh, qs[4]
    let b = blk * 6u;
    let dm = unpack2x16float(W[b]);
    let qh = W[b + 1u];
    let q = W[b + 2u + u];
    let lo = vec4<f32>(fields(q, 0u, 15u) | fifth(qh, 4u * u));
    let hi = vec4<f32>(fields(q, 4u, 15u) | fifth(qh, 4u * u + 16u));
    return Unit(dm.x * lo + dm.y, dm.x * hi + dm.y, 4u * u);
}

fn unit_q8_0(blk: u32, u: u32, scales: u32) -> Unit {        // body: qs[8]; unit u: elements 8u..8u+7
    let d = lone_scale(blk, scales);
    let b = blk * 8u + 2u * u;
    return Unit(d * int8x4(W[b]), d * int8x4(W[b + 1u]), 8u * u);
}

// --- 256-element super-blocks: 32 units; unit u covers elements at = 64 (u / 8) + 4 (u % 8)
// and at + 32, in sub-blocks at / 16 and at / 16 + 2 (of 16 elements) or at / 32 and at / 32 + 1
// (of 32). Q2_K/Q3_K: qs word 8 r + w (r = u / 16, w = u % 8) holds elements 128 r + 32 s + 4 w..
// at bit 2 s, so this unit's runs are planes s = 2 h and 2 h + 1 (h = u / 8 % 2).
fn k_at(u: u32) -> u32 {
    return 64u * (u / 8u) + 4u * (u % 8u);
}

fn unit_q2_k(blk: u32, u: u32, scales: u32) -> Unit {        // body: scales[4], qs[16], d dmin
    let b = blk * 21u;
    let dm = unpack2x16float(W[b + 20u]);
    let shift = 4u * (u / 8u % 2u);
    let q = W[b + 4u + u / 16u * 8u + u % 8u];
    let sb = k_at(u) / 16u;
    let s_lo = byte_at(b, sb);
    let s_hi = byte_at(b, sb + 2u);
    let lo = (dm.x * f32(s_lo & 15u)) * vec4<f32>(fields(q, shift, 3u)) - dm.y * f32(s_lo >> 4u);
    let hi = (dm.x * f32(s_hi & 15u)) * vec4<f32>(fields(q, shift + 2u, 3u)) - dm.y * f32(s_hi >> 4u);
    return Unit(lo, hi, k_at(u));
}

// Q3_K's 6-bit scale k: low 4 bits from the nibbles of bytes 0-7, high 2 from bytes 8-11
fn scale_q3_k(base: u32, k: u32) -> f32 {
    let low = (byte_at(base, k % 8u) >> (4u * (k / 8u))) & 15u;
    let high = (byte_at(base, 8u + k % 4u) >> (2u * (k / 4u))) & 3u;
    return f32(i32(low | (high << 4u)) - 32);
}

fn unit_q3_k(blk: u32, u: u32, scales: u32) -> Unit {        // body: hmask[8], qs[16], scales[3]
    let d = lone_scale(blk, scales);
    let b = blk * 27u;
    let r = u / 16u;
    let shift = 4u * (u / 8u % 2u);
    let q = W[b + 8u + r * 8u + u % 8u];
    let hm = W[b + u % 8u];                                  // hmask bit j of byte l: element 32 j + l
    let plane = 4u * r + shift / 2u;
    let q_lo = vec4<i32>(fields(q, shift, 3u)) - 4 * vec4<i32>(fields(hm, plane, 1u) ^ vec4<u32>(1u));
    let q_hi = vec4<i32>(fields(q, shift + 2u, 3u)) - 4 * vec4<i32>(fields(hm, plane + 1u, 1u) ^ vec4<u32>(1u));
    let sb = k_at(u) / 16u;
    return Unit((d * scale_q3_k(b + 24u, sb)) * vec4<f32>(q_lo), (d * scale_q3_k(b + 24u, sb + 2u)) * vec4<f32>(q_hi),
                k_at(u));
}

// Q4_K/Q5_K's 6-bit scale and min of sub-block j (engine.quants._k_scales_mins)
fn scale_min_k(base: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(byte_at(base, j) & 63u), f32(byte_at(base, j + 4u) & 63u));
    }
    let extra = byte_at(base, j + 4u);
    return vec2<f32>(f32((extra & 15u) | ((byte_at(base, j - 4u) >> 6u) << 4u)),
                     f32((extra >> 4u) | ((byte_at(base, j) >> 6u) << 4u)));
}

// Q4_K/Q5_K: qs word u holds elements 64 (u / 8) + 4 (u % 8).. (low nibbles) and 32 further on
fn unit_q4_k(blk: u32, u: u32, scales: u32) -> Unit {        // body: d dmin, scales[3], qs[32]
    let b = blk * 36u;
    let dm = unpack2x16float(W[b]);
    let q = W[b + 4u + u];
    let s_lo = scale_min_k(b + 1u, 2u * (u / 8u));
    let s_hi = scale_min_k(b + 1u, 2u * (u / 8u) + 1u);
    let lo = (dm.x * s_lo.x) * vec4<f32>(fields(q, 0u, 15u)) - dm.y * s_lo.y;
    let hi = (dm.x * s_hi.x) * vec4<f32>(fields(q, 4u, 15u)) - dm.y * s_hi.y;
    return Unit(lo, hi, k_at(u));
}

fn unit_q5_k(blk: u32, u: u32, scales: u32) -> Unit {        // body: d dmin, scales[3], qh[8], qs[32]
    let b = blk * 44u;
    let dm = unpack2x16float(W[b]);
    let q = W[b + 12u + u];
    let qh = W[b + 4u + u % 8u];                             // bit j of byte l: element 32 j + l
    let plane = 2u * (u / 8u);
    let s_lo = scale_min_k(b + 1u, plane);
    let s_hi = scale_min_k(b + 1u, plane + 1u);
    let lo = (dm.x * s_lo.x) * vec4<f32>(fields(q, 0u, 15u) | (fields(qh, plane, 1u) << vec4<u32>(4u))) - dm.y * s_lo.y;
    let hi = (dm.x * s_hi.x) * vec4<f32>(fields(q, 4u, 15u) | (fields(qh, plane + 1u, 1u) << vec4<u32>(4u)))
        - dm.y * s_hi.y;
    return Unit(lo, hi, k_at(u));
}

// Q6_K: element 128 r + j takes its low nibble from ql byte 64 r + j % 64 (bit 4 (j / 64)) and
// its top 2 bits from qh byte 32 r + j % 32 (bit 2 (j / 32)); this unit's j = 64 h + 4 w.. and
// j + 32, so it reads the low or the high nibbles of two ql words (the other unit of the pair
// reads the rest).
fn unit_q6_k(blk: u32, u: u32, scales: u32) -> Unit {        // body: ql[32], qh[16], scales[4]
    let d = lone_scale(blk, scales);
    let b = blk * 52u;
    let r = u / 16u;
    let w = u % 8u;
    let shift = 4u * (u / 8u % 2u);
    let ql_lo = W[b + 16u * r + w];
    let ql_hi = W[b + 16u * r + 8u + w];
    let qh = W[b + 32u + 8u * r + w];
    let q_lo = vec4<i32>(fields(ql_lo, shift, 15u) | (fields(qh, shift, 3u) << vec4<u32>(4u))) - 32;
    let q_hi = vec4<i32>(fields(ql_hi, shift, 15u) | (fields(qh, shift + 2u, 3u) << vec4<u32>(4u))) - 32;
    let sb = k_at(u) / 16u;
    let sc_lo = f32((i32(byte_at(b + 48u, sb)) << 24u) >> 24u);
    let sc_hi = f32((i32(byte_at(b + 48u, sb + 2u)) << 24u) >> 24u);
    return Unit((d * sc_lo) * vec4<f32>(q_lo), (d * sc_hi) * vec4<f32>(q_hi), k_at(u));
}
