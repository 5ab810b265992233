"""Word-level timestamps of a Whisper transcript, from the cross-attention of the decoder's
alignment heads aligned to the audio by dynamic time warping.

    add_word_timestamps(segments, session, tokenizer, heads=model.alignment_heads, language="en",
                        num_frames=3000, last_speech_timestamp=0.0)
    segments[0]["words"]        # [{"word": " Hello", "start": 0.3, "end": 0.62, "probability": 0.97}, ...]

Facts taken from OpenAI's reference (openai-whisper 20250625: whisper/timing.py, the tokenizer's
split_to_word_tokens in whisper/tokenizer.py):

- One forward pass of the decoder over [sot sequence, <|notimestamps|>, the window's text tokens,
  <|endoftext|>] with the window's audio. A word's probability is the mean of its tokens'
  probabilities, each the softmax over the text tokens (ids below <|endoftext|>) of the logits at
  the position before it.
- The alignment heads' cross-attention scores q k^T / sqrt(d), cut to the window's audio
  positions (num_frames // 2, 20 ms each), softmax over them; standardised per head along the
  tokens (mean, standard deviation without Bessel's correction); a median filter of width 7
  along time (ends reflected); the mean over heads; the rows from <|notimestamps|> to the last
  text token. Dynamic time warping over its negation gives each row's first audio position.
- Words: tokens grouped where they decode to whole characters; in languages written with spaces
  a group starting with a space or made of punctuation starts a new word, the others join the
  word before. Word k (its tokens from i to j) starts at the first position of row i and ends
  at that of row j.
- Durations: the median of the nonzero word durations, at most 0.7 s; a sentence-ending mark, or
  the word after one, lasts at most twice that. Punctuation from prepend_punctuations joins the
  next word, from append_punctuations the previous one (keeping that word's times).
- Per segment, words rounded to 0.01 s: after a pause (more than 4 median durations since the
  last speech), a first word or first two words longer than the limit are cut; the segment's
  start and end become its first word's start and last word's end, unless they lie more than
  0.5 s inside that word, where the word is cut to the segment's time instead.

Every step is in NumPy (the reference uses torch and numba); DTW runs one anti-diagonal at a time.
"""
from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from ..audio import HOP_LENGTH, SAMPLE_RATE
from ..errors import InputError

TOKENS_PER_SECOND = SAMPLE_RATE // (2 * HOP_LENGTH)       # audio positions per second: 50 (20 ms each)
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
SENTENCE_END_MARKS = ".。!！?？"
UNSPACED_LANGUAGES = ("zh", "ja", "th", "lo", "my", "yue")   # words split where characters end
MEDIAN_FILTER_WIDTH = 7


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float                # seconds from the window's start
    end: float
    probability: float


# --- the numerical steps --------------------------------------------------------------------------
def default_alignment_heads(n_layer: int, n_head: int) -> tuple[tuple[int, int], ...]:
    """The reference's alignment heads for a checkpoint it lists none for: every head of the
    second half of the decoder's layers."""
    return tuple((layer, head) for layer in range(n_layer // 2, n_layer) for head in range(n_head))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """In x's own precision (float32, as the reference)."""
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """The median of each `width` values along the last axis, the ends reflected (the edge value
    not repeated, as torch's and NumPy's "reflect"); x as it is when that axis holds no more than
    width // 2 values. NaN counts as the largest value, as in torch's sort."""
    if width <= 0 or width % 2 == 0:
        raise InputError(f"the median filter's width must be a positive odd number, got {width}")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")    # (..., T + 2 pad)
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)    # (..., T, width)
    return np.partition(windows, pad, axis=-1)[..., pad]                           # (..., T)


def dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through the cost matrix x (N, M), from (0, 0) to (N-1, M-1) by
    steps down, right or diagonal: (rows, columns) of its cells, in order.

    As the reference: the accumulated costs are float32 (each x[i, j] + the best predecessor
    summed in float64), and a predecessor wins only when strictly cheaper than both others (the
    diagonal, then the cell above), else the cell to the left. Cell (i, j) of the (N+1, M+1)
    table needs cells of the two anti-diagonals before its own, so each anti-diagonal is one
    vectorised step: N + M steps of O(N) work."""
    x = np.asarray(x, np.float64)
    n, m = x.shape
    if n == 0 or m == 0:
        raise InputError(f"dtw needs a non-empty cost matrix, got shape {x.shape}")
    # table[i, j] is held at diagonals[i + j, i]; row 0 and column 0 stay infinite but (0, 0)
    cost = np.full((n + m + 1, n + 1), np.inf, np.float32)
    step = np.zeros((n + m + 1, n + 1), np.int8)                   # 0 diagonal, 1 from above, 2 from the left
    cost[0, 0] = 0
    for k in range(2, n + m + 1):
        lo, hi = max(1, k - m), min(n, k - 1)                       # rows i of diagonal k with 1 <= j = k - i <= m
        i = np.arange(lo, hi + 1)
        diagonal, above, left = cost[k - 2, lo - 1:hi], cost[k - 1, lo - 1:hi], cost[k - 1, lo:hi + 1]
        choice = np.where((diagonal < above) & (diagonal < left), 0,
                          np.where((above < diagonal) & (above < left), 1, 2))
        best = np.where(choice == 0, diagonal, np.where(choice == 1, above, left))
        cost[k, lo:hi + 1] = x[i - 1, k - i - 1] + best
        step[k, lo:hi + 1] = choice
    return _backtrace(step, n, m)


def _backtrace(step: np.ndarray, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = n, m
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        s = 2 if i == 0 else 1 if j == 0 else step[i + j, i]
        if s != 2:
            i -= 1
        if s != 1:
            j -= 1
    rows, columns = np.array(path[::-1], np.int64).T
    return rows, columns


def alignment_matrix(scores: np.ndarray, frames: int, width: int = MEDIAN_FILTER_WIDTH) -> np.ndarray:
    """The heads' cross-attention scores (H, T, ctx) -> (T, frames): softmax over the first
    `frames` audio positions, standardised per head along the tokens, median-filtered along time,
    averaged over the heads."""
    weights = softmax(np.asarray(scores, np.float32)[:, :, :frames])               # (H, T, F)
    mean = weights.mean(axis=-2, keepdims=True)                                    # (H, 1, F)
    std = weights.std(axis=-2, keepdims=True)                                      # (H, 1, F)
    with np.errstate(divide="ignore", invalid="ignore"):
        weights = (weights - mean) / std                                           # (H, T, F)
    return median_filter(weights, width).mean(axis=0)                              # (T, F)


# --- words ----------------------------------------------------------------------------------------
def _decoder(tokenizer):
    """ids -> text: the text tokens by the tokenizer (bytes that end mid-character as U+FFFD),
    a special token (only <|endoftext|> is given, last) as a marker after them."""
    eot = tokenizer.specials.eot

    def decode(ids) -> str:
        return tokenizer.decode([t for t in ids if t < eot]) + "".join("<|endoftext|>" for t in ids if t >= eot)
    return decode


def split_tokens_on_unicode(tokens: list[int], decode) -> tuple[list[str], list[list[int]]]:
    """Tokens grouped so that each group decodes to whole characters: a group ends where its text
    has no U+FFFD, or where the whole text has one at the same place (a real replacement
    character)."""
    whole = decode(tokens)
    words, groups, current, offset = [], [], [], 0
    for token in tokens:
        current.append(token)
        text = decode(current)
        bad = text.find("\ufffd")
        if bad < 0 or (offset + bad < len(whole) and whole[offset + bad] == "\ufffd"):
            words.append(text)
            groups.append(current)
            current = []
            offset += len(text)
    return words, groups


def split_tokens_on_spaces(tokens: list[int], decode, eot: int) -> tuple[list[str], list[list[int]]]:
    """Whole-character groups joined into words: a special token, a group starting with a space
    or one that is punctuation (its stripped text found in string.punctuation) starts a word."""
    words, groups = [], []
    for text, group in zip(*split_tokens_on_unicode(tokens, decode)):
        if group[0] >= eot or text.startswith(" ") or text.strip() in string.punctuation or not words:
            words.append(text)
            groups.append(list(group))
        else:
            words[-1] += text
            groups[-1].extend(group)
    return words, groups


def split_to_word_tokens(tokens: list[int], tokenizer, language: str) -> tuple[list[str], list[list[int]]]:
    """The words of `tokens` and each word's tokens, as Whisper's tokenizer splits them."""
    decode = _decoder(tokenizer)
    if language in UNSPACED_LANGUAGES:
        return split_tokens_on_unicode(tokens, decode)
    return split_tokens_on_spaces(tokens, decode, tokenizer.specials.eot)


def find_alignment(session, tokenizer, text_tokens: list[int], num_frames: int, *, heads, language: str,
                   task: str = "transcribe", width: int = MEDIAN_FILTER_WIDTH) -> list[WordTiming]:
    """The words of one window's text tokens with their times (seconds from the window's start)
    and probabilities. session: the window's engine.speech.decoder.DecoderSession (its audio
    set); num_frames: the window's mel frames (its audio positions are half as many)."""
    if not text_tokens:
        return []
    s = tokenizer.specials
    sot_sequence = s.sot_sequence(language, task)
    first, n = len(sot_sequence), len(text_tokens)
    tokens = [*sot_sequence, s.no_timestamps, *text_tokens, s.eot]
    logits, scores = session.attention(tokens, heads, rows=tuple(range(first, first + n)))   # (n, V), (H, T, ctx)
    probs = softmax(np.asarray(logits, np.float32)[:, :s.eot])                    # (n, eot)
    token_probs = probs[np.arange(n), text_tokens].astype(np.float64)             # (n,)

    frames = max(num_frames // 2, 1)                 # a window of one mel frame: its one position
    matrix = alignment_matrix(scores, frames, width)[first:-1]                    # (n + 1, F)
    text_indices, time_indices = dtw(-matrix)

    words, word_tokens = split_to_word_tokens(text_tokens + [s.eot], tokenizer, language)
    if len(word_tokens) <= 1:                        # <|endoftext|> alone
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = time_indices[jumps] / TOKENS_PER_SECOND                          # (n + 1,) each row's start
    return [WordTiming(word, tokens, float(jump_times[i]), float(jump_times[j]), float(np.mean(token_probs[i:j])))
            for word, tokens, i, j in zip(words, word_tokens, boundaries[:-1], boundaries[1:])]


def merge_punctuations(alignment: list[WordTiming], prepended: str, appended: str) -> None:
    """Opening marks joined to the word after them, closing marks to the word before (the mark's
    entry left empty, with no tokens), in place."""
    following = len(alignment) - 1
    for i in range(len(alignment) - 2, -1, -1):
        previous, after = alignment[i], alignment[following]
        if previous.word.startswith(" ") and previous.word.strip() in prepended:
            after.word, after.tokens = previous.word + after.word, previous.tokens + after.tokens
            previous.word, previous.tokens = "", []
        else:
            following = i
    previous = 0
    for j in range(1, len(alignment)):
        before, mark = alignment[previous], alignment[j]
        if not before.word.endswith(" ") and mark.word in appended:
            before.word, before.tokens = before.word + mark.word, before.tokens + mark.tokens
            mark.word, mark.tokens = "", []
        else:
            previous = j


# --- a window's segments --------------------------------------------------------------------------
def _clamp_sentence_ends(alignment: list[WordTiming], max_duration: float) -> None:
    """A sentence-ending mark lasts at most max_duration, and so does the word after one."""
    for i in range(1, len(alignment)):
        word = alignment[i]
        if word.end - word.start > max_duration:
            if word.word in SENTENCE_END_MARKS:
                word.end = word.start + max_duration
            elif alignment[i - 1].word in SENTENCE_END_MARKS:
                word.start = word.end - max_duration


def _fit_segment(segment: dict, words: list[dict], median_duration: float, max_duration: float,
                 last_speech_timestamp: float) -> None:
    """The first words after a pause cut to max_duration; the segment's start and end taken
    from its words, or the words cut to them where they run more than 0.5 s past them."""
    first = words[0]
    if first["end"] - last_speech_timestamp > median_duration * 4 and (
            first["end"] - first["start"] > max_duration
            or (len(words) > 1 and words[1]["end"] - first["start"] > max_duration * 2)):
        if len(words) > 1 and words[1]["end"] - words[1]["start"] > max_duration:
            boundary = max(words[1]["end"] / 2, words[1]["end"] - max_duration)
            first["end"] = words[1]["start"] = boundary
        first["start"] = max(0, first["end"] - max_duration)
    if segment["start"] < first["end"] and segment["start"] - 0.5 > first["start"]:
        first["start"] = max(0, min(first["end"] - median_duration, segment["start"]))
    else:
        segment["start"] = first["start"]
    last = words[-1]
    if segment["end"] > last["start"] and segment["end"] + 0.5 < last["end"]:
        last["end"] = max(last["start"] + median_duration, segment["end"])
    else:
        segment["end"] = last["end"]


def add_word_timestamps(segments: list[dict], session, tokenizer, *, heads, language: str, num_frames: int,
                        last_speech_timestamp: float, task: str = "transcribe",
                        prepend_punctuations: str = PREPEND_PUNCTUATIONS,
                        append_punctuations: str = APPEND_PUNCTUATIONS,
                        width: int = MEDIAN_FILTER_WIDTH) -> None:
    """Give each of one window's segments (transcribe's, with "seek", "start", "end", "tokens")
    its "words": [{"word", "start", "end", "probability"}], times in seconds from the audio's
    start, and move the segments' start and end to their words'. last_speech_timestamp: where
    the speech before this window ended (seconds)."""
    if not segments:
        return
    eot = tokenizer.specials.eot
    text_tokens = [[t for t in segment["tokens"] if t < eot] for segment in segments]
    alignment = find_alignment(session, tokenizer, [t for part in text_tokens for t in part], num_frames,
                               heads=heads, language=language, task=task, width=width)
    durations = np.array([w.end - w.start for w in alignment])
    durations = durations[durations.nonzero()]
    median_duration = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    max_duration = median_duration * 2
    if len(durations):
        _clamp_sentence_ends(alignment, max_duration)
    merge_punctuations(alignment, prepend_punctuations, append_punctuations)

    time_offset = segments[0]["seek"] * HOP_LENGTH / SAMPLE_RATE
    index = 0
    for segment, tokens in zip(segments, text_tokens):
        words, taken = [], 0
        while index < len(alignment) and taken < len(tokens):
            timing = alignment[index]
            if timing.word:
                words.append({"word": timing.word, "start": float(np.round(time_offset + timing.start, 2)),
                              "end": float(np.round(time_offset + timing.end, 2)),
                              "probability": timing.probability})
            taken += len(timing.tokens)
            index += 1
        if words:
            _fit_segment(segment, words, median_duration, max_duration, last_speech_timestamp)
            last_speech_timestamp = segment["end"]
        segment["words"] = words


def last_word_end(segments: list[dict]) -> float | None:
    """The end of the last word of the segments (the last segment's end when none has words)."""
    return next((w["end"] for s in reversed(segments) for w in reversed(s.get("words") or ())),
                segments[-1]["end"] if segments else None)
