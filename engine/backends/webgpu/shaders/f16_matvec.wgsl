// linear_f16w for a few rows of x (decode): Y (M, N) = X (M, K) @ W (N, K)^T + bias, W float16
// on the device (shader-f16), M of 1 to 4. Memory-bound: each weight is read once, half-width,
// and widened to f32 in registers; every product and sum is f32. As qmatvec.wgsl: a workgroup
// of 64 threads takes 64 / TPR pairs of weight rows; the TPR threads of a pair walk its K in
// chunks of V elements (V = 4: vec4<f16> loads; V = 1 where rows are not 4-aligned), so that
// neighbouring threads read neighbouring chunks, and multiply both rows by the same x chunk
// (loaded once for the two), keeping 2 M partial sums, added up at the end through workgroup
// memory. Offsets and row strides (w_off, w_row, x_off, x_row) and k are in chunks of V.
// Template: TPR, M, V, TW (f16 or vec4<f16>), TX (f32 or vec4<f32>), and the statements DECLARE,
// ACCUMULATE, PARTS, SUM, STORE, STORE1 written out for the 2 M sums.
struct Params {
    n: u32, k: u32, x_off: u32, x_row: u32,
    w_off: u32, w_row: u32, has_bias: u32, bias_off: u32,
}
@group(0) @binding(0) var<storage, read> W: array<{{TW}}>;
@group(0) @binding(1) var<storage, read> X: array<{{TX}}>;
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
    let first0 = p.w_off + min(n, p.n - 1u) * p.w_row;
    let first1 = p.w_off + min(n + 1u, p.n - 1u) * p.w_row;
{{DECLARE}}
    for (var t = lane; t < p.k; t += TPR) {
        let v0 = {{TX}}(W[first0 + t]);
        let v1 = {{TX}}(W[first1 + t]);
        let i = p.x_off + t;
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
