// linear_q for many rows of x (prefill): Y (M, N) = X (M, K) @ dequantized W (N, K)^T + bias.
// The register tiling of tiles.wgsl (RM, RN, TK from quantized._matmul_tiling: on a GPU the tile
// float32 takes for this output): a workgroup of 16x16 threads owns a TM x TN tile of Y
// (TM = 16 RM rows of x, TN = 16 RN rows of W), each thread RM x RN results, rows ty + 16 i
// and columns tx + 16 j. K is walked TK elements a step, UPS = TK / 8 units (quant_blocks.wgsl)
// of every weight row: the dot products do not depend on the order of k, so a step takes whole
// units, wherever their two runs of 4 lie in the block, and loads the same elements of x (two
// vec4s a unit). Each unit of the tile is dequantized once, by one thread (scales read once for
// its 8 weights), into workgroup memory, where all TM rows of x reuse it; the inner loop is then
// tiles.wgsl's. Weight rows past N are clamped (their results are never stored), x rows past M too.
// Template: RM, RN, TK (a multiple of 8), UNIT_AT (the first element of unit u in its block, an
// expression in u); DECLARE, PRODUCT, STORE written out for RM x RN (as in tiles.wgsl).
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
const RN: u32 = {{RN}}u;
const TK: u32 = {{TK}}u;
const TM: u32 = 16u * RM;
const TN: u32 = 16u * RN;
const UPS: u32 = TK / 8u;                                  // units of each weight row a step
var<workgroup> Xs: array<array<f32, TM + 1u>, TK>;         // [k][x row]
var<workgroup> Ws: array<array<f32, TN + 1u>, TK>;         // [k][w row]

fn unit_start(u: u32) -> u32 {
    return {{UNIT_AT}};
}

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
{{DECLARE}}
    let steps = p.row_blocks * UNITS / UPS;
    for (var s = 0u; s < steps; s++) {
        // x: run j of the step (unit s UPS + j / 2, its first or second run) is k = 4 j..4 j + 3
        for (var q = li; q < TM * 2u * UPS; q += 256u) {
            let r = q / (2u * UPS);
            let j = q % (2u * UPS);
            let g = s * UPS + j / 2u;
            let e = g / UNITS * BLOCK + unit_start(g % UNITS) + j % 2u * HI;
            let v = X[p.x_off + min(row0 + r, p.m - 1u) * p.x_row + e / 4u];
            let k = 4u * j;
            Xs[k][r] = v.x; Xs[k + 1u][r] = v.y; Xs[k + 2u][r] = v.z; Xs[k + 3u][r] = v.w;
        }
        // the weights: unit i of the step of row n is k = 8 i..8 i + 7, neighbouring threads on
        // neighbouring units of a row (neighbouring words)
        for (var q = li; q < TN * UPS; q += 256u) {
            let n = q / UPS;
            let i = q % UPS;
            let g = s * UPS + i;
            let u = unit(min(col0 + n, p.n - 1u) * p.row_blocks + g / UNITS, g % UNITS, p.scales);
            let k = 8u * i;
            Ws[k][n] = u.lo.x; Ws[k + 1u][n] = u.lo.y; Ws[k + 2u][n] = u.lo.z; Ws[k + 3u][n] = u.lo.w;
            Ws[k + 4u][n] = u.hi.x; Ws[k + 5u][n] = u.hi.y; Ws[k + 6u][n] = u.hi.z; Ws[k + 7u][n] = u.hi.w;
        }
        workgroupBarrier();
        for (var k = 0u; k < TK; k++) {
{{PRODUCT}}
        }
        workgroupBarrier();
    }
{{STORE}}
}
