/* A recorded list of kernel calls, run in one call: what engine.graph replays.
 *
 * A program is an array of 64-bit words: per call, the export's id (its place in exports.h's
 * order: PROGRAM_* below) followed by its arguments, one word each, as the export declares them:
 * size_t and pointers as unsigned values, ptrdiff_t and int as two's complement (a wasm32 build
 * keeps the low 32 bits), float as its IEEE single bits in the low half. The arity comes from the
 * id, so nothing else is stored.
 *
 * engine_run_program(words, count) runs the calls in order and returns 0; a call that reports
 * something (a scratch export asking for more scratch, an index export an index out of range)
 * stops the program, and it returns that call's word offset + 1, so the caller can act on it and
 * continue from there (words + offset). An unknown id stops it the same way.
 *
 * One crossing from Python (ctypes natively, the side module in Pyodide) runs a whole captured
 * step: no Python and no bridge per kernel.
 */
#include "exports.h"

enum {
    PROGRAM_GEMM_F32, PROGRAM_GEMM_F16W_F32, PROGRAM_IM2COL_F32, PROGRAM_CONV2D_F32, PROGRAM_DEPTHWISE_CONV2D_F32,
    PROGRAM_SOFTMAX_F32, PROGRAM_LAYER_NORM_F32, PROGRAM_RMS_NORM_F32, PROGRAM_ADD_LAYER_NORM_F32,
    PROGRAM_SCALE_SHIFT_F32, PROGRAM_CLAMP_F32, PROGRAM_ACTIVATION_F32, PROGRAM_ROPE_F32, PROGRAM_SILU_MUL_F32,
    PROGRAM_ATTENTION_F32, PROGRAM_LINEAR_Q_F32, PROGRAM_EMBEDDING_Q_F32, PROGRAM_INDEX_COPY_F32,
    PROGRAM_F16_TO_F32, PROGRAM_BF16_TO_F32, PROGRAM_F32_TO_BF16, PROGRAM_ADD_F32,
};

static inline float word_float(uint64_t w) {
    union { uint32_t u; float f; } bits = { .u = (uint32_t)w };
    return bits.f;
}

#define Z(i) ((size_t)a[i])
#define S(i) ((ptrdiff_t)(int64_t)a[i])
#define I(i) ((int)(int64_t)a[i])
#define P(i) ((void *)(uintptr_t)a[i])
#define F(i) word_float(a[i])

EXPORT size_t engine_run_program(const uint64_t *words, size_t count) {
    size_t pos = 0;
    while (pos < count) {
        const uint64_t *a = words + pos + 1;
        size_t r = 0, n;
        switch (words[pos]) {
        case PROGRAM_GEMM_F32:
            r = gemm_f32(Z(0), Z(1), Z(2), Z(3), P(4), S(5), S(6), S(7), P(8), S(9), S(10), S(11), P(12), S(13), S(14),
                         P(15), S(16), S(17), I(18), P(19), Z(20));
            n = 21;
            break;
        case PROGRAM_GEMM_F16W_F32:
            r = gemm_f16w_f32(Z(0), Z(1), Z(2), Z(3), P(4), S(5), S(6), S(7), P(8), S(9), S(10), S(11), P(12), S(13),
                              S(14), P(15), S(16), S(17), I(18), P(19), Z(20));
            n = 21;
            break;
        case PROGRAM_IM2COL_F32:
            im2col_f32(Z(0), Z(1), Z(2), P(3), Z(4), Z(5), Z(6), Z(7), Z(8), Z(9), Z(10), Z(11), Z(12), Z(13), P(14));
            n = 15;
            break;
        case PROGRAM_CONV2D_F32:
            r = conv2d_f32(Z(0), Z(1), Z(2), Z(3), P(4), Z(5), Z(6), Z(7), P(8), Z(9), Z(10), Z(11), Z(12), Z(13),
                           Z(14), Z(15), Z(16), Z(17), P(18), I(19), P(20), P(21), Z(22));
            n = 23;
            break;
        case PROGRAM_DEPTHWISE_CONV2D_F32:
            r = depthwise_conv2d_f32(Z(0), Z(1), Z(2), Z(3), P(4), Z(5), Z(6), P(7), Z(8), Z(9), Z(10), Z(11), Z(12),
                                     Z(13), Z(14), Z(15), P(16), I(17), P(18), P(19), Z(20));
            n = 21;
            break;
        case PROGRAM_SOFTMAX_F32:
            softmax_f32(Z(0), Z(1), Z(2), P(3), S(4), S(5), S(6), P(7));
            n = 8;
            break;
        case PROGRAM_LAYER_NORM_F32:
            layer_norm_f32(Z(0), Z(1), P(2), S(3), P(4), P(5), P(6), F(7));
            n = 8;
            break;
        case PROGRAM_RMS_NORM_F32:
            rms_norm_f32(Z(0), Z(1), P(2), S(3), P(4), P(5), F(6));
            n = 7;
            break;
        case PROGRAM_ADD_LAYER_NORM_F32:
            add_layer_norm_f32(Z(0), Z(1), P(2), S(3), P(4), P(5), S(6), P(7), P(8), P(9), F(10));
            n = 11;
            break;
        case PROGRAM_SCALE_SHIFT_F32:
            scale_shift_f32(Z(0), Z(1), Z(2), P(3), P(4), P(5), I(6), P(7));
            n = 8;
            break;
        case PROGRAM_CLAMP_F32:
            clamp_f32(Z(0), P(1), F(2), F(3), P(4));
            n = 5;
            break;
        case PROGRAM_ACTIVATION_F32:
            activation_f32(Z(0), P(1), I(2), P(3));
            n = 4;
            break;
        case PROGRAM_ROPE_F32:
            rope_f32(Z(0), Z(1), Z(2), P(3), S(4), S(5), P(6), P(7), P(8));
            n = 9;
            break;
        case PROGRAM_SILU_MUL_F32:
            silu_mul_f32(Z(0), Z(1), P(2), S(3), P(4), S(5), P(6));
            n = 7;
            break;
        case PROGRAM_ATTENTION_F32:
            r = attention_f32(Z(0), Z(1), Z(2), Z(3), Z(4), Z(5), Z(6), P(7), S(8), S(9), S(10), S(11), P(12), S(13),
                              S(14), S(15), S(16), P(17), S(18), S(19), S(20), S(21), P(22), I(23), S(24), S(25),
                              S(26), S(27), I(28), F(29), P(30), P(31), Z(32));
            n = 33;
            break;
        case PROGRAM_LINEAR_Q_F32:
            r = linear_q_f32(I(0), Z(1), Z(2), Z(3), P(4), S(5), P(6), P(7), P(8), P(9), Z(10));
            n = 11;
            break;
        case PROGRAM_EMBEDDING_Q_F32:
            r = embedding_q_f32(I(0), Z(1), P(2), Z(3), Z(4), P(5), P(6));
            n = 7;
            break;
        case PROGRAM_INDEX_COPY_F32:
            r = index_copy_f32(Z(0), Z(1), Z(2), P(3), S(4), S(5), P(6), Z(7), P(8), S(9), S(10));
            n = 11;
            break;
        case PROGRAM_F16_TO_F32:
            f16_to_f32(Z(0), P(1), P(2));
            n = 3;
            break;
        case PROGRAM_BF16_TO_F32:
            bf16_to_f32(Z(0), P(1), P(2));
            n = 3;
            break;
        case PROGRAM_F32_TO_BF16:
            f32_to_bf16(Z(0), P(1), P(2));
            n = 3;
            break;
        case PROGRAM_ADD_F32:
            add_f32(Z(0), P(1), P(2), P(3));
            n = 4;
            break;
        default:
            return pos + 1;
        }
        if (r) return pos + 1;
        pos += 1 + n;
    }
    return 0;
}
