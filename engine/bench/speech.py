"""`python -m engine bench whisper` and the bench page's speech benchmark: the real-time factor
(processing time / audio duration) of the speech-recognition pipeline per model and backend,
with the encoder's and the decoder's shares, against openai-whisper on torch on the same
weights and audio natively.

The audio is the committed sample `samples/speech/gettysburg-en.wav` (28 s of English spoken by
espeak-ng; the site serves it as `samples/speech/`), or any file given. One untimed run first:
it captures the decode graphs (engine.speech.decoder), as a peer's code is compiled before it
is timed. Greedy decoding with the reference's defaults (temperature fallback, previous text
as the prompt); both sides transcribe the same 16 kHz samples.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from ..sampler import TRAFFIC
from .llm import format_device_step

SAMPLE = "gettysburg-en.wav"
MODELS = ("whisper-tiny.en", "whisper-base")


def sample_path(name: str = SAMPLE) -> Path:
    """A committed speech sample natively: samples/speech/<name> beside the model package."""
    import importlib

    from .. import registry
    root = Path(importlib.import_module(registry.MODEL_PACKAGE).__file__).resolve().parent.parent
    return root / "samples" / "speech" / name


def sentences(audio: np.ndarray, min_pause_s: float = 0.2) -> list[np.ndarray]:
    """The sample's sentences: espeak-ng's audio cut in the middle of its pauses (runs of digital
    silence of at least min_pause_s)."""
    silent = np.abs(audio) < 1e-4
    edges = np.flatnonzero(np.diff(np.concatenate([[0], silent.astype(np.int8), [0]])))
    cuts = [(a + b) // 2 for a, b in zip(edges[::2], edges[1::2])
            if b - a >= min_pause_s * 16000 and 0 < a and b < audio.size]
    return np.split(audio, cuts)


def paused_recording(audio: np.ndarray, seconds: float = 300, pauses: float = 0.45,
                     seed: int = 0) -> tuple[np.ndarray, int]:
    """A recording of about `seconds` whose share `pauses` is silence: the sample's sentences in
    order, each followed by a pause of random length (seeded, 0.5-1.5 times the mean that makes
    that share), through the whole sample as many times as fit. Returns (samples, times through
    the sample): its text is the sample's that many times."""
    rng = np.random.default_rng(seed)
    pieces = sentences(audio)
    cycles = max(1, round(seconds * (1 - pauses) * 16000 / audio.size))
    parts = []
    for _ in range(cycles):
        for piece in pieces:
            mean = piece.size * pauses / (1 - pauses)
            parts += [piece, np.zeros(int(rng.uniform(0.5, 1.5) * mean), np.float32)]
    return np.concatenate(parts), cycles


class _Timed:
    """Counts the seconds a pipeline's model spends in encode() (a device syncs in .numpy()
    later: its time then shows in the decoder's share) and the tokens its decoder is fed."""

    def __init__(self, pipe):
        self.pipe, self.encode_s, self.windows = pipe, 0.0, 0
        model = pipe.model
        encode = type(model).encode

        def timed(mel):
            t0 = time.perf_counter()
            out = encode(model, mel)
            self.encode_s += time.perf_counter() - t0
            self.windows += 1
            return out
        model.encode = timed

    def close(self):
        del self.pipe.model.encode


def run_pipeline(pipe, audio: np.ndarray, repeat: int = 1) -> dict:
    """Seconds, real-time factor, encoder/decoder split and tokens of `repeat` timed runs of a
    speech-recognition pipeline (the median) after one untimed run; repeat 0: that one run
    (graph captures included), for long audio whose memory, not speed, is measured."""
    seconds = audio.size / 16000
    runs = []
    timed = _Timed(pipe)
    traffic = pipe.session(pipe.model).traffic
    try:
        for _ in range(repeat + 1):
            timed.encode_s, timed.windows = 0.0, 0
            traffic.clear()                        # a device's decode steps: this run's
            t0 = time.perf_counter()
            result = pipe(audio)
            total = time.perf_counter() - t0
            tokens = sum(len(s.get("tokens", ())) for s in result["segments"])
            runs.append({"seconds": total, "encode_s": timed.encode_s, "windows": timed.windows,
                         "tokens": tokens, "text": result["text"]})
    finally:
        timed.close()
    runs = runs[1:] if repeat else runs
    total = statistics.median(r["seconds"] for r in runs)
    encode = statistics.median(r["encode_s"] for r in runs)
    tokens = runs[0]["tokens"]
    decode = max(total - encode, 1e-9)
    return {"audio_s": round(seconds, 3), "seconds": round(total, 3), "real_time_factor": round(total / seconds, 4),
            "encode_s": round(encode, 3), "decode_s": round(decode, 3), "windows": runs[0]["windows"],
            "tokens": tokens, "decode_tok_s": round(tokens / decode, 1), "text": runs[0]["text"],
            "graphs": pipe.session(pipe.model).captured,
            "device_step": {k: round(traffic[k] / traffic["steps"], 3) for k in TRAFFIC}
            if traffic.get("steps") else None}


def run_reference(folder: Path, config, audio: np.ndarray, english: bool, repeat: int = 1) -> dict:
    """openai-whisper's transcribe() on torch (its default threads), on the same site weights
    widened to float32 (`config`: our model's dimensions, named as openai-whisper's), greedy with
    its default temperature fallback."""
    import dataclasses

    import torch
    import whisper

    from ..formats.safetensors import load_safetensors
    tensors = load_safetensors(folder / "model.safetensors.index.json")
    state = {k: torch.from_numpy(tensors[k].numpy().astype(np.float32)) for k in tensors}
    dims = whisper.model.ModelDimensions(**dataclasses.asdict(config))
    model = whisper.model.Whisper(dims).eval()
    model.load_state_dict(state)
    runs = []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        with torch.no_grad():
            result = whisper.transcribe(model, audio, fp16=False, language="en" if english else None)
        runs.append((time.perf_counter() - t0, result["text"]))
    total = statistics.median(s for s, _ in runs[1:])
    return {"seconds": round(total, 3), "real_time_factor": round(total / (audio.size / 16000), 4),
            "threads": torch.get_num_threads(), "text": runs[-1][1]}


def bench_whisper(devices, models=MODELS, audio_path=None, repeat: int = 1, reference: bool = True) -> dict:
    """Per model: ours per backend and openai-whisper on torch, on one audio file."""
    from .. import registry
    from ..audio import load_audio
    from ..tasks import pipeline
    path = Path(audio_path) if audio_path else sample_path()
    audio = load_audio(path)
    out = {"audio": path.name, "audio_s": round(audio.size / 16000, 3), "models": {}}
    for name in models:
        row = {}
        for device in devices:
            pipe = pipeline("speech-recognition", device=device, model=name)
            row[device] = run_pipeline(pipe, audio, repeat)
        if reference:
            folder = Path(registry.default_location(registry.model(name))).parent
            ref = run_reference(folder, pipe.model.config, audio, name.endswith(".en"), repeat)
            for device in devices:
                row[device]["vs_torch"] = round(ref["seconds"] / row[device]["seconds"], 2)
                row[device]["same_text_as_torch"] = row[device]["text"] == ref["text"]
            row["torch"] = ref
        out["models"][name] = row
    return out


def bench_vad(devices, models=MODELS, repeat: int = 1, seconds: float = 300, pauses: float = 0.45) -> dict:
    """Transcription of a recording of about `seconds` with the share `pauses` of silence (the
    sample's sentences with pauses between them, paused_recording), with and without vad=True,
    per model and backend: interleaved rounds after an untimed one of each, the medians; the word
    error rate of each against the sample's text (as many times as the recording holds it) and
    of the VAD's transcript against the plain one's segments on the speech (what plain made of
    the pauses left out), and the encoder passes (windows) of each."""
    import json

    from ..audio import load_audio
    from ..speech.metrics import text_within, word_error_rate
    from ..tasks import pipeline
    sample = load_audio(sample_path())
    audio, cycles = paused_recording(sample, seconds, pauses)
    text = json.loads(sample_path("samples.json").read_text())[0]["text"]
    truth = " ".join([text] * cycles)
    out = {"audio_s": round(audio.size / 16000, 3), "pauses": round(1 - cycles * sample.size / audio.size, 3),
           "models": {}}
    for name in models:
        row = {}
        for device in devices:
            pipe = pipeline("speech-recognition", device=device, model=name)
            times: dict = {False: [], True: []}
            results, windows = {}, {}
            timed = _Timed(pipe)
            try:
                for round_ in range(repeat + 1):
                    for vad in (False, True):
                        timed.windows = 0
                        t0 = time.perf_counter()
                        results[vad] = pipe(audio, vad=vad)
                        if round_:
                            times[vad].append(time.perf_counter() - t0)
                        windows[vad] = timed.windows
            finally:
                timed.close()
            plain, vad = statistics.median(times[False]), statistics.median(times[True])
            on_speech = text_within(results[False]["segments"], results[True]["speech"])
            row[device] = {"plain_s": round(plain, 3), "vad_s": round(vad, 3), "speedup": round(plain / vad, 2),
                           "windows_plain": windows[False], "windows_vad": windows[True],
                           "wer_plain": round(word_error_rate(truth, results[False]["text"]), 4),
                           "wer_vad": round(word_error_rate(truth, results[True]["text"]), 4),
                           "wer_vad_vs_plain": round(word_error_rate(on_speech, results[True]["text"]), 4)}
        out["models"][name] = row
    return out


def format_vad(result: dict) -> str:
    lines = [f"speech recognition of {result['audio_s']} s with {result['pauses']:.0%} pauses, without and with "
             f"vad=True; WER against the spoken text",
             f"{'model':>16} {'backend':>8} {'plain s':>8} {'vad s':>8} {'speedup':>8} {'windows':>8} "
             f"{'WER plain':>10} {'WER vad':>8} {'vad vs plain':>12}"]
    for name, row in result["models"].items():
        for device, r in row.items():
            lines.append(f"{name:>16} {device:>8} {r['plain_s']:8.2f} {r['vad_s']:8.2f} {r['speedup']:7.2f}x "
                         f"{r['windows_plain']:>3} / {r['windows_vad']:<2} {r['wer_plain']:10.3f} {r['wer_vad']:8.3f} "
                         f"{r['wer_vad_vs_plain']:12.3f}")
    return "\n".join(lines)


def profile_model(pipe, audio: np.ndarray) -> list[str]:
    """The time per kernel of one encoder pass over the audio's first window and of one eager
    decode step (engine.bench.profile), as table lines."""
    from ..audio import log_mel_spectrogram, pad_or_trim
    from ..dtypes import int64
    from ..tensor import tensor
    from . import format_profile, profile
    model = pipe.model
    mel = log_mel_spectrogram(pad_or_trim(audio), model.config.n_mels)
    lines = format_profile(profile(model, None, pipe.device, repeat=1, forward=lambda: model.encode(mel).numpy()),
                           "encoder")
    features = model.encode(mel)
    cache, cross = model.new_cache(), model.cross_attention(features)
    ids, positions = tensor([[440]], dtype=int64, device=pipe.device), tensor([3], dtype=int64, device=pipe.device)
    step = profile(model, None, pipe.device, repeat=3,
                   forward=lambda: model.decoder(ids, positions, cache, cross, window=64).numpy())
    return lines + format_profile(step, "decode step (eager)")


def format_whisper(result: dict) -> str:
    lines = [f"speech recognition of {result['audio']} ({result['audio_s']} s), greedy; real-time factor = "
             f"seconds / audio seconds (lower is faster)",
             f"{'model':>16} {'backend':>8} {'seconds':>8} {'RTF':>7} {'encoder':>8} {'decoder':>8} {'tokens':>6} "
             f"{'tok/s':>6} {'vs torch':>8} same text"]
    for name, row in result["models"].items():
        for device, r in row.items():
            if device == "torch":
                lines.append(f"{name:>16} {'torch':>8} {r['seconds']:8.2f} {r['real_time_factor']:7.3f} "
                             f"{'':>8} {'':>8} {'':>6} {'':>6} {'1.00':>8} ({r['threads']} threads)")
                continue
            lines.append(f"{name:>16} {device:>8} {r['seconds']:8.2f} {r['real_time_factor']:7.3f} "
                         f"{r['encode_s']:8.2f} {r['decode_s']:8.2f} {r['tokens']:6d} {r['decode_tok_s']:6.1f} "
                         f"{r.get('vs_torch', ''):>8} {r.get('same_text_as_torch', '')}")
    for name, row in result["models"].items():
        for device, r in row.items():
            lines += format_device_step(f"{name} {device}", r.get("device_step"))
    return "\n".join(lines)
