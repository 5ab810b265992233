// Prepended to every shader. WGSL lets implementations assume no NaNs in comparisons (x != x
// may fold to false), so NaN is tested on the bits.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

