// Z = X gathered along one axis by an index vector (negative indices count from the end;
// checked on the host). Z is contiguous.
// info: [numel, ndim, x_off, axis, n_axis, idx_off, idx_stride, out_shape[ndim], x_strides[ndim]]
@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> IDX: array<i32>;
@group(0) @binding(2) var<storage, read_write> Z: array<{{T}}>;
@group(0) @binding(3) var<storage, read> info: array<u32>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= info[0]) { return; }
    let nd = info[1];
    var rest = i;
    var xi = info[2];
    for (var d = nd; d > 0u; d--) {
        let n = info[6u + d];
        var c = rest % n;
        rest = rest / n;
        if (d - 1u == info[3]) {
            let t = IDX[info[5] + c * info[6]];
            c = u32(select(t, t + i32(info[4]), t < 0));
        }
        xi += c * info[6u + nd + d];
    }
    Z[i] = X[xi];
}
