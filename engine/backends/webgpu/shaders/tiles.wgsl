// The tiled product shared by GEMM and convolution: Out[g] = A[g] (rows x depth) @ B[g]
// (depth x cols), where gemm_io.wgsl or conv_io.wgsl (prepended) says how A and B are read
// (load_a, load_b), how big they are (rows_, cols_, depth_) and where results go (store).
// A workgroup of 16x16 threads owns a (16 RM) x (16 RN) tile of Out; each thread holds RM x RN
// results in registers, rows ty + 16 i and columns tx + 16 j, so that shared-memory reads and
// global writes are consecutive across a warp. Depth walks in steps of TK through shared
// tiles (one padding column each, so the transposing writes do not collide in a bank).
// kernels.py writes the per-thread statements out in full (DECLARE, LOAD_A, LOAD_B, PRODUCT,
// STORE): with loops over private arrays, GPU compilers may keep the results in memory
// rather than registers (measured: 4x slower on an NVIDIA H100 through Vulkan).
const RM = {{RM}}u;
const RN = {{RN}}u;
const TK = {{TK}}u;
const TM = 16u * RM;
const TN = 16u * RN;
var<workgroup> As: array<array<{{T}}, TM + 1u>, TK>;     // [k][row]
var<workgroup> Bs: array<array<{{T}}, TN + 1u>, TK>;     // [k][col]

fn put(g: u32, r: u32, c: u32, v: {{T}}) {
    if (r < rows_() && c < cols_()) { store(g, r, c, v); }
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let g = wg.z;
    let row0 = wg.y * TM;
    let col0 = wg.x * TN;
    let depth = depth_();
{{DECLARE}}
    for (var k0 = 0u; k0 < depth; k0 += TK) {
{{LOAD_A}}
{{LOAD_B}}
        workgroupBarrier();
        for (var k = 0u; k < TK; k++) {
{{PRODUCT}}
        }
        workgroupBarrier();
    }
{{STORE}}
}
