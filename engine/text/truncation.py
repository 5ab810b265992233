"""Truncation and padding, with the reference's rules (`tokenizers`, utils/truncation.rs and
utils/padding.rs).

Truncation comes before the post-processor, on the texts' own tokens, with max_length lowered by
the number of special tokens the post-processor will add. longest_first with one text keeps its
first (or, direction "left", last) tokens; with two it shortens the longer one first, and both to
about half if need be; only_first / only_second cut one text only. What is cut off becomes
Encoding.overflowing (windows of max_length tokens, overlapping by `stride`).
Padding comes last: to a fixed length or to the longest of the batch, rounded up to
pad_to_multiple_of, on the right or the left, with tokens the attention mask hides.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..untrusted import INT64_MAX, shown
from .config import U32_MAX, Section
from .encoding import Encoding

# Padding to a fixed length (or a multiple) allocates that many tokens per text: a bigger number
# in a tokenizer.json is refused rather than allocated (a million tokens is beyond what is padded to).
MAX_PADDED_LENGTH = 1 << 20
_STRATEGIES = {"LongestFirst": "longest_first", "OnlyFirst": "only_first", "OnlySecond": "only_second"}
_DIRECTIONS = {"Right": "right", "Left": "left"}


@dataclass(frozen=True)
class Truncation:
    max_length: int
    stride: int = 0
    strategy: str = "longest_first"      # or "only_first", "only_second"
    direction: str = "right"             # which end is cut off


@dataclass(frozen=True)
class Padding:
    length: int | None = None            # None: to the longest of the batch
    pad_to_multiple_of: int | None = None
    pad_id: int = 0
    pad_type_id: int = 0
    pad_token: str = "[PAD]"
    direction: str = "right"


def checked_truncation(t: Truncation) -> Truncation:
    if type(t.max_length) is not int or t.max_length < 0:
        raise InputError(f"max_length must be a non-negative int, got {t.max_length!r}")
    if type(t.stride) is not int or t.stride < 0:
        raise InputError(f"stride must be a non-negative int, got {t.stride!r}")
    if t.strategy not in _STRATEGIES.values():
        raise InputError(f"truncation strategy must be one of {', '.join(_STRATEGIES.values())}, got {t.strategy!r}")
    if t.direction not in ("right", "left"):
        raise InputError(f"truncation direction must be 'right' or 'left', got {t.direction!r}")
    return t


def truncate(encoding: Encoding, pair: Encoding | None, t: Truncation) -> None:
    if t.max_length == 0:
        for e in (encoding, pair):
            if e is not None:
                e.truncate(0, t.stride, t.direction)
        return
    total = len(encoding.ids) + (len(pair.ids) if pair is not None else 0)
    if total <= t.max_length:
        return
    if t.strategy == "longest_first":
        if pair is None:
            encoding.truncate(t.max_length, t.stride, t.direction)
            return
        n1, n2 = len(encoding.ids), len(pair.ids)
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > t.max_length else max(n1, t.max_length - n1)
        if n1 + n2 > t.max_length:
            n1 = t.max_length // 2
            n2 = n1 + t.max_length % 2
        if swap:
            n1, n2 = n2, n1
        encoding.truncate(n1, t.stride, t.direction)
        pair.truncate(n2, t.stride, t.direction)
        return
    target = encoding if t.strategy == "only_first" else pair
    if target is None:
        raise InputError("truncation strategy 'only_second' needs a pair of texts")
    remove = total - t.max_length
    if len(target.ids) <= remove:
        raise InputError(f"cannot truncate with {t.strategy!r}: the {'first' if target is encoding else 'second'} "
                         f"text has {len(target.ids)} tokens and {remove} must go")
    target.truncate(len(target.ids) - remove, t.stride, t.direction)


def pad(encodings: list[Encoding], p: Padding) -> None:
    longest = max(len(e.ids) for e in encodings)
    length = round_up(p.length if p.length is not None else longest, p.pad_to_multiple_of)
    for e in encodings:
        e.pad(length, p.pad_id, p.pad_type_id, p.pad_token, p.direction)


def round_up(length: int, multiple: int | None) -> int:
    return length + (-length % multiple) if multiple else length


def read_truncation(s: Section | None) -> Truncation | None:
    if s is None:
        return None
    return Truncation(s.get("max_length", int, at_most=INT64_MAX), s.get("stride", int, 0, at_most=INT64_MAX),
                      s.choice("strategy", _STRATEGIES, "longest_first"), s.choice("direction", _DIRECTIONS, "right"))


def read_padding(s: Section | None) -> Padding | None:
    if s is None:
        return None
    strategy = s.get("strategy", (str, dict), "BatchLongest")
    if strategy == "BatchLongest":
        length = None
    elif isinstance(strategy, dict) and list(strategy) == ["Fixed"] and type(strategy["Fixed"]) is int \
            and 0 <= strategy["Fixed"] <= MAX_PADDED_LENGTH:
        length = strategy["Fixed"]
    else:
        raise s.error(f'expected "BatchLongest" or {{"Fixed": length}} with a length in [0, {MAX_PADDED_LENGTH}], '
                      f'got {shown(strategy)}', "strategy")
    return Padding(length, s.get("pad_to_multiple_of", (int, type(None)), None, at_most=MAX_PADDED_LENGTH),
                   s.get("pad_id", int, 0, at_most=U32_MAX), s.get("pad_type_id", int, 0, at_most=U32_MAX),
                   s.get("pad_token", str, "[PAD]"),
                   s.choice("direction", _DIRECTIONS, "right"))
