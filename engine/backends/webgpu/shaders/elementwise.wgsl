// Z = EXPR(a, b, c) elementwise; a, b, c are X0, X1, X2 read through strided, broadcast
// (stride 0) views of one shape; Z is contiguous. Unused inputs are bound to a placeholder.
// info: [numel, ndim, off0, off1, off2, shape[ndim], strides0[ndim], strides1[ndim], strides2[ndim]]
// Template: T0 T1 T2 TZ element types, EXPR. Offsets: strided.wgsl.
@group(0) @binding(0) var<storage, read> X0: array<{{T0}}>;
@group(0) @binding(1) var<storage, read> X1: array<{{T1}}>;
@group(0) @binding(2) var<storage, read> X2: array<{{T2}}>;
@group(0) @binding(3) var<storage, read_write> Z: array<{{TZ}}>;
@group(0) @binding(4) var<storage, read> info: array<u32>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= info[0]) { return; }
    let at = strided(i, 5u, info[1], 3u, vec3<u32>(info[2], info[3], info[4]), 0xffffffffu).offsets;
    let a = X0[min(at.x, arrayLength(&X0) - 1u)];
    let b = X1[min(at.y, arrayLength(&X1) - 1u)];
    let c = X2[min(at.z, arrayLength(&X2) - 1u)];
    Z[i] = {{EXPR}};
}
