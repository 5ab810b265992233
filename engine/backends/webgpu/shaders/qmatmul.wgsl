// linear_q for many rows of x (prefill): Y (M, N) = X (M, K) @ dequantized W (N, K)^T + bias.
// A workgroup of 16x16 threads owns a TM x 32 tile of Y (TM = 16 RM rows of x, 32 rows of W);
// each thread holds RM x 2 results, rows ty + 16 i and columns tx + 16 j (as tiles.wgsl). K is
// walked 32 elements at a time: the x tile is loaded as vec4s, and the weight tile is
// dequantized once into workgroup memory, where all TM rows of x reuse it. 32-element blocks:
// 4 units a row fill a step (threads 0-127). Super-blocks (SPLIT): the 8 units of a row's 64
// elements are dequantized on even steps, which take their first runs; the odd step after
// takes the second runs, kept in registers meanwhile.
// Template: RM, SPLIT; DECLARE, PRODUCT, STORE written out for RM (as in tiles.wgsl).
struct Params {
    m: u32, n: u32, row_blocks: u32, x_off: u32,
    x_row: u32, has_bias: u32, bias_off: u32, scales: u32,
}
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> p: Params;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
const RM: u32 = {{RM}}u;
const TM: u32 = 16u * RM;
const TN: u32 = 32u;
const SPLIT: bool = {{SPLIT}};
const STEP_UNITS: u32 = select(4u, 8u, SPLIT);             // units of one row that one step needs
var<workgroup> Xs: array<array<f32, TM + 1u>, 32u>;        // [k][x row]
var<workgroup> Ws: array<array<f32, TN + 1u>, 32u>;        // [k][w row]

fn put(r: u32, c: u32, v: f32) {
    if (r < p.m && c < p.n) {
        Y[r * p.n + c] = v + select(0.0, bias[p.bias_off + c], p.has_bias == 1u);
    }
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row0 = wg.y * TM;
    let col0 = wg.x * TN;
    // this thread's share of the weight tile: unit `slot` of row `wn` (clamped: results past the
    // last row are never stored)
    let wr = li / STEP_UNITS;
    let slot = li % STEP_UNITS;
    let dequantizes = wr < TN;
    let first = min(col0 + wr, p.n - 1u) * p.row_blocks;
    var held: Unit;
{{DECLARE}}
    let steps = p.row_blocks * BLOCK / 32u;
    for (var s = 0u; s < steps; s++) {
        for (var q = li; q < TM * 8u; q += 256u) {
            let r = q / 8u;
            let k = q % 8u * 4u;
            let v = X[p.x_off + min(row0 + r, p.m - 1u) * p.x_row + s * 8u + q % 8u];
            Xs[k][r] = v.x; Xs[k + 1u][r] = v.y; Xs[k + 2u][r] = v.z; Xs[k + 3u][r] = v.w;
        }
        if (dequantizes) {
            if (SPLIT) {
                var v = held.hi;
                if (s % 2u == 0u) {
                    held = unit(first + s / 8u, s % 8u / 2u * 8u + slot, p.scales);
                    v = held.lo;
                }
                let k = 4u * slot;
                Ws[k][wr] = v.x; Ws[k + 1u][wr] = v.y; Ws[k + 2u][wr] = v.z; Ws[k + 3u][wr] = v.w;
            } else {
                let u = unit(first + s, slot, p.scales);
                let k = u.at;
                Ws[k][wr] = u.lo.x; Ws[k + 1u][wr] = u.lo.y; Ws[k + 2u][wr] = u.lo.z; Ws[k + 3u][wr] = u.lo.w;
                let h = k + HI;
                Ws[h][wr] = u.hi.x; Ws[h + 1u][wr] = u.hi.y; Ws[h + 2u][wr] = u.hi.z; Ws[h + 3u][wr] = u.hi.w;
            }
        }
        workgroupBarrier();
        for (var k = 0u; k < 32u; k++) {
{{PRODUCT}}
        }
        workgroupBarrier();
    }
{{STORE}}
}
