// Z[view] = X[view]: copies a strided view of X into a strided view of Z (concatenation,
// padding). info: [numel, ndim, x_off, z_off, shape[ndim], x_strides[ndim], z_strides[ndim]]
// Offsets: strided.wgsl.
@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Z: array<{{T}}>;
@group(0) @binding(2) var<storage, read> info: array<u32>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= info[0]) { return; }
    let at = strided(i, 4u, info[1], 2u, vec3<u32>(info[2], info[3], 0u), 0xffffffffu).offsets;
    Z[at.y] = X[at.x];
}
