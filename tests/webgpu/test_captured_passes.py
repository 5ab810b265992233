"""Every model's pass on webgpu is captured once per input shape and replayed (engine.graph): after
the first call at a shape, a call records no dispatch from Python (`gpu.stats["recorded"]`), submits
the same dispatches in one or a few submissions, gives the simd backend's answer, and the answer of
its own input, not the first call's. EfficientNet-Lite0, MiniLM, YOLOv10n and YOLO11n-pose on their
real weights through their pipelines (Pipeline.forward, engine.graph.Passes); the Whisper encoder
(Whisper.encode) and an LLM prefill chunk (Generator._forward) on tiny random models."""
from __future__ import annotations


import numpy as np
import pytest

import engine
from engine.graph import Passes

COUNTED = ("recorded", "dispatches", "submits")


def counted(gpu, fn):
    """fn()'s result and what it did on the device: dispatches recorded from Python, submitted, submissions."""
    before = {k: gpu.stats[k] for k in COUNTED}
    out = fn()
    return out, {k: gpu.stats[k] - before[k] for k in COUNTED}


def assert_replayed(first: dict, again: dict) -> None:
    """`again` replayed what `first` recorded: nothing recorded, the same dispatches, few submissions."""
    assert first["recorded"] > 0 and first["recorded"] == first["dispatches"]
    assert again["recorded"] == 0, again
    assert again["dispatches"] == first["dispatches"] and 1 <= again["submits"] <= 2, (first, again)


def test_passes_replay_only_where_the_backend_replays_whole(gpu):
    assert Passes.replays("webgpu") and not Passes.replays("numpy")


@pytest.mark.slow
def test_efficientnet(gpu, effnet_weights, sample_photos):
    pipe = engine.pipeline("image-classification", weights=effnet_weights, device="webgpu")
    cpu = engine.pipeline("image-classification", weights=effnet_weights, device="simd")
    cat, cup = (pipe.preprocess([str(sample_photos[name])]) for name in ("chelsea.png", "coffee.png"))
    first, recorded = counted(gpu, lambda: pipe.logits(cat))
    second, replayed = counted(gpu, lambda: pipe.logits(cup))
    assert_replayed(recorded, replayed)
    for got, batch in ((first, cat), (second, cup), (pipe.logits(cat), cat)):
        want = cpu.logits(batch)
        assert (np.argsort(-got[0])[:5] == np.argsort(-want[0])[:5]).all()
        assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()
    assert np.argmax(first) != np.argmax(second)                      # a cat, then a cup: not the cat again


def minilm_rows(model):
    """The model's word embeddings as the site serves them (engine.rows.RowTable: gathered on the
    host by the pipeline, the pass then takes the rows as its input)."""
    from engine.rows import RowTable
    table = model.embeddings.word_embeddings.weight.numpy()

    async def fetch(blocks):
        return {b: table[b * 1024:(b + 1) * 1024].tobytes() for b in blocks}
    model.embeddings.word_embeddings.weight = RowTable("word_embeddings", table.shape, engine.float32, 1024, fetch,
                                                       "webgpu")


@pytest.mark.slow
@pytest.mark.parametrize("rows", [False, True], ids=["ids", "row-table"])
def test_minilm(gpu, minilm_folder, rows):
    pipe = engine.pipeline("sentence-embedding", weights=minilm_folder, device="webgpu")
    cpu = engine.pipeline("sentence-embedding", weights=minilm_folder, device="simd")
    if rows:
        minilm_rows(pipe.model)
    texts = (["A man is eating food.", "A cat sleeps on the sofa."],
             ["Two dogs run in the park.", "The girl carries a baby."])
    widths = {pipe.tokenize(t)["input_ids"].shape for t in texts}
    assert len(widths) == 1                                          # one shape: (2, width)
    first, recorded = counted(gpu, lambda: pipe(texts[0]))
    second, replayed = counted(gpu, lambda: pipe(texts[1]))
    assert_replayed(recorded, replayed)
    for got, t in ((first, texts[0]), (second, texts[1])):
        np.testing.assert_allclose(got, cpu(t), atol=2e-5)
    assert not np.allclose(first, second, atol=1e-3)
    assert len(pipe._passes.graphs) == 1


@pytest.mark.slow
@pytest.mark.parametrize("name, task, photo", [("yolov10n", "object-detection", "bus"),
                                               ("yolo11n_pose", "pose-estimation", "zidane")])
def test_yolo(gpu, tmp_path, name, task, photo):
    from engine.vision import read_image
    from tests.tasks.test_detection_pipelines import SAMPLES
    from tests.tasks.test_detection_pipelines import write_site
    weights = write_site(tmp_path / name, name)
    pipe, cpu = (engine.pipeline(task, weights=weights, device=device) for device in ("webgpu", "simd"))
    image = read_image(SAMPLES / f"{photo}.jpg")
    mirrored = np.ascontiguousarray(image[:, ::-1])                  # the same input shape, other boxes
    first, recorded = counted(gpu, lambda: pipe(image, size=320))
    second, replayed = counted(gpu, lambda: pipe(mirrored, size=320))
    assert_replayed(recorded, replayed)
    for got, want in ((first, cpu(image, size=320)), (second, cpu(mirrored, size=320))):
        assert got and len(got) == len(want)
        for a, b in zip(got, want):
            assert a.get("label") == b.get("label") and abs(a["score"] - b["score"]) < 1e-3
            assert all(abs(a["box"][k] - b["box"][k]) < 0.5 for k in a["box"])
            for p, q in zip(a.get("keypoints", ()), b.get("keypoints", ())):
                assert abs(p["x"] - q["x"]) < 0.5 and abs(p["y"] - q["y"]) < 0.5
    assert [d["box"] for d in second] != [d["box"] for d in first]        # the mirror's boxes, not the first's


def test_whisper_encoder(gpu):
    """A tiny random Whisper: the encoder replayed per window, its features what simd computes and
    what the decoder reads (a window's first tokens' logits)."""
    from engine.speech.decoder import DecoderSession
    from models import whisper as W
    config = W.Config(n_mels=80, n_audio_ctx=24, n_audio_state=128, n_audio_head=2, n_audio_layer=2, n_vocab=512,
                      n_text_ctx=40, n_text_state=128, n_text_head=2, n_text_layer=2)
    rng = np.random.default_rng(0)
    state = {k: rng.standard_normal(v.shape).astype(np.float32) * (1.0 if k.endswith("ln.weight") else 0.2)
             for k, v in W.Whisper(config).state_dict().items()}
    models = {device: W.load({k: engine.from_numpy(v) for k, v in state.items()}, device) for device in ("webgpu", "simd")}
    mels = [rng.standard_normal((80, 48)).astype(np.float32) for _ in range(2)]
    first, recorded = counted(gpu, lambda: models["webgpu"].encode(mels[0]).numpy())
    second, replayed = counted(gpu, lambda: models["webgpu"].encode(mels[1]).numpy())
    assert_replayed(recorded, replayed)
    for got, mel in ((first, mels[0]), (second, mels[1])):
        np.testing.assert_allclose(got, models["simd"].encode(mel).numpy(), atol=1e-4, rtol=1e-4)
    assert not np.allclose(first, second, atol=1e-2)
    logits = {}
    for device, model in models.items():
        session = DecoderSession(model)
        session.set_audio(model.encode(mels[0]))                       # replayed on webgpu
        logits[device] = session.feed([5, 6, 7], rows=(0, -1))
    np.testing.assert_allclose(logits["webgpu"], logits["simd"], atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_llm_prefill_chunk(gpu, tmp_path):
    """A tiny random llama: prefill chunks replayed per (length, window), their logits and the
    tokens generated after them simd's."""
    from engine.generation import GenerationConfig, Generator
    from models import llama
    from tests.helpers import need_import
    from tests.llama_gguf import reference_model, write_gguf
    need_import("transformers")
    write_gguf(tmp_path / "t.gguf", reference_model(tied=True, seed=4))
    gens = {device: Generator(llama.load(tmp_path / "t.gguf", device), None, 64, set()) for device in ("webgpu", "simd")}
    for gen in gens.values():
        gen.prefill_chunk = 8                                         # 13 tokens: chunks of 8 and 5
    prompts = ([1, 17, 40, 99, 3, 5, 6, 7, 8, 9, 10, 11, 12], [2, 30, 41, 98, 4, 15, 6, 70, 8, 90, 10, 11, 120])
    gen = gens["webgpu"]
    first, recorded = counted(gpu, lambda: gen._prefill(prompts[0]))
    gen.reset()
    second, replayed = counted(gpu, lambda: gen._prefill(prompts[1]))
    assert recorded["recorded"] > 0 and replayed["recorded"] == 0
    assert replayed["dispatches"] == recorded["dispatches"] and replayed["submits"] <= 4     # two chunks
    assert {("prefill", 8, 64), ("prefill", 5, 64)} <= set(gen.steps.graphs)
    for got, prompt in ((first, prompts[0]), (second, prompts[1])):
        gens["simd"].reset()
        np.testing.assert_allclose(got, gens["simd"]._prefill(prompt), atol=1e-4, rtol=1e-4)
    assert np.argmax(first) != np.argmax(second)
    config = GenerationConfig(max_new_tokens=5)
    for prompt in prompts:
        tokens = {}
        for device, g in gens.items():
            g.reset()
            tokens[device] = list(g.tokens(prompt, config))
        assert tokens["webgpu"] == tokens["simd"] and len(tokens["simd"]) == 5
