// tiles.wgsl as conv2d (an implicit GEMM), f32, NCHW, zero padding, bias and activation. Per
// group g (workgroup z): rows are its og output channels, columns the (img, oy, ox) outputs,
// depth the (c, i, j) taps; B is gathered from X on the fly (no im2col buffer):
// Y[img, g og + o, oy, ox] = act(bias + sum W[g og + o, c, i, j] X[img, g cg + c, oy sh + i dh - pt, ox sw + j dw - pl]).
// X and W contiguous. Template: TA/VA f32 and 1, or vec4<f32> and 4 when the weights are read
// four aligned taps at a time.
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<{{TA}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read> p: Params;
@group(0) @binding(4) var<storage, read> bias: array<f32>;

fn rows_() -> u32 { return p.o / p.groups; }
fn cols_() -> u32 { return p.n * p.ho * p.wo; }
fn depth_() -> u32 { return (p.c / p.groups) * p.kh * p.kw; }

fn load_a(g: u32, r: u32, k: u32) -> {{TA}} {
    if (r < rows_() && k < depth_()) { return W[(p.w_off + (g * rows_() + r) * depth_() + k) / {{VA}}u]; }
    return {{TA}}();
}

fn load_b(g: u32, k: u32, col: u32) -> f32 {
    if (col >= cols_() || k >= depth_()) { return 0.0; }
    let plane = p.ho * p.wo;
    let img = col / plane;
    let pix = col % plane;
    let taps = p.kh * p.kw;
    let ch = k / taps;
    let tap = k % taps;
    let iy = i32((pix / p.wo) * p.sh + (tap / p.kw) * p.dh) - i32(p.pt);
    let ix = i32((pix % p.wo) * p.sw + (tap % p.kw) * p.dw) - i32(p.pl);
    if (iy < 0 || iy >= i32(p.h) || ix < 0 || ix >= i32(p.w)) { return 0.0; }
    return X[p.x_off + ((img * p.c + g * (p.c / p.groups) + ch) * p.h + u32(iy)) * p.w + u32(ix)];
}

fn store(g: u32, r: u32, col: u32, acc: f32) {
    let oc = g * rows_() + r;
    var v = acc;
    if (p.has_bias == 1u) { v += bias[p.b_off + oc]; }
    let plane = p.ho * p.wo;
    Y[((col / plane) * p.o + oc) * plane + col % plane] = activate(v, p.act);
}
