"""The word error rate of a transcript against another: (substitutions + deletions + insertions)
/ reference words, by the edit distance over words (Levenshtein), after lowercasing and dropping
punctuation (a plain normalization, not openai-whisper's English text normalizer).

    word_error_rate("Four score and seven", "four score in seven")    # 0.25
"""
from __future__ import annotations

import re

import numpy as np


def words(text: str) -> list[str]:
    """Lowercase words, punctuation dropped ("father's" stays one word)."""
    return re.findall(r"[\w']+", text.lower().replace("’", "'"))


def edit_distance(a: list, b: list) -> int:
    """The fewest substitutions, deletions and insertions that make `a` into `b`: one row of the
    dynamic program at a time, O(len(a) * len(b)) time, O(len(b)) memory."""
    row = np.arange(len(b) + 1)
    targets = np.array(b, dtype=object)
    for i, word in enumerate(a, start=1):
        substituted = row[:-1] + (targets != word)
        deleted = row[1:] + 1
        new = np.empty_like(row)
        new[0] = i
        best = np.minimum(substituted, deleted)
        for j in range(1, len(row)):               # insertions chain along the row
            new[j] = min(best[j - 1], new[j - 1] + 1)
        row = new
    return int(row[-1])


def word_error_rate(reference: str, hypothesis: str) -> float:
    ref = words(reference)
    if not ref:
        return 0.0 if not words(hypothesis) else 1.0
    return edit_distance(ref, words(hypothesis)) / len(ref)


def text_within(segments, spans) -> str:
    """The text of the transcript segments that overlap any of `spans` ([{"start", "end"}] in
    seconds): a transcript's words on the speech, what it made of the pauses left out."""
    return "".join(s["text"] for s in segments
                   if any(s["start"] < span["end"] and span["start"] < s["end"] for span in spans))
