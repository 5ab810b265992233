// The tiled product shared by GEMM and convolution: Out[g] = A[g] (rows x depth) @ B[g]
// (depth x cols), where gemm_io.wgsl or conv_io.wgsl (prepended) says how A and B are read
// (load_a, load_b), how big they are (rows, cols, depth) and where results go (store).
// A workgroup of 16x16 threads owns a (16 RM) x (16 RN) tile of Out; each thread holds RM x RN
// results in registers, rows ty + 16 i and columns tx + 16 j, so that shared-memory reads and
// global writes are consecutive across a warp. Depth walks in steps of TK through shared
// tiles (one padding column each, so the transposing writes do not collide in a bank).
// Template: RM, RN, TK; A_M/A_K and B_K/B_N map a thread's load index `idx` to its place in
// a tile (the fastest-moving coordinate is the one contiguous in memory, so loads coalesce).
const RM = {{RM}}u;
const RN = {{RN}}u;
const TK = {{TK}}u;
const TM = 16u * RM;
const TN = 16u * RN;
var<workgroup> As: array<array<{{T}}, TM + 1u>, TK>;     // [k][row]
var<workgroup> Bs: array<array<{{T}}, TN + 1u>, TK>;     // [k][col]

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let g = wg.z;
    let row0 = wg.y * TM;
    let col0 = wg.x * TN;
    let depth = depth_();
    var acc: array<array<{{T}}, RN>, RM>;
    for (var k0 = 0u; k0 < depth; k0 += TK) {
        for (var idx = li; idx < TM * TK; idx += 256u) {
            let am = {{A_M}};
            let ak = {{A_K}};
            As[ak][am] = load_a(g, row0 + am, k0 + ak);
        }
        for (var idx = li; idx < TK * TN; idx += 256u) {
            let bk = {{B_K}};
            let bn = {{B_N}};
            Bs[bk][bn] = load_b(g, k0 + bk, col0 + bn);
        }
        workgroupBarrier();
        for (var k = 0u; k < TK; k++) {
            var a: array<{{T}}, RM>;
            var b: array<{{T}}, RN>;
            for (var i = 0u; i < RM; i++) { a[i] = As[k][lid.y + 16u * i]; }
            for (var j = 0u; j < RN; j++) { b[j] = Bs[k][lid.x + 16u * j]; }
            for (var i = 0u; i < RM; i++) {
                for (var j = 0u; j < RN; j++) {
                    acc[i][j] += a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < RM; i++) {
        let r = row0 + lid.y + 16u * i;
        for (var j = 0u; j < RN; j++) {
            let c = col0 + lid.x + 16u * j;
            if (r < rows_() && c < cols_()) { store(g, r, c, acc[i][j]); }
        }
    }
}
