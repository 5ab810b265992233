// In place: Z's rows along one axis at an index vector = X's rows (engine.ops INDEX_COPY).
// One invocation per element of X; an index outside [0, n_axis) writes nothing (the host
// checks indices it can see; this keeps every write inside Z when it cannot).
// info: [numel, ndim, x_off, z_off, axis, n_axis, idx_off, idx_stride,
//        x_shape[ndim], x_strides[ndim], z_strides[ndim]]
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
    let axis = info[4];
    let pos = strided(i, 8u, nd, 2u, vec3<u32>(info[2], info[3], 0u), axis);
    let c = pos.picked;                                // X's coordinate along the axis
    let t = IDX[info[6] + c * info[7]];                // Z's
    if (t < 0 || u32(t) >= info[5]) { return; }
    Z[pos.offsets.y + (u32(t) - c) * info[8u + 2u * nd + axis]] = X[pos.offsets.x];
}
