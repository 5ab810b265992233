// Z[o] = OP over the reduced dims of X's view. PER threads share an output (a workgroup of 64
// does 64 / PER of them): 64 for long reductions (a tree in shared memory), 1 for short ones
// such as pooling windows, where a thread loops over its few elements alone.
// The view lists kept dims first, reduced dims last (a permutation, no copy).
// info: [n_out, n_red, nk, nr, x_off, keep_shape[nk], keep_strides[nk], red_shape[nr], red_strides[nr]]
// Template: TX input, TA accumulator/value, TZ output, OP 0 sum, 1 max, 2 min,
// 3 argmax, 4 argmin; NAN an expression in `x` (TA), true for NaN; PER a power of two <= 64.
// Offsets: strided.wgsl.
const OP: u32 = {{OP}}u;
const PER: u32 = {{PER}}u;
const EMPTY: u32 = 0xffffffffu;
@group(0) @binding(0) var<storage, read> X: array<{{TX}}>;
@group(0) @binding(1) var<storage, read_write> Z: array<{{TZ}}>;
@group(0) @binding(2) var<storage, read> info: array<u32>;
var<workgroup> sv: array<{{TA}}, 64>;
var<workgroup> si: array<u32, 64>;

fn nan_(x: {{TA}}) -> bool { return {{NAN}}; }

// does (w, j) come before (v, i)? max/argmax: larger first; min/argmin: smaller first; a NaN
// before everything (NumPy propagates it; argmax/argmin return the first NaN); ties: lower index
fn wins(v: {{TA}}, i: u32, w: {{TA}}, j: u32) -> bool {
    if (i == EMPTY) { return j != EMPTY; }
    if (j == EMPTY) { return false; }
    let vn = nan_(v);
    let wn = nan_(w);
    if (vn || wn) { return wn && (!vn || j < i); }
    if (w == v) { return j < i; }
    if (OP == 1u || OP == 3u) { return w > v; }
    return w < v;
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let o = (wg.x + wg.y * groups.x) * (64u / PER) + lid / PER;
    let lane = lid % PER;
    let valid = o < info[0];
    let nk = info[2];
    let nr = info[3];
    let base = strided(o, 5u, nk, 1u, vec3<u32>(info[4], 0u, 0u), 0xffffffffu).offsets.x;
    let rs = 5u + 2u * nk;
    var acc: {{TA}};
    var at = EMPTY;
    if (valid) {
        for (var r = lane; r < info[1]; r += PER) {
            let v = {{TA}}(X[strided(r, rs, nr, 1u, vec3<u32>(base, 0u, 0u), 0xffffffffu).offsets.x]);
            if (OP == 0u) {
                acc += v;
                at = 0u;
            } else if (wins(acc, at, v, r)) {
                acc = v;
                at = r;
            }
        }
    }
    sv[lid] = acc;
    si[lid] = at;
    workgroupBarrier();
    for (var s = PER / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            if (OP == 0u) {
                sv[lid] += sv[lid + s];
            } else if (wins(sv[lid], si[lid], sv[lid + s], si[lid + s])) {
                sv[lid] = sv[lid + s];
                si[lid] = si[lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lane == 0u && valid) {
        if (OP >= 3u) { Z[o] = {{TZ}}(si[lid]); } else { Z[o] = {{TZ}}(sv[lid]); }
    }
}
