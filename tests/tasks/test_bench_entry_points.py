"""The bench page's thread-section entry points (engine/web/bench.py), run natively: bench_threads
sets the kernels' thread count and says what it got; bench_peer_cases hands the page's peer the
very inputs bench_image and bench_text time ours on, with our outputs on them. The page runs them in
Pyodide (tests/web/test_bench_peers.py)."""
from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest

import engine
from engine.web import bench

FAST = "simd" if "simd" in engine.available_devices() else "numpy"


def test_bench_threads_sets_the_count_and_says_what_it_got():
    before = engine.get_num_threads()
    try:
        answer = json.loads(asyncio.run(bench.bench_threads(2)))
        assert answer["requested"] == 2 and answer["used"] == engine.get_num_threads()
        if "simd" in engine.available_devices():             # the native pool
            assert answer == {"requested": 2, "used": 2, "reason": None}
        else:
            assert answer["used"] == 1 and answer["reason"]
        assert json.loads(asyncio.run(bench.bench_threads(1))) == {"requested": 1, "used": 1, "reason": None}
    finally:
        engine.set_num_threads(before)


def decode(feed: dict) -> np.ndarray:
    dtype = {"float32": "<f4", "int64": "<i8"}[feed["type"]]
    return np.frombuffer(base64.b64decode(feed["base64"]), dtype).reshape(feed["dims"])


@pytest.mark.slow
def test_peer_cases_are_the_timed_inputs_with_our_outputs(loaded, effnet_weights, minilm_folder):
    assert json.loads(asyncio.run(bench.bench_peer_cases()))["cases"] == {}       # nothing loaded: no case
    image = loaded("image-classification", engine.pipeline("image-classification", weights=effnet_weights, device=FAST))
    text = loaded("sentence-embedding", engine.pipeline("sentence-embedding", weights=minilm_folder, device=FAST))
    cases = json.loads(asyncio.run(bench.bench_peer_cases()))["cases"]
    assert set(cases) == {"effnet_b1", "minilm_1x128", "minilm_8x128"}
    x = decode(cases["effnet_b1"]["feeds"]["pixel_values"])
    np.testing.assert_array_equal(x, bench.image_inputs()[1])
    np.testing.assert_allclose(cases["effnet_b1"]["output"], image.logits(x).ravel(), atol=1e-5)
    for (n, length), batch in bench.text_inputs().items():
        case = cases[f"minilm_{n}x{length}"]
        assert set(case["feeds"]) == {"input_ids", "attention_mask", "token_type_ids"}
        for name, feed in case["feeds"].items():
            assert feed["type"] == "int64" and feed["dims"] == [n, length]
            np.testing.assert_array_equal(decode(feed), batch[name])
        np.testing.assert_allclose(case["output"], text.embed(batch).ravel(), atol=1e-6)
