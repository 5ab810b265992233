"""Silero VAD (models/silero_vad.py) against the `silero-vad` package itself (PyPI 6.2.3, its
TorchScript model's audio_forward): the speech probability of every 32 ms chunk within 1e-4, on
espeak-ng speech, the same speech with silences inserted, noise and silence, on each backend;
and a stream fed chunk by chunk gives what the whole recording gives.

The package's safetensors (what the site serves) hold other weights than its TorchScript and
ONNX files (a correlation of 0.90: another training), so the reference is the package's
TorchScript with the safetensors' tensors loaded into it by name; and ours, given the
TorchScript's own tensors, equals its stock output too."""
from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.helpers import need_import

torch = need_import("torch", "the reference runs on torch")
silero = need_import("silero_vad", "the reference (PyPI silero-vad, the test extra)")


@pytest.fixture(scope="module")
def weights():
    from importlib import resources
    from engine import registry
    member = registry.model("silero_vad").source("weights").files["weights"]
    return str(resources.files("silero_vad").joinpath(member.split("/", 1)[1]))


# the TorchScript's names for the safetensors' (models/silero_vad.py's)
NAMES = {"stft.forward_basis_buffer": "stft_conv.weight", "decoder.decoder.2.weight": "final_conv.weight",
         "decoder.decoder.2.bias": "final_conv.bias",
         **{f"decoder.rnn.{p}": f"lstm_cell.{p}" for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")},
         **{f"encoder.{i}.reparam_conv.{p}": f"conv{i + 1}.{p}" for i in range(4) for p in ("weight", "bias")}}


@pytest.fixture(scope="module")
def stock():
    """The package's TorchScript model as it ships."""
    return silero.load_silero_vad()


@pytest.fixture(scope="module")
def reference(weights):
    """The package's TorchScript model with the safetensors' tensors."""
    from safetensors.numpy import load_file
    model = silero.load_silero_vad()
    tensors = load_file(weights)
    assert sorted(NAMES.values()) == sorted(tensors)
    model._model.load_state_dict({ours: torch.from_numpy(tensors[name]) for ours, name in NAMES.items()})
    return model


def recordings() -> dict[str, np.ndarray]:
    from pathlib import Path
    from engine.audio import load_audio
    root = Path(__file__).resolve().parents[2] / "samples" / "speech"
    speech = load_audio(str(root / "gettysburg-en.wav"))[: 16000 * 12]
    rng = np.random.default_rng(4)
    gap = np.zeros(16000 * 2, np.float32)
    paused = np.concatenate([speech[:16000 * 4], gap, speech[16000 * 4:16000 * 8], gap[:8000]])
    return {"speech": speech, "paused": paused, "noise": (rng.standard_normal(16000 * 3) * 0.05).astype(np.float32),
            "silence": np.zeros(16000 * 2 + 100, np.float32)}


def theirs(reference, samples: np.ndarray) -> np.ndarray:
    reference.reset_states()
    with torch.no_grad():
        return reference.audio_forward(torch.from_numpy(samples)[None], 16000)[0].numpy()


@pytest.mark.parametrize("device", engine.available_devices())
def test_probabilities_equal_the_reference(weights, reference, device):
    from engine.tasks.voice_activity import speech_probabilities
    from models.silero_vad import load
    model = load(weights, device)
    for name, samples in recordings().items():
        want, got = theirs(reference, samples), speech_probabilities(model, samples)
        assert got.shape == want.shape == (-(-len(samples) // 512),), name
        np.testing.assert_allclose(got, want, atol=1e-4, err_msg=f"{name} on {device}")
        if name == "speech":
            assert (want > 0.5).mean() > 0.5          # the case is speech, mostly
        if name == "silence":
            assert want.max() < 0.1


def test_with_the_torchscripts_own_tensors_ours_equals_its_stock_output(stock):
    from engine.tasks.voice_activity import speech_probabilities
    from models.silero_vad import load
    tensors = {name: engine.tensor(stock._model.state_dict()[ours].numpy()) for ours, name in NAMES.items()}
    model = load(tensors, "numpy")
    for name, samples in recordings().items():
        np.testing.assert_allclose(speech_probabilities(model, samples), theirs(stock, samples), atol=1e-4,
                                   err_msg=name)


def test_a_stream_gives_what_the_whole_recording_gives(weights):
    """run() over a whole recording, over the same audio cut in random pieces, and step() chunk by
    chunk: the same probabilities (run's batched convolutions sum in another order than one
    chunk's: within 1e-5 of step's)."""
    from engine.tasks.voice_activity import speech_probabilities
    from models.silero_vad import load
    model = load(weights, "numpy")
    samples = recordings()["paused"]
    whole = speech_probabilities(model, samples)
    state, stepped = model.initial_state(), []
    for start in range(0, len(samples) - 511, 512):
        p, state = model.step(samples[None, start:start + 512], state)
        stepped.append(p[0])
    np.testing.assert_allclose(np.array(stepped, np.float32), whole[:len(stepped)], atol=1e-5, rtol=0)
    rng = np.random.default_rng(5)
    cuts = np.sort(rng.integers(1, len(samples) // 512, 12)) * 512
    state, pieces = model.initial_state(), []
    for piece in np.split(samples[:len(samples) // 512 * 512], cuts):
        p, state = model.run(piece, state)
        pieces.append(p)
    np.testing.assert_allclose(np.concatenate(pieces), whole[:len(samples) // 512], atol=1e-6, rtol=0)


def test_segments_equal_the_packages_rules():
    """engine.audio.vad.speech_segments against silero-vad's get_speech_timestamps_from_probs on
    the same probabilities: its defaults, a limit on a segment's length, other thresholds; on
    random walks of probabilities (speech, pauses, flicker) as well as real ones."""
    from engine.audio.vad import Segmenter, speech_segments
    rng = np.random.default_rng(37)
    cases = []
    for _ in range(300):
        n = int(rng.integers(1, 400))
        level = rng.random()
        probs = np.clip(level + np.cumsum(rng.normal(0, 0.15, n)), 0, 1)
        if rng.random() < 0.3:
            probs = rng.random(n)
        samples = n * 512 - int(rng.integers(0, 512))
        cases.append((probs.astype(np.float32).tolist(), samples))
    options = [{}, {"max_speech_duration_s": 3.0}, {"max_speech_duration_s": 1.0, "speech_pad_ms": 0},
               {"threshold": 0.3, "min_silence_duration_ms": 300, "min_speech_duration_ms": 100},
               {"threshold": 0.1, "max_speech_duration_s": 2.0}]
    ours_names = {"threshold": "threshold", "max_speech_duration_s": "max_speech_s", "speech_pad_ms": "speech_pad_ms",
                  "min_silence_duration_ms": "min_silence_ms", "min_speech_duration_ms": "min_speech_ms"}
    for probs, samples in cases:
        for option in options:
            want = silero.get_speech_timestamps_from_probs(probs, audio_length_samples=samples, **option)
            ours = {ours_names[k]: v for k, v in option.items()}
            got = speech_segments(probs, samples, **ours)
            assert got == want, (option, probs, samples)
            segmenter, streamed = Segmenter(**ours), []      # as they come: each once final, the same
            for i, p in enumerate(probs):
                for segment in segmenter.push(p):
                    assert segment["end"] <= 512 * (i + 1)        # never past the audio come so far
                    streamed.append((segment, i))
            streamed += [(segment, len(probs)) for segment in segmenter.finish(samples)]
            assert [segment for segment, _ in streamed] == want


def test_segments_of_real_speech_with_pauses_equal_the_packages(weights, reference):
    """End to end: the model's probabilities, then the segments, against get_speech_timestamps
    on the same audio with the same weights; the inserted 2 s silence separates two segments."""
    from engine.audio.vad import speech_segments
    from engine.tasks.voice_activity import speech_probabilities
    from models.silero_vad import load
    model = load(weights, "numpy")
    samples = recordings()["paused"]
    reference.reset_states()
    want = silero.get_speech_timestamps(torch.from_numpy(samples), reference)
    got = speech_segments(speech_probabilities(model, samples), len(samples))
    assert got == want
    assert any(a["end"] <= 16000 * 4 + 1000 and b["start"] >= 16000 * 6 - 1000 for a, b in zip(got, got[1:])), got
