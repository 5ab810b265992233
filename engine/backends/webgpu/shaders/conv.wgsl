// conv2d as an implicit GEMM, f32, NCHW, with zero padding, bias and activation: per group g,
// Y[img, g*og + o, oy, ox] = act(bias + sum over (c, i, j) of W[g*og + o, c, i, j] *
//                                 X[img, g*cg + c, oy*sh + i*dh - pt, ox*sw + j*dw - pl]).
// As GEMM: rows o (og of them), columns (img, oy, ox), depth (c, i, j); the B tile is gathered
// from X on the fly (no im2col buffer). 64x64 tiles per workgroup of 16x16 threads, 4x4 each;
// workgroup z is the group. X and W contiguous.
struct Params {
    n: u32, c: u32, h: u32, w: u32,
    o: u32, kh: u32, kw: u32, groups: u32,
    sh: u32, sw: u32, dh: u32, dw: u32,
    pt: u32, pl: u32, ho: u32, wo: u32,
    x_off: u32, w_off: u32, b_off: u32, has_bias: u32,
    act: u32, unused0: u32, unused1: u32, unused2: u32,
}
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> p: Params;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

var<workgroup> As: array<array<f32, 64>, 16>;     // [k][row]
var<workgroup> Bs: array<array<f32, 64>, 16>;     // [k][col]

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let cg = p.c / p.groups;
    let og = p.o / p.groups;
    let depth = cg * p.kh * p.kw;
    let plane = p.ho * p.wo;
    let cols = p.n * plane;
    let g = wg.z;
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;
    var acc: array<array<f32, 4>, 4>;
    for (var k0 = 0u; k0 < depth; k0 += 16u) {
        for (var q = 0u; q < 4u; q++) {
            let idx = li + q * 256u;
            let ar = idx / 16u;
            let ak = idx % 16u;
            var a = 0.0;
            if (row0 + ar < og && k0 + ak < depth) {
                a = W[p.w_off + (g * og + row0 + ar) * depth + k0 + ak];
            }
            As[ak][ar] = a;
            let bk = idx / 64u;
            let bc = idx % 64u;
            var b = 0.0;
            let col = col0 + bc;
            let kk = k0 + bk;
            if (col < cols && kk < depth) {
                let img = col / plane;
                let pix = col % plane;
                let oy = pix / p.wo;
                let ox = pix % p.wo;
                let ch = kk / (p.kh * p.kw);
                let tap = kk % (p.kh * p.kw);
                let iy = i32(oy * p.sh + (tap / p.kw) * p.dh) - i32(p.pt);
                let ix = i32(ox * p.sw + (tap % p.kw) * p.dw) - i32(p.pl);
                if (iy >= 0 && iy < i32(p.h) && ix >= 0 && ix < i32(p.w)) {
                    b = X[p.x_off + ((img * p.c + g * cg + ch) * p.h + u32(iy)) * p.w + u32(ix)];
                }
            }
            Bs[bk][bc] = b;
        }
        workgroupBarrier();
        for (var k = 0u; k < 16u; k++) {
            let a = vec4<f32>(As[k][lid.y * 4u], As[k][lid.y * 4u + 1u], As[k][lid.y * 4u + 2u],
                              As[k][lid.y * 4u + 3u]);
            let b = vec4<f32>(Bs[k][lid.x * 4u], Bs[k][lid.x * 4u + 1u], Bs[k][lid.x * 4u + 2u],
                              Bs[k][lid.x * 4u + 3u]);
            for (var i = 0u; i < 4u; i++) {
                acc[i][0] = fma(a[i], b[0], acc[i][0]);
                acc[i][1] = fma(a[i], b[1], acc[i][1]);
                acc[i][2] = fma(a[i], b[2], acc[i][2]);
                acc[i][3] = fma(a[i], b[3], acc[i][3]);
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let r = row0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let col = col0 + lid.x * 4u + j;
            if (r < og && col < cols) {
                let oc = g * og + r;
                var v = acc[i][j];
                if (p.has_bias == 1u) { v += bias[p.b_off + oc]; }
                let img = col / plane;
                Y[(img * p.o + oc) * plane + col % plane] = activate(v, p.act);
            }
        }
    }
}
