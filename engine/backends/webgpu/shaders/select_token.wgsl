// The next token from one position's logits: penalties, suppression, Whisper's timestamp rules,
// temperature, top-k, top-p, then argmax or the inverse of the cumulative distribution at a
// uniform draw; the token is written into the decode step's own inputs (ids, positions) and the
// sequence's state. engine/sampler.py says what each buffer holds and is the NumPy reference.
// One workgroup; each thread owns a contiguous run of the vocabulary (index order matters for
// the cumulative sum). Excluded tokens hold EXCL, a finite stand-in for -inf (WGSL may assume
// no infinities).
@group(0) @binding(0) var<storage, read> L: array<f32>;
@group(0) @binding(1) var<storage, read_write> marks: array<i32>;
@group(0) @binding(2) var<storage, read_write> state: array<i32>;
@group(0) @binding(3) var<storage, read> config: array<f32>;
@group(0) @binding(4) var<storage, read_write> ids: array<i32>;
@group(0) @binding(5) var<storage, read_write> positions: array<i32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> S: array<f32>;      // the filtered logits

const N = 256u;
const EXCL = -3.0e38;
const CONFIG = 16u;
const UNIFORMS = 512u;

var<workgroup> rf: array<f32, 256>;
var<workgroup> ru: array<u32, 256>;
var<workgroup> wst: array<i32, 4>;
var<workgroup> wf: f32;
var<workgroup> wu: u32;
var<workgroup> found: atomic<u32>;
var<workgroup> last_kept: atomic<i32>;

var<private> t: u32;
var<private> lo: u32;
var<private> hi: u32;
var<private> begin: u32;
var<private> text_off: bool;

fn excluded(x: f32) -> bool { return x < -1.0e38; }

// float order as unsigned order (no NaN here)
fn okey(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

fn sum_f(v: f32) -> f32 {
    rf[t] = v;
    workgroupBarrier();
    for (var s = N / 2u; s > 0u; s >>= 1u) {
        if (t < s) { rf[t] += rf[t + s]; }
        workgroupBarrier();
    }
    if (t == 0u) { wf = rf[0]; }
    let r = workgroupUniformLoad(&wf);
    return r;
}

fn sum_u(v: u32) -> u32 {
    ru[t] = v;
    workgroupBarrier();
    for (var s = N / 2u; s > 0u; s >>= 1u) {
        if (t < s) { ru[t] += ru[t + s]; }
        workgroupBarrier();
    }
    if (t == 0u) { wu = ru[0]; }
    let r = workgroupUniformLoad(&wu);
    return r;
}

// the largest value and its first index over the workgroup
fn argmax_(v: f32, i: u32) -> vec2<u32> {
    rf[t] = v;
    ru[t] = i;
    workgroupBarrier();
    for (var s = N / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            let w = rf[t + s];
            let j = ru[t + s];
            if (w > rf[t] || (w == rf[t] && j < ru[t])) {
                rf[t] = w;
                ru[t] = j;
            }
        }
        workgroupBarrier();
    }
    if (t == 0u) { wf = rf[0]; wu = ru[0]; }
    let value = workgroupUniformLoad(&wf);
    let index = workgroupUniformLoad(&wu);
    return vec2<u32>(bitcast<u32>(value), index);
}

// a filtered logit (text tokens gone when the timestamps' total beats them)
fn filtered(i: u32) -> f32 {
    if (text_off && i < begin) { return EXCL; }
    return S[i];
}

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(local_invocation_index) local: u32) {
    t = local;
    let V = u32(config[11]);
    let chunk = (V + N - 1u) / N;
    lo = min(t * chunk, V);
    hi = min(lo + chunk, V);
    if (t == 0u) {
        wst[0] = state[0];
        wst[1] = state[1];
        wst[2] = state[2];
        wst[3] = state[3];
        atomicStore(&found, 0xffffffffu);
        atomicStore(&last_kept, -1);
    }
    let n = workgroupUniformLoad(&wst[0]);
    let last = workgroupUniformLoad(&wst[1]);
    let penultimate = workgroupUniformLoad(&wst[2]);
    let last_ts = workgroupUniformLoad(&wst[3]);
    let temperature = config[0];
    let top_k = u32(config[1]);
    let top_p = config[2];
    let repetition = config[3];
    let presence = config[4];
    let frequency = config[5];
    let whisper = config[6] != 0.0;
    begin = u32(config[7]);
    let eot = u32(config[8]);
    let no_ts = u32(config[9]);
    let max_initial = i32(config[10]);
    let last_was = n >= 1 && u32(last) >= begin;
    let penultimate_was = n < 2 || u32(penultimate) >= begin;
    var ts_end = 0u;                                    // timestamps before it are excluded
    if (last_ts >= 0) { ts_end = select(u32(last_ts) + 1u, u32(last_ts), last_was && !penultimate_was); }

    // 1. penalties and suppression into S; the best text and timestamp token
    var best_text = EXCL;
    var best_text_i = 0xffffffffu;
    var best_ts = EXCL;
    var best_ts_i = 0xffffffffu;
    for (var i = lo; i < hi; i++) {
        var x = L[i];
        let m = marks[i];
        if (repetition != 1.0 && (m & 1) != 0) { x = select(x * repetition, x / repetition, x > 0.0); }
        let count = f32(m >> 8u);
        x -= presence * select(0.0, 1.0, count > 0.0) + frequency * count;
        var off = (m & 2) != 0 || (n == 0 && (m & 4) != 0);
        if (whisper) {
            off = off || i == no_ts;
            if (last_was && penultimate_was && i >= begin) { off = true; }
            if (last_was && !penultimate_was && i < eot) { off = true; }
            if (i >= begin && i < ts_end) { off = true; }
            if (n == 0 && (i < begin || (max_initial >= 0 && i > begin + u32(max_initial)))) { off = true; }
        }
        if (off) { x = EXCL; }
        S[i] = x;
        if (i < begin) {
            if (x > best_text || best_text_i == 0xffffffffu) { best_text = x; best_text_i = i; }
        } else if (x > best_ts || best_ts_i == 0xffffffffu) {
            best_ts = x;
            best_ts_i = i;
        }
    }
    storageBarrier();                                   // S is read across threads from here on
    let text = argmax_(best_text, best_text_i);
    let ts = argmax_(best_ts, best_ts_i);
    let max_text = bitcast<f32>(text.x);
    let max_ts = bitcast<f32>(ts.x);

    // 2. Whisper: text is excluded when the timestamps' log-sum-exp beats every text token
    text_off = false;
    if (whisper && !excluded(max_ts)) {
        var part = 0.0;
        for (var i = max(lo, begin); i < hi; i++) {
            let x = S[i];
            if (!excluded(x)) { part += exp(x - max_ts); }
        }
        let total = sum_f(part);
        text_off = max_ts + log(total) > max_text;
    }
    var top = max_ts;
    var token = ts.y;
    if (!text_off && (max_text >= max_ts || ts.y == 0xffffffffu)) {
        top = max_text;
        token = text.y;
    }

    // 3. the normalizer of the filtered logits at temperature 1 (the token's log-probability)
    var part1 = 0.0;
    for (var i = lo; i < hi; i++) {
        let x = filtered(i);
        if (!excluded(x)) { part1 += exp(x - top); }
    }
    let z1 = sum_f(part1);

    // 4. sampling: temperature, top-k, top-p, then the cumulative sum in index order
    if (temperature > 0.0) {
        let top_t = top / temperature;
        var k_key = 0u;                                 // keys below it are cut by top-k
        if (top_k > 0u && top_k < V) {
            for (var bit = 31i; bit >= 0i; bit--) {
                let candidate = k_key | (1u << u32(bit));
                var count = 0u;
                for (var i = lo; i < hi; i++) {
                    let x = filtered(i);
                    var v = EXCL;
                    if (!excluded(x)) { v = x / temperature; }
                    if (okey(v) >= candidate) { count++; }
                }
                if (sum_u(count) >= top_k) { k_key = candidate; }
            }
        }
        var p_key = k_key;                              // and below this, by top-p
        if (top_p < 1.0) {
            var part = 0.0;
            for (var i = lo; i < hi; i++) {
                let x = filtered(i);
                if (!excluded(x) && okey(x / temperature) >= k_key) { part += exp(x / temperature - top_t); }
            }
            let goal = top_p * sum_f(part);
            p_key = 0u;
            for (var bit = 31i; bit >= 0i; bit--) {
                let candidate = p_key | (1u << u32(bit));
                var mass = 0.0;
                for (var i = lo; i < hi; i++) {
                    let x = filtered(i);
                    if (!excluded(x) && okey(x / temperature) >= max(candidate, k_key)) {
                        mass += exp(x / temperature - top_t);
                    }
                }
                if (sum_f(mass) >= goal) { p_key = candidate; }
            }
            p_key = max(p_key, k_key);
        }
        var part = 0.0;
        for (var i = lo; i < hi; i++) {
            let x = filtered(i);
            if (!excluded(x) && okey(x / temperature) >= p_key) { part += exp(x / temperature - top_t); }
        }
        rf[t] = part;
        workgroupBarrier();
        if (t == 0u) {                                  // exclusive prefix sums of the threads' parts
            var acc = 0.0;
            for (var j = 0u; j < N; j++) {
                let v = rf[j];
                rf[j] = acc;
                acc += v;
            }
            wf = acc;
        }
        let total = workgroupUniformLoad(&wf);
        let target_ = config[CONFIG + u32(n) % UNIFORMS] * total;
        var acc = rf[t];
        if (part > 0.0 && target_ >= acc && target_ < acc + part) {
            for (var i = lo; i < hi; i++) {
                let x = filtered(i);
                if (!excluded(x) && okey(x / temperature) >= p_key) {
                    acc += exp(x / temperature - top_t);
                    if (acc > target_) {
                        atomicMin(&found, i);
                        break;
                    }
                }
            }
        }
        for (var i = hi; i > lo; i--) {                 // rounding: the last token kept
            let x = filtered(i - 1u);
            if (!excluded(x) && okey(x / temperature) >= p_key) {
                atomicMax(&last_kept, i32(i - 1u));
                break;
            }
        }
        let chosen = workgroupUniformLoad(&found);
        if (chosen != 0xffffffffu) {
            token = chosen;
        } else {
            token = u32(max(workgroupUniformLoad(&last_kept), 0));
        }
    }

    // 5. the answer and the state the next step starts from
    if (t == 0u) {
        out[0] = f32(token);
        out[1] = filtered(token) - top - log(z1);
        out[2] = 0.0;
        out[3] = 0.0;
        ids[0] = i32(token);
        positions[0] = positions[0] + 1;
        marks[token] = (marks[token] | 1) + 256;
        state[0] = n + 1;
        state[2] = last;
        state[1] = i32(token);
        if (whisper && token >= begin) { state[3] = i32(token); }
    }
}
