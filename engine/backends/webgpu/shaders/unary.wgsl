// Z = op(X) elementwise over a strided view of X; Z is contiguous.
// info: [numel, ndim, x_off, 0, shape[ndim], x_strides[ndim]]. Template: {{EXPR}} in `a` (f32).
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Z: array<f32>;
@group(0) @binding(2) var<storage, read> info: array<u32>;

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if (i >= info[0]) { return; }
    let nd = info[1];
    var rest = i;
    var xi = info[2];
    for (var d = nd; d > 0u; d--) {
        let n = info[3u + d];
        let c = rest % n;
        rest = rest / n;
        xi += c * info[3u + nd + d];
    }
    let a = X[xi];
    Z[i] = {{EXPR}};
}
