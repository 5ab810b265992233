// tiles.wgsl as GEMM: C[b] = act(A[b] @ B[b] + bias), batched (workgroup z), any element
// strides on A and B. Template: T (f32 or i32), EPILOGUE an expression in v (f32:
// activate(v, act)); BIAS 0 none, 1 per column, 2 per row; TA/VA (TB/VB) T and 1, or vec4<T>
// and 4 when A (B) is read four aligned elements at a time along its contiguous dimension; HB,
// B's storage type: TB, or f16 / vec4<f16> for a float16 weight kept half-width on the device
// (shader-f16), widened to TB as it is loaded into the shared tile, so the product accumulates in
// f32 exactly as over the widened weight.
struct Params {
    m: u32, n: u32, k: u32, unused0: u32,
    a_off: u32, a_batch: u32, a_row: u32, a_col: u32,
    b_off: u32, b_batch: u32, b_row: u32, b_col: u32,
    c_off: u32, c_batch: u32, unused1: u32, bias_off: u32,
}
@group(0) @binding(0) var<storage, read> A: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> B: array<{{HB}}>;
@group(0) @binding(2) var<storage, read_write> C: array<{{T}}>;
@group(0) @binding(3) var<storage, read> p: Params;
@group(0) @binding(4) var<storage, read> bias: array<{{T}}>;

fn rows_() -> u32 { return p.m; }
fn cols_() -> u32 { return p.n; }
fn depth_() -> u32 { return p.k; }

fn load_a(g: u32, m: u32, k: u32) -> {{TA}} {
    if (m < p.m && k < p.k) { return A[(p.a_off + g * p.a_batch + m * p.a_row + k * p.a_col) / {{VA}}u]; }
    return {{TA}}();
}

fn load_b(g: u32, k: u32, n: u32) -> {{TB}} {
    if (k < p.k && n < p.n) { return {{TB}}(B[(p.b_off + g * p.b_batch + k * p.b_row + n * p.b_col) / {{VB}}u]); }
    return {{TB}}();
}

fn store(g: u32, r: u32, c: u32, acc: {{T}}) {
    var v = acc;
    if ({{BIAS}}u == 1u) { v += bias[p.bias_off + c]; }
    if ({{BIAS}}u == 2u) { v += bias[p.bias_off + r]; }
    C[p.c_off + g * p.c_batch + r * p.n + c] = {{EPILOGUE}};
}
