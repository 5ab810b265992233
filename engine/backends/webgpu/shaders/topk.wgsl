// The k first elements of each row in order (largest or smallest first, ties by index, NaN
// last as NumPy's argsort puts it), one thread per row, k passes over the row (no scratch).
// info: [rows, n, k, largest, nd, x_off, x_axis_stride, out_axis_stride,
//        row_shape[nd], x_row_strides[nd], out_row_strides[nd]]
// Offsets: strided.wgsl.
@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> V: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> I: array<i32>;
@group(0) @binding(3) var<storage, read> info: array<u32>;

fn nan_(x: {{T}}) -> bool { return {{NAN}}; }

// (v, i) before (w, j)?
fn before(v: {{T}}, i: u32, w: {{T}}, j: u32) -> bool {
    let vn = nan_(v);
    let wn = nan_(w);
    if (vn || wn) { return !vn || (wn && i < j); }
    if (v == w) { return i < j; }
    if (info[3] == 1u) { return v > w; }
    return v < w;
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let row = gid.x + gid.y * groups.x * 64u;
    if (row >= info[0]) { return; }
    let n = info[1];
    let at = strided(row, 8u, info[4], 2u, vec3<u32>(info[5], 0u, 0u), 0xffffffffu).offsets;
    let xb = at.x;
    let ob = at.y;
    var pv: {{T}};
    var pi = 0xffffffffu;
    for (var j = 0u; j < info[2]; j++) {
        var bv: {{T}};
        var bi = 0xffffffffu;
        for (var t = 0u; t < n; t++) {
            let v = X[xb + t * info[6]];
            let after = pi == 0xffffffffu || before(pv, pi, v, t);
            if (after && (bi == 0xffffffffu || before(v, t, bv, bi))) {
                bv = v;
                bi = t;
            }
        }
        V[ob + j * info[7]] = bv;
        I[ob + j * info[7]] = i32(bi);
        pv = bv;
        pi = bi;
    }
}
