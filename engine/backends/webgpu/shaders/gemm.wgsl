// C[b] = A[b] @ B[b] (+ bias, activation), batched, any element strides on A and B.
// A 64x64 tile of C per workgroup of 16x16 threads, each thread a 4x4 block in registers;
// K walks in steps of 16 through workgroup-shared tiles of A (64x16) and B (16x64).
// Template fields: T (f32 or i32), EPILOGUE an expression in v (f32: activate(v, act));
// BIAS 0 none, 1 per column, 2 per row.
struct Params {
    m: u32, n: u32, k: u32, unused0: u32,
    a_off: u32, a_batch: u32, a_row: u32, a_col: u32,
    b_off: u32, b_batch: u32, b_row: u32, b_col: u32,
    c_off: u32, c_batch: u32, unused1: u32, bias_off: u32,
}
@group(0) @binding(0) var<storage, read> A: array<{{T}}>;
@group(0) @binding(1) var<storage, read> B: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> C: array<{{T}}>;
@group(0) @binding(3) var<storage, read> p: Params;
@group(0) @binding(4) var<storage, read> bias: array<{{T}}>;

const TM = 64u;
const TN = 64u;
const TK = 16u;
var<workgroup> As: array<array<{{T}}, 64>, 16>;     // [k][m]
var<workgroup> Bs: array<array<{{T}}, 64>, 16>;     // [k][n]

fn a_at(base: u32, m: u32, k: u32) -> {{T}} {
    if (m < p.m && k < p.k) { return A[base + m * p.a_row + k * p.a_col]; }
    return {{T}}(0);
}

fn b_at(base: u32, k: u32, n: u32) -> {{T}} {
    if (k < p.k && n < p.n) { return B[base + k * p.b_row + n * p.b_col]; }
    return {{T}}(0);
}

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let row0 = wg.y * TM;
    let col0 = wg.x * TN;
    let a_base = p.a_off + wg.z * p.a_batch;
    let b_base = p.b_off + wg.z * p.b_batch;
    var acc: array<array<{{T}}, 4>, 4>;
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        // 1024 elements of each tile, 4 per thread
        for (var q = 0u; q < 4u; q++) {
            let idx = li + q * 256u;
            let am = idx / TK;
            let ak = idx % TK;
            As[ak][am] = a_at(a_base, row0 + am, k0 + ak);
            let bk = idx / TN;
            let bn = idx % TN;
            Bs[bk][bn] = b_at(b_base, k0 + bk, col0 + bn);
        }
        workgroupBarrier();
        for (var k = 0u; k < TK; k++) {
            let a = vec4<{{T}}>(As[k][lid.y * 4u], As[k][lid.y * 4u + 1u], As[k][lid.y * 4u + 2u],
                              As[k][lid.y * 4u + 3u]);
            let b = vec4<{{T}}>(Bs[k][lid.x * 4u], Bs[k][lid.x * 4u + 1u], Bs[k][lid.x * 4u + 2u],
                              Bs[k][lid.x * 4u + 3u]);
            for (var i = 0u; i < 4u; i++) {
                acc[i][0] += a[i] * b[0];
                acc[i][1] += a[i] * b[1];
                acc[i][2] += a[i] * b[2];
                acc[i][3] += a[i] * b[3];
            }
        }
        workgroupBarrier();
    }
    let c_base = p.c_off + wg.z * p.c_batch;
    for (var i = 0u; i < 4u; i++) {
        let r = row0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let c = col0 + lid.x * 4u + j;
            if (r < p.m && c < p.n) {
                var v = acc[i][j];
                if ({{BIAS}}u == 1u) { v += bias[p.bias_off + c]; }
                if ({{BIAS}}u == 2u) { v += bias[p.bias_off + r]; }
                C[c_base + r * p.n + c] = {{EPILOGUE}};
            }
        }
    }
}
