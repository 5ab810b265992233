// Z = X gathered along one axis by an index vector (negative indices count from the end;
// checked on the host). Z is contiguous.
// info: [numel, ndim, x_off, axis, n_axis, idx_off, idx_stride, out_shape[ndim], x_strides[ndim]]
// Offsets: strided.wgsl.
@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> IDX: array<i32>;
@group(0) @binding(2) var<storage, read_write> Z: array<{{T}}>;
@group(0) @binding(3) var<storage, read> info: array<u32>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= info[0]) { return; }
    let nd = info[1];
    let axis = info[3];
    let pos = strided(i, 7u, nd, 1u, vec3<u32>(info[2], 0u, 0u), axis);
    let c = pos.picked;                                // Z's coordinate along the axis, row X's
    let t = IDX[info[5] + c * info[6]];
    let row = u32(select(t, t + i32(info[4]), t < 0));
    Z[i] = X[pos.offsets.x + (row - c) * info[7u + nd + axis]];
}
