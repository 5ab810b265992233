"""Word timestamps (engine.speech.timing) against openai-whisper 20250625's (whisper/timing.py):
DTW against a recursive dynamic programme and every path, the median filter against NumPy's
median, word splits and punctuation merges against the reference's on the same tokens, the
cross-attention scores against torch's (a random config on every backend, the real tiny.en),
and whole transcriptions with word_timestamps=True against the reference's on espeak-ng speech:
the same words, their start and end within 0.1 s."""
from __future__ import annotations

import functools
import itertools
import json

import numpy as np
import pytest

from engine.errors import InputError
from engine.speech import SpeechTokenizer, transcribe, write
from engine.speech.timing import (
    WordTiming,
    alignment_matrix,
    dtw,
    median_filter,
    merge_punctuations,
    split_to_word_tokens,
)
from tests.helpers import need_import

TOLERANCE_S = 0.1                              # a word's start and end against the reference's
SHARE = 0.95                                   # of the words, at least


# --- DTW and the median filter ----------------------------------------------------------------------
def recursive_dtw(x: np.ndarray):
    """The reference's recurrence written as recursion: float32 costs, a predecessor taken only
    when strictly cheaper than both others (diagonal, above), else the left one."""
    n, m = x.shape

    @functools.cache
    def cell(i, j):
        if i == 0 and j == 0:
            return np.float32(0), None
        if i == 0 or j == 0:
            return np.float32(np.inf), None
        c = (cell(i - 1, j - 1)[0], cell(i - 1, j)[0], cell(i, j - 1)[0])
        step = 0 if c[0] < c[1] and c[0] < c[2] else 1 if c[1] < c[0] and c[1] < c[2] else 2
        return np.float32(np.float64(x[i - 1, j - 1]) + np.float64(c[step])), step

    path, i, j = [], n, m
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        step = cell(i, j)[1]
        i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
    return tuple(np.array(path[::-1]).T)


def every_path(n: int, m: int):
    """Every monotonic path of single steps from (0, 0) to (n-1, m-1)."""
    if (n, m) == (1, 1):
        yield [(0, 0)]
        return
    for di, dj in ((1, 1), (1, 0), (0, 1)):
        if n - di >= 1 and m - dj >= 1:
            for path in every_path(n - di, m - dj):
                yield path + [(n - 1, m - 1)]


@pytest.mark.parametrize("shape", [(1, 1), (1, 6), (6, 1), (3, 4), (7, 9), (12, 10), (20, 60)])
def test_dtw_equals_a_recursive_programme(shape):
    rng = np.random.default_rng(sum(shape))
    for x in (rng.standard_normal(shape), rng.integers(0, 3, shape).astype(np.float64)):   # ties too
        rows, columns = dtw(x)
        want_rows, want_columns = recursive_dtw(x)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_array_equal(columns, want_columns)


@pytest.mark.parametrize("shape", [(2, 3), (4, 4), (3, 6)])
def test_dtw_path_is_the_cheapest_of_all(shape):
    x = np.random.default_rng(7).standard_normal(shape)
    rows, columns = dtw(x)
    best = min(sum(x[i, j] for i, j in path) for path in every_path(*shape))
    assert x[rows, columns].sum() == pytest.approx(best, abs=1e-5)
    assert (rows[0], columns[0], rows[-1], columns[-1]) == (0, 0, shape[0] - 1, shape[1] - 1)
    assert set(np.diff(rows)) <= {0, 1} and set(np.diff(columns)) <= {0, 1}


def test_median_filter_equals_numpy_median():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 40)).astype(np.float32)
    padded = np.concatenate([x[..., 3:0:-1], x, x[..., -2:-5:-1]], axis=-1)        # reflected ends
    want = np.stack([np.median(padded[..., t:t + 7], axis=-1) for t in range(40)], axis=-1)
    np.testing.assert_array_equal(median_filter(x, 7), want)
    short = x[..., :3]                                                              # no longer than 7 // 2
    assert median_filter(short, 7) is short
    np.testing.assert_array_equal(median_filter(x, 1), x)


def test_bad_inputs_raise_input_errors():
    with pytest.raises(InputError, match="non-empty"):
        dtw(np.zeros((0, 4)))
    with pytest.raises(InputError, match="odd"):
        median_filter(np.zeros((2, 9)), 4)
    with pytest.raises(InputError, match="highlight_words"):
        write({"segments": []}, "srt", highlight_words="yes")
    with pytest.raises(InputError, match="max_line_width"):
        write({"segments": []}, "vtt", max_line_width=0)


def test_transcribe_checks_the_word_options():
    from types import SimpleNamespace

    from tests.speech.test_segments import TOKENIZER
    model = SimpleNamespace(config=SimpleNamespace(n_mels=80, n_text_ctx=448, n_audio_ctx=1500, n_text_layer=4,
                                                   n_text_head=6))
    mel = np.zeros((80, 3100), np.float32)
    for options, field in (({"word_timestamps": "yes"}, "word_timestamps"),
                           ({"word_timestamps": True, "alignment_heads": [(4, 0)]}, "alignment_heads"),
                           ({"word_timestamps": True, "alignment_heads": ["x"]}, "alignment_heads"),
                           ({"word_timestamps": True, "append_punctuations": None}, "append_punctuations"),
                           ({"word_timestamps": True}, "attention")):
        with pytest.raises(InputError, match=field):
            transcribe(model, TOKENIZER, mel=mel, session=object(), **options)


# --- against the reference's steps -----------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizers():
    """(openai-whisper's multilingual tokenizer module, our SpeechTokenizer of base)."""
    need_import("torch")
    reference = need_import("whisper.tokenizer", "openai-whisper (pip install --no-deps openai-whisper)")
    from models.whisper import Config
    from tests.whisper_files import processor_file
    ours = SpeechTokenizer.from_json(processor_file("base", "tokenizer.json"), Config(),
                                     json.loads(processor_file("base", "config.json")))
    return reference, ours


TEXTS = {"en": " Hello, world! It's 4:30 (or so) - \"quoted\" words... and ¿qué?",
         "fr": " L'été, c'est « magnifique » : n'est-ce pas ?",
         "ja": " 今日は、いい天気ですね。",
         "zh": " 我们今天去公园吧！"}


@pytest.mark.slow                              # the reference imports torch
@pytest.mark.parametrize("language", sorted(TEXTS))
def test_words_split_as_the_reference_splits_them(tokenizers, language):
    reference, ours = tokenizers
    tokenizer = reference.get_tokenizer(multilingual=True, language=language, task="transcribe")
    tokens = tokenizer.encode(TEXTS[language]) + [tokenizer.eot]
    assert ours.specials.eot == tokenizer.eot
    assert split_to_word_tokens(tokens, ours, language) == tokenizer.split_to_word_tokens(tokens)


@pytest.mark.slow
def test_punctuation_merges_as_the_reference():
    timing = need_import("whisper.timing", "openai-whisper (pip install --no-deps openai-whisper)")
    rng = np.random.default_rng(0)
    pieces = [" the", " word", "s", ",", ".", " (", ")", " \"", "\"", " ¿", "?", " -", "”", "、", " ", ""]
    for _ in range(300):
        words = list(rng.choice(pieces, size=int(rng.integers(1, 9))))
        ours = [WordTiming(w, [i], i, i + 1, 0.5) for i, w in enumerate(words)]
        theirs = [timing.WordTiming(w, [i], i, i + 1, 0.5) for i, w in enumerate(words)]
        merge_punctuations(ours, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        timing.merge_punctuations(theirs, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        assert [(w.word, w.tokens) for w in ours] == [(w.word, w.tokens) for w in theirs]


def reference_scores(model, mel: np.ndarray, tokens: list[int], heads) -> tuple[np.ndarray, np.ndarray]:
    """openai-whisper's logits (T, vocab) and cross-attention scores (heads, T, ctx) of one pass,
    read by its own hooks, as its find_alignment reads them."""
    torch = need_import("torch")
    from whisper.model import disable_sdpa
    scores = [None] * len(model.decoder.blocks)
    hooks = [block.cross_attn.register_forward_hook(lambda _, ins, outs, i=i: scores.__setitem__(i, outs[-1][0]))
             for i, block in enumerate(model.decoder.blocks)]
    try:
        with torch.no_grad(), disable_sdpa():
            logits = model(torch.from_numpy(mel[None]), torch.tensor([tokens]))[0].numpy()
    finally:
        for hook in hooks:
            hook.remove()
    return logits, np.stack([scores[layer][head].numpy() for layer, head in heads])


@pytest.mark.slow                              # torch, and a model on each backend
def test_attention_scores_equal_torch_on_every_backend():
    import engine
    from engine.speech.decoder import DecoderSession
    need_import("torch")
    need_import("whisper", "openai-whisper (pip install --no-deps openai-whisper)")
    from tests.models.test_whisper import TINY, ours, reference_model, state_of
    reference = reference_model(TINY)
    mel = np.random.default_rng(5).standard_normal((TINY.n_mels, 2 * TINY.n_audio_ctx)).astype(np.float32)
    tokens = [50258, 50259, 50359, 50363, 1012, 345, 11, 400, 50257]
    heads = ((0, 1), (1, 0), (1, 1))
    want_logits, want = reference_scores(reference, mel, tokens, heads)
    for device in engine.available_devices():
        model = ours(state_of(reference), device)
        session = DecoderSession(model)
        session.set_audio(model.encode(mel))
        session.feed(tokens[:4])
        before = [session.feed([t])[0] for t in tokens[4:7]]                 # decode steps, captured
        logits, scores = session.attention(tokens, heads, rows=(3, 4, 5))
        np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-4, err_msg=device)
        np.testing.assert_allclose(logits, want_logits[3:6], rtol=1e-4, atol=1e-4, err_msg=device)
        assert session.length == 0
        session.feed(tokens[:4])                                            # decoding as before
        after = [session.feed([t])[0] for t in tokens[4:7]]
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5, err_msg=device)
        with pytest.raises(InputError, match="alignment heads"):
            session.attention(tokens, ((2, 0),))


# --- the real weights ---------------------------------------------------------------------------------
ENGLISH = "The quick brown fox jumps over the lazy dog. It was a sunny day in the park."
PAUSED = ("Please wait for the signal.", "Now we begin the test.", "The results will follow shortly after the break.")
PAUSES_S = (1.0, 2.5, 4.0, 1.0)                 # before each sentence, and after the last


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Short speech, speech over two windows, and sentences between pauses (float32, 16 kHz)."""
    from engine.audio import load_audio
    from tests.audio.clips import speak
    from tests.speech.test_decoding import LONG
    folder = tmp_path_factory.mktemp("words")
    parts = []
    for i, (pause, text) in enumerate(zip(PAUSES_S, PAUSED)):
        parts += [np.zeros(int(16000 * pause), np.float32), load_audio(speak(text, folder / f"paused{i}.wav"))]
    return {"short": load_audio(speak(ENGLISH, folder / "short.wav")),
            "long": load_audio(speak(LONG, folder / "long.wav")),
            "paused": np.concatenate(parts + [np.zeros(int(16000 * PAUSES_S[-1]), np.float32)])}


@pytest.fixture(scope="module")
def pipelines(whisper_folder):
    import engine
    return functools.cache(lambda which: engine.pipeline(
        "speech-recognition", model=f"whisper-{which}", weights=str(whisper_folder(f"whisper-{which}")
                                                                    / "model.safetensors.index.json")))


def openai_words(which: str, audio: np.ndarray) -> dict:
    torch = need_import("torch")
    whisper = need_import("whisper", "openai-whisper (pip install --no-deps openai-whisper)")
    from tests.speech.reference import openai_model
    model = openai_model(which)
    model.set_alignment_heads(whisper._ALIGNMENT_HEADS[which])
    with torch.no_grad():
        return whisper.transcribe(model, torch.from_numpy(audio), temperature=0.0, fp16=False, verbose=None,
                                  word_timestamps=True)


@pytest.mark.slow
def test_real_attention_scores_equal_torch(pipelines, clips):
    import engine.audio
    from engine.speech.decoder import DecoderSession
    from tests.speech.reference import openai_model
    pipe = pipelines("tiny.en")
    heads = pipe.model.alignment_heads
    mel = engine.audio.log_mel_spectrogram(engine.audio.pad_or_trim(clips["short"]), 80)
    s = pipe.tokenizer.specials
    tokens = [s.sot, s.no_timestamps, *pipe.tokenizer.encode(" " + ENGLISH), s.eot]
    want_logits, want = reference_scores(openai_model("tiny.en"), mel, tokens, heads)
    session = DecoderSession(pipe.model)
    session.set_audio(pipe.model.encode(mel))
    logits, scores = session.attention(tokens, heads, rows=tuple(range(len(tokens))))
    np.testing.assert_allclose(scores, want, rtol=0, atol=2e-3 * np.abs(want).max())
    np.testing.assert_allclose(logits, want_logits, rtol=0, atol=2e-3 * np.abs(want_logits).max())
    frames = 2 * 225                                                              # 4.5 s of audio
    np.testing.assert_allclose(alignment_matrix(scores, frames), alignment_matrix(want, frames), atol=2e-2)


@pytest.mark.slow
@pytest.mark.parametrize("which, clip", list(itertools.product(["tiny.en", "base"], ["short", "long", "paused"])))
def test_words_equal_openai_whisper(pipelines, clips, which, clip):
    expected = openai_words(which, clips[clip])
    got = pipelines(which)(clips[clip], temperature=0.0, word_timestamps=True)
    assert [s["text"] for s in got["segments"]] == [s["text"] for s in expected["segments"]]
    ours = [w for s in got["segments"] for w in s["words"]]
    theirs = [w for s in expected["segments"] for w in s["words"]]
    assert [w["word"] for w in ours] == [w["word"] for w in theirs]
    near = [abs(a["start"] - b["start"]) <= TOLERANCE_S + 1e-9 and abs(a["end"] - b["end"]) <= TOLERANCE_S + 1e-9
            for a, b in zip(ours, theirs)]
    share = sum(near) / len(near)
    print(f"{which} {clip}: {sum(near)}/{len(near)} words within {TOLERANCE_S} s ({share:.1%}), "
          f"{sum((a['start'], a['end']) == (b['start'], b['end']) for a, b in zip(ours, theirs))} to the 0.01 s")
    assert share >= SHARE
    assert [w["probability"] for w in ours] == pytest.approx([w["probability"] for w in theirs], abs=5e-3)
    for a, b in zip(got["segments"], expected["segments"]):
        assert (a["start"], a["end"]) == pytest.approx((b["start"], b["end"]), abs=TOLERANCE_S)
    if clip == "long":
        assert got["segments"][-1]["end"] > 30
    if clip == "short":                         # subtitles of the words, as openai-whisper writes them
        import io

        from whisper.utils import WriteVTT
        out = io.StringIO()
        WriteVTT(".").write_result(got, out, highlight_words=True)
        assert write(got, "vtt", highlight_words=True) == out.getvalue()
