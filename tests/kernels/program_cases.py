"""engine_run_program (wasm_kernels/program.c) against the direct calls, for every export a program
runs: each case calls the kernels' Python wrapper once (recording its C calls), then the recorded
calls run again as one Program on the same arrays, their outputs set to NaN first, and must write
the same bits. Shared by the native test (tests/kernels/test_program.py) and the Pyodide checks
(tests/kernels/wasm_checks.py), so the WebAssembly build is held to the same."""
from __future__ import annotations

import numpy as np

from engine.backends.simd import kernels as K
from engine.backends.simd import library
from engine.backends.simd import quantized as Q
from engine.backends.simd.program import Program
from tests.kernels.reference import random_blocks


def _f32(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def cases(rng) -> dict:
    """label -> a call that runs one wrapper and returns the arrays it wrote. Every input it makes
    goes in the list under "kept", alive as long as that: a program reads them again later."""
    kept = []

    def f32(*shape):
        kept.append(_f32(rng, *shape))
        return kept[-1]

    def keep(a):
        kept.append(a)
        return a
    x4 = f32(2, 3, 9, 7)
    q4k = random_blocks("q4_k", 5, 256, rng)
    q80 = random_blocks("q8_0", 6, 64, rng)
    cache = np.full((1, 5, 2, 8), np.nan, np.float32)
    found = {
        "gemm_f32": lambda: [K.gemm(f32(5, 33), keep(f32(33, 17).T.copy().T), f32(17), "gelu")],
        "gemm_f16w_f32": lambda: [K.linear(f32(3, 40), keep(f32(24, 40).astype(np.float16)))],
        "im2col_f32": lambda: [K.im2col(x4[0], 3, stride=2, padding=1)],
        "conv2d_f32": lambda: [K.conv2d(x4, f32(4, 3, 3, 3), f32(4), stride=1, padding=1,
                                        activation="relu6")],
        "depthwise_conv2d_f32": lambda: [K.depthwise_conv2d(x4, f32(3, 1, 3, 3), f32(3), padding=1)],
        "softmax_f32": lambda: [K.softmax(keep(f32(4, 11).T), axis=0)],
        "layer_norm_f32": lambda: [K.layer_norm(f32(3, 20), 20, f32(20), f32(20))],
        "rms_norm_f32": lambda: [K.rms_norm(f32(3, 20), 20, f32(20), eps=1e-5)],
        "add_layer_norm_f32": lambda: [K.add_layer_norm(f32(3, 20), f32(3, 20), 20, f32(20),
                                                        f32(20), input_bias=f32(20))],
        "scale_shift_f32": lambda: [K.scale_shift(x4, f32(3), f32(3), "silu")],
        "clamp_f32": lambda: [K.clamp(f32(37), -0.5, 0.75)],
        "activation_f32": lambda: [K.activation(f32(37), "gelu_tanh")],
        "rope_f32": lambda: [K.rope(f32(2, 3, 4, 8), f32(4, 8), f32(4, 8))],
        "silu_mul_f32": lambda: [K.silu_mul(*np.split(f32(3, 38), 2, axis=1))],
        "attention_f32": lambda: [K.attention(f32(1, 4, 3, 8), f32(1, 2, 6, 8), f32(1, 2, 6, 8),
                                              keep(rng.random((1, 1, 3, 6)) < 0.8), 0.3)],
        "linear_q_f32": lambda: [Q.linear_q(f32(3, 256), f32(5), weight=q4k, qtype="q4_k", rows=5,
                                            cols=256)],
        "embedding_q_f32": lambda: [Q.embedding_q(keep(np.array([[5, 0], [2, 2]], np.int64)), weight=q80,
                                                  qtype="q8_0", rows=6, cols=64)],
        "index_copy_f32": lambda: [cache] if K.index_copy(cache, keep(np.array([3, 0, 4, 1, 2], np.int64)),
                                                          f32(1, 5, 2, 8), axis=1) else [],
        "f16_to_f32": lambda: [K.f16_to_f32(keep(f32(13).astype(np.float16)))],
        "bf16_to_f32": lambda: [K.bf16_to_f32(keep(rng.integers(0, 1 << 16, 13, dtype=np.uint16)))],
        "f32_to_bf16": lambda: [K.f32_to_bf16(f32(13))],
        "add_f32": lambda: [K.add(f32(3, 13), f32(3, 13))],
    }
    found["kept"] = kept                                       # not a case: the inputs, alive
    return found


def recorded_program(call) -> tuple[Program, list, list]:
    """(the recorded calls of call() as one Program, the arrays call() wrote, their values)."""
    with library.recording() as calls:
        outputs = call()
    steps = [[name, fn, list(args), None] for name, fn, args, result in calls
             if not (result and name in library.SCRATCH)]        # a scratch export's size query
    return Program(library.get(), steps), outputs, [o.copy() for o in outputs]


def check_every_export(rng) -> dict:
    """export -> whether its program wrote the bits of its direct call (and the calls it made)."""
    found = {}
    every = cases(rng)
    kept = every.pop("kept")
    for name, call in every.items():
        program, outputs, expected = recorded_program(call)
        for out in outputs:
            out.view(np.uint8)[...] = 0xFF                        # NaN (or 0xFFFF bit patterns)
        program()
        found[name] = bool(outputs) and name in program.names and \
            all(np.array_equal(o.view(np.uint8), e.view(np.uint8)) for o, e in zip(outputs, expected))
    assert kept                                                 # alive until here
    return found


def check_scratch_growth(rng) -> bool:
    """A scratch export given no scratch in a program gets what it asks for and the program goes
    on (a 3x3 convolution: its columns need scratch in every build)."""
    x, w = _f32(rng, 1, 8, 20, 20), _f32(rng, 16, 8, 3, 3)
    c, d = _f32(rng, 3, 13), _f32(rng, 3, 13)                  # alive while the program runs
    program, outputs, expected = recorded_program(lambda: [K.conv2d(x, w, padding=1), K.add(c, d)])
    conv = next(step for step in program.calls if step[0] == "conv2d_f32")
    conv[2][-2:] = None, 0
    program._encode()
    for out in outputs:
        out[...] = np.nan
    program()
    return all(np.array_equal(o, e) for o, e in zip(outputs, expected)) and conv[3] is not None and conv[3].size > 1


def check_bad_index(rng) -> str:
    """What a program whose embedding row is out of range raises (IndexError)."""
    q80 = random_blocks("q8_0", 6, 64, rng)
    program, _, _ = recorded_program(lambda: [Q.embedding_q(np.array([1]), weight=q80, qtype="q8_0", rows=6,
                                                            cols=64)])
    ids = np.array([6], np.int64)
    program.calls[0][2][2] = ids.ctypes.data
    program._encode()
    try:
        program()
    except IndexError as e:
        return f"IndexError: {e}"
    return "nothing raised"
