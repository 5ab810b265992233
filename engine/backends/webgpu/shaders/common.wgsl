// Prepended to every shader. WGSL lets implementations assume no NaNs or infinities in
// arithmetic and comparisons (x != x may fold to false), so NaN is tested on the bits and
// the special values are made from bits.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// An f32 from its bits. A function argument is a runtime value: a constant expression that
// made NaN or an infinity would be a shader-creation error (Tint, in Chromium, checks).
fn f32_bits(bits: u32) -> f32 {
    return bitcast<f32>(bits);
}

fn nan() -> f32 {
    return f32_bits(0x7fc00000u);
}

fn inf(sign: f32) -> f32 {
    return f32_bits(select(0x7f800000u, 0xff800000u, sign < 0.0));
}

// erf to ~1e-7: a P(a^2) below 1, 1 - exp(-a^2) Q(1/a) above (the coefficients of the C
// kernels, wasm_kernels/fit_erf.py); 1 past a = 10
fn erf_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let a = abs(x);
    if (a < 1.0) {
        let a2 = a * a;
        var p = 7.933422359e-05;
        p = fma(p, a2, -8.034827961e-04);
        p = fma(p, a2, 5.191216604e-03);
        p = fma(p, a2, -2.685539872e-02);
        p = fma(p, a2, 1.128362571e-01);
        p = fma(p, a2, -3.761262988e-01);
        p = fma(p, a2, 1.128379167e+00);
        return x * p;
    }
    if (a >= 10.0) { return sign(x); }
    let u = 1.0 / a;
    var q = -5.013316122e-02;
    q = fma(q, u, 3.383482159e-01);
    q = fma(q, u, -1.011116338e+00);
    q = fma(q, u, 1.739665197e+00);
    q = fma(q, u, -1.841886176e+00);
    q = fma(q, u, 1.112992651e+00);
    q = fma(q, u, -1.660181265e-01);
    q = fma(q, u, -2.560262520e-01);
    q = fma(q, u, -2.572613168e-03);
    q = fma(q, u, 5.643336488e-01);
    q = fma(q, u, -3.471123688e-06);
    return sign(x) * (1.0 - exp(-a * a) * q);
}

// sin and cos to a few ulp for |x| up to ~1e4: WGSL promises 2^-11 absolute error, and only on
// [-pi, pi]. x = k pi/2 + r, with pi/2 in three parts (the first two exact in 12 bits, so
// k * part is exact for |k| < 4096), then the minimax polynomials of Cephes' sinf/cosf on
// |r| <= pi/4, chosen by the quadrant k mod 4.
fn sincos_(x: f32, cosine: bool) -> f32 {
    if (is_nan(x) || abs(x) == inf(1.0)) { return nan(); }
    let k = round(x * 0.636619772367581343);
    var r = x - k * 1.5703125;
    r = r - k * 4.837512969970703125e-04;
    r = r - k * 7.549790126404332e-08;
    let z = r * r;
    let s = fma(fma(fma(-1.9515295891e-04, z, 8.3321608736e-03), z, -1.6666654611e-01), z * r, r);
    let c = fma(fma(fma(2.443315711809948e-05, z, -1.388731625493765e-03), z, 4.166664568298827e-02), z * z,
                fma(-0.5, z, 1.0));
    let q = (i32(k) + select(0, 1, cosine)) & 3;      // cos x = sin(x + pi/2)
    let v = select(s, c, (q & 1) == 1);
    return select(v, -v, q >= 2);
}

// tanh without the overflow of exp(2x): past 9.1 the f32 answer is exactly +-1 (GPUs'
// tanh(9.1) may come out a hair below, and then x * (1 + tanh(-x)) is not NaN at -inf)
fn tanh_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    if (abs(x) > 9.1) { return sign(x); }
    return tanh(x);
}

fn log_(x: f32) -> f32 {
    if (is_nan(x) || x < 0.0) { return nan(); }
    if (x == 0.0) { return inf(-1.0); }
    if (x == inf(1.0)) { return x; }
    return log(x);
}

fn sqrt_(x: f32) -> f32 {
    if (is_nan(x) || x < 0.0) { return nan(); }
    return sqrt(x);
}

fn exp_(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    if (x > 88.72283) { return inf(1.0); }
    return exp(max(x, -104.0));
}

// NumPy's power for floats: negative bases with integral exponents keep their sign
fn pow_(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    if (is_nan(a) || is_nan(b)) { return nan(); }
    if (a == 0.0) { return select(0.0, inf(1.0), b < 0.0); }
    let m = exp2(b * log2(abs(a)));
    if (a > 0.0) { return m; }
    if (floor(b) != b) { return nan(); }
    return select(m, -m, (abs(b) % 2.0) == 1.0);
}

// IEEE division, whatever the implementation does with a zero divisor
fn div_(a: f32, b: f32) -> f32 {
    if (b == 0.0) {
        if (a == 0.0 || is_nan(a)) { return nan(); }
        return select(inf(1.0), inf(-1.0), ((bitcast<u32>(a) ^ bitcast<u32>(b)) >> 31u) == 1u);
    }
    return a / b;
}

// integer power by squaring (wrapping like NumPy's fixed-width integers; negative exponents: 0)
fn ipow(a: i32, b: i32) -> i32 {
    if (b < 0) { return select(0, select(1, -1, (b & 1) == 1), a == -1) + select(0, 1, a == 1); }
    var r = 1;
    var base = a;
    var e = b;
    while (e > 0) {
        if ((e & 1) == 1) { r *= base; }
        base *= base;
        e = e >> 1u;
    }
    return r;
}

fn max_(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) { return nan(); }
    return max(a, b);
}

fn min_(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) { return nan(); }
    return min(a, b);
}

// float32 -> the nearest float16 value (ties to even), as float32; overflow to infinity
fn round_f16(x: f32) -> f32 {
    if (is_nan(x)) { return x; }
    let ax = abs(x);
    if (ax >= 65520.0) { return inf(x); }
    if (ax < 6.103515625e-05) {                       // float16 subnormals: steps of 2^-24
        return sign(x) * round(ax * 16777216.0) / 16777216.0;
    }
    let b = bitcast<u32>(x);
    return bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
}

// float32 -> the nearest bfloat16 value (ties to even), as float32; NaN stays NaN
fn round_bf16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if (is_nan(x)) { return bitcast<f32>((b | 0x400000u) & 0xffff0000u); }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}

// the activation epilogue of the fused kernels (names as in nn.functional.CONV_ACTIVATIONS)
fn activate(v: f32, act: u32) -> f32 {
    switch act {
        case 1u: { return select(max(v, 0.0), v, is_nan(v)); }
        case 2u: { return select(clamp(v, 0.0, 6.0), v, is_nan(v)); }
        case 3u: { return v * 0.5 * (1.0 + erf_(v * 0.70710678118654752)); }
        case 4u: { return 0.5 * v * (1.0 + tanh_(0.79788456080286536 * (v + 0.044715 * v * v * v))); }
        case 5u: { return v / (1.0 + exp_(-v)); }
        case 6u: { return v * clamp(v + 3.0, 0.0, 6.0) / 6.0; }
        default: { return v; }
    }
}

