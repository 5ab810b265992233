// linear_q for a few rows of x (decode): Y (M, N) = X (M, K) @ dequantized W (N, K)^T + bias,
// M of 1 to 4. Memory-bound: each weight is read once. A workgroup of 64 threads takes 64 / TPR
// pairs of weight rows; the TPR threads of a pair walk its units (quant_blocks.wgsl) in turn, so
// that neighbouring threads read neighbouring words, dequantize the unit of both rows and
// multiply them by the same x values (loaded once for the two), keeping 2 M partial sums, added
// up at the end through workgroup memory (no subgroup operations). X rows are read as vec4s
// (x_off and x_row in vec4s) and stay in cache: every workgroup reads all of them.
// Template: TPR (threads per row pair), M, and the statements DECLARE, ACCUMULATE, PARTS, SUM,
// STORE written out for the 2 M sums (private arrays indexed in loops may live in memory).
struct Params {
    n: u32, row_blocks: u32, x_off: u32, x_row: u32,
    has_bias: u32, bias_off: u32, scales: u32, unused0: u32,
}
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> p: Params;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
const TPR: u32 = {{TPR}}u;
const M: u32 = {{M}}u;
var<workgroup> part: array<f32, 128u * M>;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let lane = lid % TPR;
    let n = ((wg.x + wg.y * groups.x) * (64u / TPR) + lid / TPR) * 2u;     // rows n and n + 1
    let first0 = min(n, p.n - 1u) * p.row_blocks;
    let first1 = min(n + 1u, p.n - 1u) * p.row_blocks;
    let units = p.row_blocks * UNITS;
{{DECLARE}}
    for (var t = lane; t < units; t += TPR) {
        let blk = t / UNITS;
        let v0 = unit(first0 + blk, t % UNITS, p.scales);
        let v1 = unit(first1 + blk, t % UNITS, p.scales);
        let i0 = p.x_off + (blk * BLOCK + v0.at) / 4u;
        let i1 = i0 + HI / 4u;
{{ACCUMULATE}}
    }
{{PARTS}}
    workgroupBarrier();
    for (var s = TPR / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
{{SUM}}
        }
        workgroupBarrier();
    }
    if (lane == 0u && n < p.n) {
        let b0 = select(0.0, bias[p.bias_off + n], p.has_bias == 1u);
{{STORE}}
    }
    if (lane == 0u && n + 1u < p.n) {
        let b1 = select(0.0, bias[p.bias_off + n + 1u], p.has_bias == 1u);
{{STORE1}}
    }
}
