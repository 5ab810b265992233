// Z[view] = X[view]: copies a strided view of X into a strided view of Z (concatenation,
// padding). info: [numel, ndim, x_off, z_off, shape[ndim], x_strides[ndim], z_strides[ndim]]
@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Z: array<{{T}}>;
@group(0) @binding(2) var<storage, read> info: array<u32>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= info[0]) { return; }
    let nd = info[1];
    var rest = i;
    var xi = info[2];
    var zi = info[3];
    for (var d = nd; d > 0u; d--) {
        let n = info[3u + d];
        let c = rest % n;
        rest = rest / n;
        xi += c * info[3u + nd + d];
        zi += c * info[3u + 2u * nd + d];
    }
    Z[zi] = X[xi];
}
