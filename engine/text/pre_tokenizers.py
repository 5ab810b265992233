"""Pre-tokenizers: split a normalized piece of text into words, each keeping its origins.

`pre_tokenize(pieces)` takes and returns a list of `(text, origin)` (see normalizers.py); the
model then tokenizes each word on its own.

Facts taken from the reference (`tokenizers`):
- BertPreTokenizer splits on whitespace (Rust char::is_whitespace, the White_Space property),
  dropping it, then isolates every punctuation character (ASCII punctuation, that is 33-47,
  58-64, 91-96, 123-126, and Unicode category P* in the crate's Unicode 8.0 tables).
- WhitespaceSplit splits on the same whitespace and nothing else.
"""
from __future__ import annotations

import re

from . import unicode_tables
from .config import Registry, Section, char_class

PRE_TOKENIZERS = Registry("pre_tokenizer")

_SPACE = char_class(unicode_tables.SPLIT_SPACE)
_PUNCTUATION = char_class(unicode_tables.PUNCTUATION)


def split_matches(pattern: re.Pattern, text: str, origin) -> list:
    """Each match of `pattern` in text as a (word, origin) piece."""
    if type(origin) is int:
        return [(m.group(), origin + m.start()) for m in pattern.finditer(text)]
    return [(m.group(), origin[m.start():m.end()]) for m in pattern.finditer(text)]


class _Splitter:
    pattern: re.Pattern

    @classmethod
    def from_config(cls, s: Section):
        return cls()

    def split(self, text: str, origin) -> list:
        return split_matches(self.pattern, text, origin)

    def pre_tokenize(self, pieces: list) -> list:
        if len(pieces) == 1:
            return split_matches(self.pattern, *pieces[0])
        return [word for text, origin in pieces for word in split_matches(self.pattern, text, origin)]


@PRE_TOKENIZERS.register("BertPreTokenizer")
class BertPreTokenizer(_Splitter):
    pattern = re.compile(f"[^{_SPACE}{_PUNCTUATION}]+|[{_PUNCTUATION}]")


@PRE_TOKENIZERS.register("WhitespaceSplit")
class WhitespaceSplit(_Splitter):
    pattern = re.compile(f"[^{_SPACE}]+")


@PRE_TOKENIZERS.register("Sequence")
class Sequence:
    def __init__(self, steps: list):
        self.steps = steps

    @classmethod
    def from_config(cls, s: Section) -> Sequence:
        return cls([PRE_TOKENIZERS.build(step) for step in s.sections("pretokenizers")])

    def pre_tokenize(self, pieces: list) -> list:
        for step in self.steps:
            pieces = step.pre_tokenize(pieces)
        return pieces
