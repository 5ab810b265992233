"""Normalizers: text -> text, each character remembering where in the user's string it came from.

A piece of text travels as `(text, origin)`: `origin[i]` is the index, in the string the user
gave, of the character that `text[i]` came from, so that every token can report its offsets in
the original text. An int `o` stands for the identity run o, o+1, o+2, ... (nothing changed
length, the common case), and no list is built for it. Each step works on whole strings with
`str` methods and `re`, and walks characters in Python only where something changes length.

Facts taken from the reference (`tokenizers`, the Rust crate behind transformers' fast tokenizers;
checked against it by tests/text/):
- BertNormalizer runs clean_text, then handle_chinese_chars, then strip_accents (None means: follow
  lowercase), then lowercase.
- clean_text drops U+0000, U+FFFD and control characters (Cc, Cf, Co; not \\t \\n \\r) and turns
  whitespace (\\t \\n \\r and White_Space) into " "; handle_chinese_chars puts a space on each side
  of a CJK ideograph; strip_accents is NFD, then drops non-spacing marks (Mn).
- The crate's categories are Unicode 8.0 (see unicode_tables.py). NFD and lowercase come from
  Python here and differ from the crate's only on characters no BERT vocabulary holds, so the ids
  agree; what can differ is offsets:
  - the crate's NFD tables predate Unicode 13: Python 3.11 decomposes U+11938 where the crate
    does not, and gives newer combining marks (U+1ABF-U+1ACE, U+1DFA, ...) their combining class
    where the crate treats them as starters. A word mixing such a mark with older marks is
    reordered differently, so the offsets of its (unknown) token can differ by a character.
  - Rust's std knows case pairs added in Unicode 15-16 (U+A7CB, U+10D50..., U+16EA0...) that
    Python 3.11 does not (those letters are [UNK] either way).
- lowercase maps each character on its own (Rust char::to_lowercase): no final-sigma rule, so
  "ΟΔΟΣ" becomes "οδοσ" where Python's str.lower() would write "οδος".
- Replace writes `content` for every match of its pattern (a string, or a regex as in Split);
  each character written takes the origin of the match's last character. Prepend puts its text
  before a non-empty piece, aligned with the piece's first character. (SentencePiece vocabularies:
  Gemma's " " -> "▁", Phi-3's "▁" before every piece.)
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from . import unicode_tables
from .config import Registry, Section, compile_class
from .patterns import read_pattern

NORMALIZERS = Registry("normalizer")

_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_CONTROL = compile_class(unicode_tables.CONTROL, "+")
# " " maps to itself: leave it out so that plain text has nothing to replace
_SPACE = compile_class(" ".join(r for r in unicode_tables.SPACE.split() if r != "0020"))
_CJK_RUN = compile_class(unicode_tables.CJK, "+")
_MARKS = compile_class(unicode_tables.NONSPACING_MARK, "+")


# --- (text, origin) helpers, shared with the pre-tokenizers and the added-token matcher ---------

def as_list(origin, length: int) -> list[int]:
    return list(range(origin, origin + length)) if type(origin) is int else origin


def sub_origin(origin, start: int, stop: int):
    """The origin of text[start:stop]."""
    return origin + start if type(origin) is int else origin[start:stop]


def original_span(origin, start: int, stop: int) -> tuple[int, int]:
    """Where the non-empty text[start:stop] came from, as (start, stop) in the user's string."""
    if type(origin) is int:
        return origin + start, origin + stop
    return origin[start], origin[stop - 1] + 1


def delete(text: str, origin, pattern: re.Pattern):
    """Drop every match of `pattern`; the remaining characters keep their origins."""
    spans = [m.span() for m in pattern.finditer(text)]
    if not spans:
        return text, origin
    source = as_list(origin, len(text))
    parts, kept, last = [], [], 0
    for start, stop in spans:
        parts.append(text[last:start])
        kept += source[last:start]
        last = stop
    parts.append(text[last:])
    kept += source[last:]
    return "".join(parts), kept


def expanded_origin(text: str, origin, length) -> list[int]:
    """The origin after each non-ASCII character c of `text` became length(c) characters."""
    source = as_list(origin, len(text))
    out, last = [], 0
    for m in _NON_ASCII.finditer(text):
        n = length(m.group())
        if n != 1:
            i = m.start()
            out += source[last:i]
            out += [source[i]] * n
            last = i + 1
    out += source[last:]
    return out


@lru_cache(maxsize=4096)
def _nfd_length(c: str) -> int:
    return len(unicodedata.normalize("NFD", c))


@lru_cache(maxsize=4096)
def _lower_length(c: str) -> int:
    return len(c.lower())


# --- the steps -----------------------------------------------------------------------------------

def clean_text(text: str, origin):
    text, origin = delete(text, origin, _CONTROL)
    return _SPACE.sub(" ", text), origin


def space_cjk(text: str, origin):
    if text.isascii():
        return text, origin
    runs = [m.span() for m in _CJK_RUN.finditer(text)]
    if not runs:
        return text, origin
    source = as_list(origin, len(text))
    parts, out, last = [], [], 0
    for start, stop in runs:
        parts.append(text[last:start])
        parts.append(" " + "  ".join(text[start:stop]) + " ")
        out += source[last:start]
        out += [o for o in source[start:stop] for _ in range(3)]
        last = stop
    parts.append(text[last:])
    out += source[last:]
    return "".join(parts), out


def nfd(text: str, origin):
    if text.isascii() or unicodedata.is_normalized("NFD", text):
        return text, origin
    decomposed = unicodedata.normalize("NFD", text)
    if len(decomposed) != len(text):
        # canonical reordering moves marks but never changes their number: the origins stay
        # positional, as the reference's alignments do
        origin = expanded_origin(text, origin, _nfd_length)
    return decomposed, origin


def strip_accents(text: str, origin):
    if text.isascii():
        return text, origin
    text, origin = nfd(text, origin)
    return delete(text, origin, _MARKS)


def lowercase(text: str, origin):
    if text.isascii():
        return text.lower(), origin
    if "Σ" in text:                     # per character, as the reference: never the final ς
        text = text.replace("Σ", "σ")
    lowered = text.lower()
    if len(lowered) != len(text):       # "İ" -> "i̇"
        origin = expanded_origin(text, origin, _lower_length)
    return lowered, origin


# --- the components ------------------------------------------------------------------------------

@NORMALIZERS.register("BertNormalizer")
class BertNormalizer:
    def __init__(self, clean_text: bool = True, handle_chinese_chars: bool = True,
                 strip_accents: bool | None = None, lowercase: bool = True):
        self.clean_text = clean_text
        self.handle_chinese_chars = handle_chinese_chars
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.lowercase = lowercase

    @classmethod
    def from_config(cls, s: Section) -> BertNormalizer:
        return cls(s.get("clean_text", bool, True), s.get("handle_chinese_chars", bool, True),
                   s.get("strip_accents", (bool, type(None)), None), s.get("lowercase", bool, True))

    def normalize(self, text: str, origin):
        if self.clean_text:
            text, origin = clean_text(text, origin)
        if self.handle_chinese_chars:
            text, origin = space_cjk(text, origin)
        if self.strip_accents:
            text, origin = strip_accents(text, origin)
        if self.lowercase:
            text, origin = lowercase(text, origin)
        return text, origin


@NORMALIZERS.register("Lowercase")
class Lowercase:
    @classmethod
    def from_config(cls, s: Section) -> Lowercase:
        return cls()

    def normalize(self, text: str, origin):
        return lowercase(text, origin)


@NORMALIZERS.register("NFD")
class NFD:
    @classmethod
    def from_config(cls, s: Section) -> NFD:
        return cls()

    def normalize(self, text: str, origin):
        return nfd(text, origin)


@NORMALIZERS.register("Sequence")
class Sequence:
    def __init__(self, steps: list):
        self.steps = steps

    @classmethod
    def from_config(cls, s: Section) -> Sequence:
        return cls([NORMALIZERS.build(step) for step in s.sections("normalizers")])

    def normalize(self, text: str, origin):
        for step in self.steps:
            text, origin = step.normalize(text, origin)
        return text, origin


@NORMALIZERS.register("Replace")
class Replace:
    def __init__(self, pattern: re.Pattern | str, content: str):
        """pattern: a compiled regex, or a string to find as it is."""
        self.literal = pattern if isinstance(pattern, str) else None
        self.pattern = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        self.content = content

    @classmethod
    def from_config(cls, s: Section) -> Replace:
        return cls(read_pattern(s), s.get("content", str))

    def normalize(self, text: str, origin):
        if self.literal is not None and len(self.literal) == len(self.content) == 1:
            return text.replace(self.literal, self.content), origin     # one character for one: origins stay
        return replace(text, origin, self.pattern, self.content)


def replace(text: str, origin, pattern: re.Pattern, content: str):
    """Every match of `pattern` written as `content`, each new character taking the origin of the
    match's last character (as the reference aligns them)."""
    spans = [m.span() for m in pattern.finditer(text) if m.end() > m.start()]
    if not spans:
        return text, origin
    if len(content) == 1 and all(b - a == 1 for a, b in spans):
        return pattern.sub(lambda m: content, text), origin
    source = as_list(origin, len(text))
    parts, out, last = [], [], 0
    for start, stop in spans:
        parts += (text[last:start], content)
        out += source[last:start]
        out += [source[stop - 1]] * len(content)
        last = stop
    parts.append(text[last:])
    out += source[last:]
    return "".join(parts), out


@NORMALIZERS.register("Prepend")
class Prepend:
    def __init__(self, prepend: str):
        self.prepend = prepend

    @classmethod
    def from_config(cls, s: Section) -> Prepend:
        return cls(s.get("prepend", str))

    def normalize(self, text: str, origin):
        if not text or not self.prepend:
            return text, origin
        first = origin if type(origin) is int else origin[0]
        return self.prepend + text, [first] * len(self.prepend) + as_list(origin, len(text))
