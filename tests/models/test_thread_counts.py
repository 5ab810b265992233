"""The models on 1 and 2 threads of the simd kernels (wasm_kernels/pool.c): every split keeps
each sum's order, so EfficientNet-Lite0's logits and MiniLM's embeddings are the same bits on
both counts (hence the same top-1), and SmolLM2 answers with the same greedy tokens."""
import numpy as np
import pytest

import engine
from tests.helpers import need

need(engine.device.unavailable_reason("simd") is None, f"simd unavailable: {engine.device.unavailable_reason('simd')}")


@pytest.fixture(autouse=True)
def one_thread_after():
    yield
    engine.set_num_threads(1)


def on_one_and_two_threads(run):
    results = []
    for n in (1, 2):
        engine.set_num_threads(n)
        assert engine.get_num_threads() == n
        results.append(run())
    return results


def test_efficientnet_same_logits(effnet_state, sample_photos):
    from engine.vision import read_image
    from models import efficientnet_lite as E
    model = E.EfficientNetLite()
    model.load_state_dict(effnet_state)
    model = model.to("simd")
    x = np.stack([E.preprocess(read_image(sample_photos[n])) for n in ("chelsea.png", "coffee.png")])
    for batch in (x[:1], x):
        one, two = on_one_and_two_threads(lambda: model(engine.from_numpy(batch, "simd")).numpy())
        np.testing.assert_array_equal(one.view(np.uint32), two.view(np.uint32))
    assert one.argmax(1)[1] == 967                                     # espresso


def test_minilm_same_embeddings(minilm_folder):
    from models import bert
    config = bert.Config.from_json((minilm_folder / "config.json").read_text())
    model = bert.load(engine.load_safetensors(minilm_folder / "model.safetensors"), device="simd", config=config)
    rng = np.random.default_rng(5)
    ids = rng.integers(1000, 30000, (8, 128))
    mask = np.ones((8, 128), np.int64)
    mask[3, 70:] = 0
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    for rows in (slice(0, 1), slice(None)):
        part = {k: v[rows] for k, v in batch.items()}
        one, two = on_one_and_two_threads(lambda: bert.embed(model, part))
        np.testing.assert_array_equal(one.view(np.uint32), two.view(np.uint32))


@pytest.mark.slow
def test_smollm2_same_greedy_tokens(smollm2_gguf):
    chat = engine.pipeline("text-generation", device="simd", weights=smollm2_gguf, capacity=256)
    question = [{"role": "user", "content": "What is the capital of France?"}]

    def answer():
        chat.reset()                                                   # the prompt computed again
        text = chat.chat(question, max_new_tokens=16)
        assert chat.stats["reused_tokens"] == 0
        return text
    assert on_one_and_two_threads(answer) == ["The capital of France is Paris."] * 2


@pytest.mark.slow
def test_a_graph_captured_on_one_thread_replays_on_two(smollm2_gguf):
    """Decode steps captured on 1 thread (their calls' scratch sized for one part) replay on 2:
    past ~90 positions a step's attention splits and asks for scratch for its parts, which the
    replay then gives it; the 64 greedy tokens (end-of-sequence ignored) stay the same."""
    from engine.generation import GenerationConfig
    chat = engine.pipeline("text-generation", device="simd", weights=smollm2_gguf, capacity=256)
    generator = chat.generator
    ids = chat.prompt_ids([{"role": "user", "content": "What is the capital of France?"}])
    generator.eos_ids = set()

    def tokens():
        generator.reset()
        return list(generator.tokens(ids, GenerationConfig(max_new_tokens=64)))
    engine.set_num_threads(1)
    first = tokens()
    assert generator.captured
    engine.set_num_threads(2)
    assert tokens() == first
