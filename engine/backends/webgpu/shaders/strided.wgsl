// Where a flat index lies in strided views, for the shaders whose parameters are the u32 array
// `info` (elementwise, scatter, gather, index_copy, reduce, topk). Flat index i is row-major
// over the shape info[at..at + nd]; view v (< views, at most 3) has its strides right after
// the shape, nd words each (info[at + (v + 1) nd + d]), and its offset base[v]. The dims are
// taken off last first, one division each for all the views. `picked` is the coordinate in
// dim `pick` (0xffffffffu: none), for the shaders that replace one dim's coordinate by an
// index (u32 arithmetic wraps, so adding (new - picked) * stride to an offset is exact).
// The offsets add up in scalars, not a vector, so one a caller leaves unread is compiled away
// (llvmpipe kept a vec4's lanes: elementwise with one input took 1.9x as long).
struct Strided {
    offsets: vec3<u32>,
    picked: u32,
}

fn strided(i: u32, at: u32, nd: u32, views: u32, base: vec3<u32>, pick: u32) -> Strided {
    var rest = i;
    var x = base.x;
    var y = base.y;
    var z = base.z;
    var picked = 0u;
    for (var d = nd; d > 0u; d--) {
        let n = info[at + d - 1u];
        let c = rest % n;
        rest = rest / n;
        let s = at + nd + d - 1u;
        x += c * info[s];
        if (views > 1u) { y += c * info[s + nd]; }
        if (views > 2u) { z += c * info[s + 2u * nd]; }
        picked = select(picked, c, d - 1u == pick);
    }
    return Strided(vec3<u32>(x, y, z), picked);
}
