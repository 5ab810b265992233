// embedding_q: Y[i] = dequantized row IDS[i] of W (quant_blocks.wgsl), one thread per unit of 8
// weights. The ids were checked on the host; a bad one is clamped here so nothing reads past W.
// Y is (count, cols) contiguous, written as vec4s (cols is a multiple of 32).
struct Params {
    total: u32, row_units: u32, row_blocks: u32, ids_off: u32,
    rows: u32, cols4: u32, scales: u32, unused0: u32,
}
@group(0) @binding(0) var<storage, read> W: array<u32>;
@group(0) @binding(1) var<storage, read> IDS: array<i32>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> p: Params;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 64u;
    if (i >= p.total) { return; }
    let which = i / p.row_units;
    let t = i % p.row_units;
    let row = u32(clamp(IDS[p.ids_off + which], 0, i32(p.rows) - 1));
    let blk = t / UNITS;
    let v = unit(row * p.row_blocks + blk, t % UNITS, p.scales);
    let out = which * p.cols4 + (blk * BLOCK + v.at) / 4u;
    Y[out] = v.lo;
    Y[out + HI / 4u] = v.hi;
}
