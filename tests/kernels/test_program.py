"""engine_run_program (wasm_kernels/program.c): a captured step's C calls run in one call. Every
export gives the bits of its direct call; a scratch export short of scratch gets more and the
program goes on; a bad index raises as the eager call does; an unknown id stops the program; and
a captured SmolLM2 decode step replays as a handful of calls with the eager step's logits."""
import numpy as np
import pytest

import engine
from engine.backends.simd import library
from engine.backends.simd.program import Program
from tests.helpers import need
from tests.kernels import program_cases

need(engine.device.unavailable_reason("simd") is None, f"simd unavailable: {engine.device.unavailable_reason('simd')}")


def test_every_export_in_a_program_writes_the_bits_of_its_direct_call():
    found = program_cases.check_every_export(np.random.default_rng(0))
    assert sorted(found) == sorted(library.PROGRAM)
    assert [name for name, same in found.items() if not same] == []


def test_a_scratch_export_short_of_scratch_gets_more_and_the_program_goes_on():
    assert program_cases.check_scratch_growth(np.random.default_rng(1))


def test_an_index_out_of_range_raises_index_error():
    assert program_cases.check_bad_index(np.random.default_rng(2)).startswith("IndexError: embedding_q_f32")


def test_an_unknown_id_stops_the_program_where_it_stands():
    run = library.get().engine_run_program
    y = np.full(4, np.nan, np.float32)
    a = np.arange(4, dtype=np.float32)
    add = library.PROGRAM.index("add_f32")
    words = np.array([add, 4, a.ctypes.data, a.ctypes.data, y.ctypes.data, len(library.PROGRAM), 0], np.uint64)
    assert run(words.ctypes.data, words.size) == 5 + 1          # the unknown id's word, + 1
    np.testing.assert_array_equal(y, 2 * a)                     # the call before it ran
    assert run(words.ctypes.data, 0) == 0                       # an empty program


def test_graph_steps_join_into_programs():
    """Consecutive native steps of a captured function become one Program (test_graph.block)."""
    from engine import graph
    from tests.nn.test_graph import block
    rng = np.random.default_rng(3)
    w = engine.from_numpy(rng.standard_normal((8, 8)).astype(np.float32), "simd")
    cache = engine.zeros((1, 1, 16, 8), device="simd")
    g, _ = graph.capture(lambda x, p: block(x, p, cache, w), engine.ones((1, 1, 8), device="simd"),
                         engine.tensor([0], device="simd"))
    programs = [call for call in g.calls if isinstance(call, Program)]
    assert len(g.calls) < g.ops and max(len(p.calls) for p in programs) >= 3, [type(c).__name__ for c in g.calls]
    assert sum(len(p.calls) for p in programs) >= g.prepared["native"]


@pytest.mark.slow
def test_a_smollm2_decode_step_replays_in_a_few_calls_with_the_eager_logits(smollm2_gguf):
    """The 30-block step's ~400 kernels replay as one program between the embedding and the
    position lookups: at most 6 calls, and the logits are the eager step's bits."""
    from engine.generation import GenerationConfig
    chat = engine.pipeline("text-generation", device="simd", weights=smollm2_gguf, capacity=128)
    generator = chat.generator
    ids = chat.prompt_ids([{"role": "user", "content": "What is the capital of France?"}])
    generator.eos_ids = set()
    tokens = list(generator.tokens(ids, GenerationConfig(max_new_tokens=4)))
    (step,) = generator.steps.graphs.values()
    assert step.ops > 300 and len(step.calls) <= 6, (step.ops, [type(c).__name__ for c in step.calls])
    length = generator.cache.length
    replayed = generator._forward([tokens[-1]]).copy()         # through the captured step
    assert len(generator.steps.graphs) == 1
    generator.cache.truncate(length)
    generator.steps.enabled = False
    eager = generator._forward([tokens[-1]])
    np.testing.assert_array_equal(eager, replayed)
