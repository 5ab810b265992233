// Z[0:numel] = the value whose 32 bits are info[1]. info: [numel, bits]
@group(0) @binding(0) var<storage, read_write> Z: array<u32>;
@group(0) @binding(1) var<storage, read> info: array<u32>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i < info[0]) { Z[i] = info[1]; }
}
