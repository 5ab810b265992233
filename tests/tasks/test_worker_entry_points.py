"""The task modules' worker entry points (what the page's cards call), run natively: each answer
equals what its pipeline gives for the same input. The browser tests (tests/web) run the same
functions in Pyodide."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

import engine
from engine.errors import InputError
from engine.web import worker

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "digits"
FAST = "simd" if "simd" in engine.available_devices() else "numpy"     # the models' own tests cover every backend


def rgba(image: np.ndarray) -> np.ndarray:
    """(H, W, C) uint8 (gray, gray + alpha, RGB or RGBA) -> (H, W, 4): what a canvas hands the worker."""
    if image.ndim == 2:
        image = image[:, :, None]
    color = image[:, :, :-1] if image.shape[2] in (2, 4) else image
    alpha = image[:, :, -1:] if image.shape[2] in (2, 4) else np.full(image.shape[:2] + (1,), 255, np.uint8)
    color = np.repeat(color, 3, axis=2) if color.shape[2] == 1 else color
    return np.ascontiguousarray(np.concatenate([color, alpha], 2))


def test_predict_digit_equals_the_pipeline_and_a_blank_canvas_is_no_answer(loaded):
    from engine.vision import read_image
    pipe = loaded("digit-classification", engine.pipeline("digit-classification"))
    pixels = rgba(read_image(SAMPLES / "7.png"))
    answer = json.loads(asyncio.run(worker.predict_digit(pixels.tobytes(), pixels.shape[1], pixels.shape[0])))
    want = pipe.probabilities([pixels])[0]
    np.testing.assert_allclose(answer["probs"], want, atol=1e-6)
    assert answer["prediction"] == "7" and answer["blank"] is False and answer["device"] == "numpy"
    blank = np.full((280, 280, 4), 255, np.uint8)
    answer = json.loads(asyncio.run(worker.predict_digit(blank.tobytes(), 280, 280)))
    assert answer["blank"] is True and answer["prediction"] is None and answer["probs"] == [0.0] * 10


def test_classify_image_equals_the_pipeline(loaded, effnet_weights, sample_photos):
    from engine.vision import read_image
    pipe = loaded("image-classification", engine.pipeline("image-classification", weights=effnet_weights))
    pixels = rgba(read_image(sample_photos["chelsea.png"]))
    answer = json.loads(asyncio.run(worker.classify_image(pixels, pixels.shape[1], pixels.shape[0], 3)))
    want = pipe(pixels, top_k=3)
    assert [p["index"] for p in answer["predictions"]] == [p["index"] for p in want]
    np.testing.assert_allclose([p["score"] for p in answer["predictions"]], [p["score"] for p in want], rtol=1e-6)


def test_embed_texts_equals_the_pipeline(loaded, minilm_folder):
    pipe = loaded("sentence-embedding", engine.pipeline("sentence-embedding", weights=minilm_folder, device=FAST))
    texts = ["A man is eating food.", "Someone eats.", "The sky is blue " * 100]
    answer = json.loads(asyncio.run(worker.embed_texts(texts)))           # its truncation: in the answer
    with pytest.warns(UserWarning, match="truncated"):
        want = pipe(texts)
    np.testing.assert_allclose(answer["embeddings"], want, atol=1e-6)
    np.testing.assert_allclose(answer["similarity"], want @ want.T, atol=1e-5)
    assert answer["truncated"] == [2] and answer["max_length"] == pipe.max_length


def test_chat_streams_the_pipeline_s_answer(loaded, smollm2_gguf):
    with pytest.raises(InputError, match="text-generation model is not loaded"):
        worker.chat_defaults()
    assert json.loads(worker.chat_stop()) == {"stopped": False}
    pipe = loaded("text-generation", engine.pipeline("text-generation", weights=smollm2_gguf, device=FAST,
                                                     capacity=256))
    defaults = json.loads(worker.chat_defaults())
    assert defaults["model"] == "SmolLM2-135M-Instruct" and defaults["capacity"] == 256
    pieces = []
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    answer = json.loads(asyncio.run(worker.chat(json.dumps(messages), json.dumps({"max_new_tokens": 16}),
                                                pieces.append)))
    assert answer["text"] == "".join(pieces) == "The capital of France is Paris."
    assert answer["stats"]["new_tokens"] == 7 and answer["stats"]["stop_reason"] == "eos"
    assert json.loads(asyncio.run(worker.chat_reset())) == {"reset": True}
    assert pipe.generator.cache.length == 0

    # the card's context length: a new, empty cache of that capacity, checked against the model's
    assert defaults["max_capacity"] == 8192
    asyncio.run(worker.chat(json.dumps(messages), json.dumps({"max_new_tokens": 4})))
    assert json.loads(asyncio.run(worker.chat_context(512))) == {"capacity": 512, "max_capacity": 8192}
    assert pipe.generator.cache.capacity == 512 and pipe.generator.cache.length == 0
    for bad in (1, 8193, "many", True):
        with pytest.raises(InputError, match="capacity must be an integer in \\[2, 8192\\]"):
            asyncio.run(worker.chat_context(bad))
    assert pipe.generator.cache.capacity == 512
