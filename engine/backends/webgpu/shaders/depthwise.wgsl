// Depthwise conv2d (one filter per channel), f32, NCHW, zero padding, bias and activation;
// one thread per output. X and W contiguous. Params: conv_params.wgsl.
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> p: Params;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    let plane = p.ho * p.wo;
    if (i >= p.n * p.c * plane) { return; }
    let ch = (i / plane) % p.c;
    let oy = (i % plane) / p.wo;
    let ox = i % p.wo;
    let xp = p.x_off + (i / plane) * p.h * p.w;
    var v = 0.0;
    if (p.has_bias == 1u) { v = bias[p.b_off + ch]; }
    for (var r = 0u; r < p.kh; r++) {
        let iy = i32(oy * p.sh + r * p.dh) - i32(p.pt);
        if (iy < 0 || iy >= i32(p.h)) { continue; }
        for (var s = 0u; s < p.kw; s++) {
            let ix = i32(ox * p.sw + s * p.dw) - i32(p.pl);
            if (ix >= 0 && ix < i32(p.w)) {
                v = fma(W[p.w_off + (ch * p.kh + r) * p.kw + s], X[xp + u32(iy) * p.w + u32(ix)], v);
            }
        }
    }
    Y[i] = activate(v, p.act);
}
