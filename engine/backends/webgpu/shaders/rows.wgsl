// Row-wise softmax, layer norm and RMS norm, f32. X is viewed as (outer, n, inner) contiguous;
// a row is the n elements at one (outer, inner), `inner` apart; one workgroup of 64 threads
// per row. Weight and bias have n elements (norms run over trailing dims, so inner is 1).
// KIND 3 is the layer norm of (X + input_bias) + R (R contiguous like X): each thread writes
// its elements' sums into Y, then normalizes them in place.
// Template: KIND 0 softmax, 1 layer norm, 2 RMS norm, 3 add + layer norm.
struct Params {
    rows: u32, n: u32, inner: u32, x_off: u32,
    has_weight: u32, has_bias: u32, has_residual: u32, has_input_bias: u32,
    w_off: u32, b_off: u32, r_off: u32, ib_off: u32,
    eps: f32, unused0: u32, unused1: u32, unused2: u32,
}
const KIND: u32 = {{KIND}}u;
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> p: Params;
@group(0) @binding(3) var<storage, read> weight: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read> R: array<f32>;
@group(0) @binding(6) var<storage, read> input_bias: array<f32>;
var<workgroup> part: array<f32, 64>;

// the sum (or NaN-propagating max) of every thread's value, in all threads
fn combine(v: f32, lid: u32, take_max: bool) -> f32 {
    part[lid] = v;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            part[lid] = select(part[lid] + part[lid + s], max_(part[lid], part[lid + s]), take_max);
        }
        workgroupBarrier();
    }
    let total = part[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wg.x + wg.y * groups.x;
    let valid = row < p.rows;
    let base = p.x_off + (row / p.inner) * p.n * p.inner + row % p.inner;
    let out = (row / p.inner) * p.n * p.inner + row % p.inner;
    let n = select(0u, p.n, valid);
    if (KIND == 0u) {
        var m = inf(-1.0);
        for (var t = lid; t < n; t += 64u) { m = max_(m, X[base + t * p.inner]); }
        m = combine(m, lid, true);
        var s = 0.0;
        for (var t = lid; t < n; t += 64u) { s += exp_(X[base + t * p.inner] - m); }
        s = combine(s, lid, false);
        for (var t = lid; t < n; t += 64u) { Y[out + t * p.inner] = exp_(X[base + t * p.inner] - m) / s; }
    } else if (KIND == 3u) {
        var s = 0.0;
        for (var t = lid; t < n; t += 64u) {      // inner is 1
            var v = X[base + t];
            if (p.has_input_bias == 1u) { v += input_bias[p.ib_off + t]; }
            v += R[p.r_off + out + t];
            Y[out + t] = v;
            s += v;
        }
        let mean = combine(s, lid, false) / f32(p.n);
        var q = 0.0;
        for (var t = lid; t < n; t += 64u) {
            let d = Y[out + t] - mean;
            q += d * d;
        }
        let scale = 1.0 / sqrt(combine(q, lid, false) / f32(p.n) + p.eps);
        for (var t = lid; t < n; t += 64u) {
            var v = (Y[out + t] - mean) * scale;
            if (p.has_weight == 1u) { v *= weight[p.w_off + t]; }
            if (p.has_bias == 1u) { v += bias[p.b_off + t]; }
            Y[out + t] = v;
        }
    } else {
        var mean = 0.0;
        if (KIND == 1u) {
            var s = 0.0;
            for (var t = lid; t < n; t += 64u) { s += X[base + t * p.inner]; }
            mean = combine(s, lid, false) / f32(p.n);
        }
        var q = 0.0;
        for (var t = lid; t < n; t += 64u) {
            let d = X[base + t * p.inner] - mean;
            q += d * d;
        }
        let scale = 1.0 / sqrt(combine(q, lid, false) / f32(p.n) + p.eps);
        for (var t = lid; t < n; t += 64u) {
            var v = (X[base + t * p.inner] - mean) * scale;
            if (p.has_weight == 1u) { v *= weight[p.w_off + t]; }
            if (p.has_bias == 1u) { v += bias[p.b_off + t]; }
            Y[out + t * p.inner] = v;
        }
    }
}
