// Scaled dot-product attention, Y = softmax(Q K^T * scale + mask) V, f32, without storing the
// (L, S) scores: a workgroup takes 64 query rows of one (batch, head), one row per thread; keys
// come in chunks of BK, each chunk's K and V rows loaded once into workgroup memory and read by
// all 64 threads (the same address at once: a broadcast). Each thread keeps its query, its BK
// scores and its output row in registers and runs an online softmax (running max and sum,
// rescaled once per chunk). Q (N, H, L, E), K and V (N, Hkv, S, E|EV) and the mask (N, H, L, S)
// are strided views (stride 0 for broadcast dims); query head h reads KV head h / rep. Y is
// (N, L, H, EV), contiguous. The per-row values (the query q0.., the output acc0..) are single
// variables in statements kernels.py writes out for the head sizes: compilers keep loop-indexed
// private arrays in memory.
// The composite's semantics: a masked score is -inf (bool mask 0, or a causal key j > i), a
// float mask is added; a row whose scores are all -inf, or hold NaN or +inf, is NaN.
// info: [batch, heads, rep, l, s, mask_kind (0 none, 1 bool, 2 float), causal, scale bits,
//        row blocks (ceil(l / 64)), q_off, q strides[4], k_off, k strides[4], v_off, v strides[4],
//        m_off, m strides[4]]
// Template: E, EV (head sizes), BK (keys per chunk), KS = BK * E, VS = BK * EV, MASK_T (u32
// for bool, f32); the statements DECLARE, LOAD_Q, DOT, RESCALE, ACCUMULATE, STORE.
@group(0) @binding(0) var<storage, read> Q: array<f32>;
@group(0) @binding(1) var<storage, read> K: array<f32>;
@group(0) @binding(2) var<storage, read> V: array<f32>;
@group(0) @binding(3) var<storage, read> M: array<{{MASK_T}}>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;
@group(0) @binding(5) var<storage, read> info: array<u32>;
const E: u32 = {{E}}u;
const EV: u32 = {{EV}}u;
const BK: u32 = {{BK}}u;
var<workgroup> Ks: array<f32, {{KS}}>;
var<workgroup> Vs: array<f32, {{VS}}>;

fn is_minus_inf(x: f32) -> bool {
    return bitcast<u32>(x) == 0xff800000u;
}

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wg.x + wg.y * groups.x;
    let heads = info[1];
    let l = info[3];
    let s = info[4];
    let kind = info[5];
    let bh = group / info[8];                          // (batch, head)
    let live = bh < info[0] * heads;                   // the same in every thread of the group
    let h = bh % heads;
    let b = bh / heads;
    let i = (group % info[8]) * 64u + lid;             // this thread's query row
    let valid = live && i < l;
    let scale = bitcast<f32>(info[7]);
    let k_at = info[14] + b * info[15] + (h / info[2]) * info[16];
    let v_at = info[19] + b * info[20] + (h / info[2]) * info[21];
    let m_at = info[24] + b * info[25] + h * info[26] + i * info[27];
{{DECLARE}}
    if (valid) {
        let q_at = info[9] + b * info[10] + h * info[11] + i * info[12];
        let q_step = info[13];
{{LOAD_Q}}
    }
    var scores: array<f32, BK>;
    var running_max = inf(-1.0);
    var total = 0.0;
    for (var c0 = 0u; c0 < s; c0 += BK) {
        let count = select(0u, min(BK, s - c0), live);
        workgroupBarrier();                            // every thread is done with the last chunk
        for (var t = lid; t < count * E; t += 64u) {
            Ks[t] = K[k_at + (c0 + t / E) * info[17] + (t % E) * info[18]];
        }
        for (var t = lid; t < count * EV; t += 64u) {
            Vs[t] = V[v_at + (c0 + t / EV) * info[22] + (t % EV) * info[23]];
        }
        workgroupBarrier();
        if (valid) {
            var chunk_max = inf(-1.0);
            for (var j = 0u; j < count; j++) {
                let kj = j * E;
                var d0 = 0.0;
                var d1 = 0.0;
                var d2 = 0.0;
                var d3 = 0.0;
{{DOT}}
                var score = ((d0 + d1) + (d2 + d3)) * scale;
                if (kind != 0u) {
                    let m = f32(M[min(m_at + (c0 + j) * info[28], arrayLength(&M) - 1u)]);
                    score = select(score + m, select(score, inf(-1.0), m == 0.0), kind == 1u);
                }
                if (info[6] == 1u && c0 + j > i) { score = inf(-1.0); }
                scores[j] = score;
                chunk_max = max_(chunk_max, score);
            }
            let new_max = max_(running_max, chunk_max);
            // nothing unmasked yet: no probability mass so far (exp(-inf - -inf) would be NaN here;
            // the composite's NaN comes only when the whole row stays -inf, decided at the end)
            let empty = is_minus_inf(new_max);
            let rescale = select(exp_(running_max - new_max), 0.0, empty);
            total = total * rescale;
{{RESCALE}}
            for (var j = 0u; j < count; j++) {
                let p = select(exp_(scores[j] - new_max), 0.0, empty);
                total += p;
                let vj = j * EV;
{{ACCUMULATE}}
            }
            running_max = new_max;
        }
    }
    if (valid) {
        let out = ((b * l + i) * heads + h) * EV;
        let no_key = is_minus_inf(running_max);
{{STORE}}
    }
}
