"""Pre-tokenizers: split a normalized piece of text into words, each keeping its origins.

`pre_tokenize(pieces)` takes and returns a list of `(text, origin)` (see normalizers.py); the
model then tokenizes each word on its own.

Facts taken from the reference (`tokenizers`), checked by tests/text/:
- BertPreTokenizer splits on whitespace (Rust char::is_whitespace, the White_Space property),
  dropping it, then isolates every punctuation character (ASCII punctuation, that is 33-47,
  58-64, 91-96, 123-126, and Unicode category P* in the crate's Unicode 8.0 tables).
- WhitespaceSplit splits on the same whitespace and nothing else.
- ByteLevel (GPT-2, pre_tokenizers/byte_level.rs): with add_prefix_space, a piece that does not
  start with " " gets one (aligned with its first character; every piece between added tokens
  is such a piece); with use_regex, the piece is split by GPT-2's regex (GPT2_SPLIT), each match
  a word; then every word is written as its UTF-8 bytes, each byte one printable character
  (bytes_to_unicode below). Every byte of a character keeps that character's origin, so a token
  holding part of a character reports the whole character's span.
- Split: the matches of a pattern and the text between them, kept, dropped or merged as
  `behavior` says (tokenizer/normalizer.rs `split`), `invert` swapping the two. Its regexes run
  in Oniguruma; they reach Python's `re` through patterns.translate_regex.
- Digits: numeric characters (Rust char::is_numeric) each on their own (individual_digits) or
  in runs.
- Metaspace (SentencePiece): every " " becomes `replacement` ("▁"); then, unless the piece
  already starts with it, one is put in front (aligned with the first character), for every
  piece ("always"), for none ("never"), or only for a piece that starts the text ("first": the
  text after an added token at its start gets none); with `split`, the piece is then cut before
  each replacement character. prepend_scheme is "always" when absent; an older file's
  add_prefix_space: false must come with "never" (the reference refuses it otherwise), true
  changes nothing.
"""
from __future__ import annotations

import re
from functools import lru_cache

from . import unicode_tables
from .config import Registry, Section, char_class, code_points
from .normalizers import as_list, expanded_origin, sub_origin
from .patterns import char_set, compile_regex, read_pattern

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


# --- byte-level (GPT-2) --------------------------------------------------------------------------

def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> character map: printable Latin-1 bytes stand for themselves, the other 68
    (controls, space, NBSP, soft hyphen) for U+0100 onwards, in byte order. So " " is "Ġ", "\\n" "Ċ"."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = (b for b in range(256) if b not in printable)
    chars = {b: chr(b) for b in printable}
    chars.update((b, chr(256 + n)) for n, b in enumerate(extra))
    return dict(sorted(chars.items()))


BYTE_CHARS = bytes_to_unicode()
_LATIN1_TO_BYTE_CHARS = str.maketrans({chr(b): c for b, c in BYTE_CHARS.items()})


@lru_cache(maxsize=4096)
def _utf8_length(c: str) -> int:
    return len(c.encode("utf-8"))


def to_byte_level(word: str, origin):
    """`word` as byte characters, each byte keeping the origin of the character it belongs to."""
    if word.isascii():
        return word.translate(_LATIN1_TO_BYTE_CHARS), origin
    mapped = word.encode("utf-8", "surrogatepass").decode("latin-1").translate(_LATIN1_TO_BYTE_CHARS)
    return mapped, expanded_origin(word, origin, _utf8_length)


# GPT-2's split (the reference's ByteLevel regex, tiktoken's r50k)
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


@lru_cache(maxsize=None)
def gpt2_split() -> re.Pattern:
    """GPT2_SPLIT compiled (on first use: ~30 ms, which BERT's tokenizers need not pay)."""
    return compile_regex(GPT2_SPLIT)


@PRE_TOKENIZERS.register("ByteLevel")
class ByteLevel:
    def __init__(self, add_prefix_space: bool = True, use_regex: bool = True, trim_offsets: bool = True):
        # trim_offsets is read, as the reference does, but only the ByteLevel post-processor uses it
        self.add_prefix_space, self.use_regex, self.trim_offsets = add_prefix_space, use_regex, trim_offsets
        self._split = gpt2_split() if use_regex else None

    @classmethod
    def from_config(cls, s: Section) -> ByteLevel:
        return cls(s.get("add_prefix_space", bool, True), s.get("use_regex", bool, True),
                   s.get("trim_offsets", bool, True))

    def pre_tokenize(self, pieces: list) -> list:
        out = []
        for text, origin in pieces:
            if self.add_prefix_space and text and not text.startswith(" "):
                first = origin if type(origin) is int else origin[0]
                origin = [first, *(range(origin, origin + len(text)) if type(origin) is int else origin)]
                text = " " + text
            # every character is in one of the regex's alternatives: its matches cover the text
            words = split_matches(self._split, text, origin) if self.use_regex else [(text, origin)]
            out += [to_byte_level(word, word_origin) for word, word_origin in words]
        return out


# --- Split and Digits ----------------------------------------------------------------------------------

_BEHAVIORS = {"Removed": "removed", "Isolated": "isolated", "MergedWithPrevious": "merged_with_previous",
              "MergedWithNext": "merged_with_next", "Contiguous": "contiguous"}


def split_spans(pattern: re.Pattern, text: str, behavior: str, invert: bool = False) -> list[tuple[int, int]]:
    """The (start, stop) of the pieces `text` splits into, as the reference's NormalizedString::split."""
    marks, last = [], 0                    # (start, stop, is_match), covering the text
    for m in pattern.finditer(text):
        start, stop = m.span()
        if last != start:
            marks.append((last, start, invert))
        marks.append((start, stop, not invert))
        last = stop
    if last != len(text) or not marks:
        marks.append((last, len(text), invert))
    if behavior == "isolated":
        spans = [(a, b) for a, b, _ in marks]
    elif behavior == "removed":
        spans = [(a, b) for a, b, is_match in marks if not is_match]
    elif behavior == "merged_with_next":
        spans, following = [], False       # from the end: a match joins the piece after it
        for a, b, is_match in reversed(marks):
            if is_match and not following and spans:
                spans[-1] = (a, spans[-1][1])
            else:
                spans.append((a, b))
            following = is_match
        spans.reverse()
    else:                                  # merged_with_previous, contiguous
        spans, previous = [], False
        for a, b, is_match in marks:
            joins = is_match and not previous if behavior == "merged_with_previous" else is_match == previous
            if joins and spans:
                spans[-1] = (spans[-1][0], b)
            else:
                spans.append((a, b))
            previous = is_match
    return [(a, b) for a, b in spans if a < b]


@PRE_TOKENIZERS.register("Split")
class Split:
    def __init__(self, pattern: re.Pattern, behavior: str = "isolated", invert: bool = False):
        self.pattern, self.behavior, self.invert = pattern, behavior, invert

    @classmethod
    def from_config(cls, s: Section) -> Split:
        pattern = read_pattern(s)
        pattern = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        return cls(pattern, s.choice("behavior", _BEHAVIORS), s.get("invert", bool, False))

    def pre_tokenize(self, pieces: list) -> list:
        return [(text[a:b], sub_origin(origin, a, b)) for text, origin in pieces
                for a, b in split_spans(self.pattern, text, self.behavior, self.invert)]


_NUMERIC = char_set(code_points(unicode_tables.NUMERIC))


@PRE_TOKENIZERS.register("Digits")
class Digits:
    def __init__(self, individual_digits: bool = False):
        self.individual_digits = individual_digits
        self.pattern = re.compile(_NUMERIC if individual_digits else f"{_NUMERIC}+")

    @classmethod
    def from_config(cls, s: Section) -> Digits:
        return cls(s.get("individual_digits", bool, False))

    def split(self, text: str, origin) -> list:
        return [(text[a:b], sub_origin(origin, a, b)) for a, b in split_spans(self.pattern, text, "isolated")]

    def pre_tokenize(self, pieces: list) -> list:
        return [word for text, origin in pieces for word in self.split(text, origin)]


# --- Metaspace (SentencePiece) ---------------------------------------------------------------------

_PREPEND_SCHEMES = {"always": "always", "never": "never", "first": "first"}


@PRE_TOKENIZERS.register("Metaspace")
class Metaspace:
    def __init__(self, replacement: str = "\u2581", prepend_scheme: str = "always", split: bool = True):
        self.replacement, self.prepend_scheme, self.split = replacement, prepend_scheme, split
        self._cut = re.compile(re.escape(replacement))

    @classmethod
    def from_config(cls, s: Section) -> Metaspace:
        replacement = s.get("replacement", str, "\u2581")
        if len(replacement) != 1:
            raise s.error(f"the replacement must be one character, got {replacement!r}", "replacement")
        scheme = s.choice("prepend_scheme", _PREPEND_SCHEMES, "always")
        if s.get("add_prefix_space", bool, None) is False and scheme != "never":
            raise s.error(f'add_prefix_space: false contradicts prepend_scheme "{scheme}" (absent: "always")',
                          "add_prefix_space")
        return cls(replacement, scheme, s.get("split", bool, True))

    def pre_tokenize(self, pieces: list) -> list:
        out, mark = [], self.replacement
        for text, origin in pieces:
            text = text.replace(" ", mark)             # one character for one: origins stay
            first = origin if type(origin) is int else origin[0]
            if (self.prepend_scheme == "always" or (self.prepend_scheme == "first" and first == 0)) \
                    and not text.startswith(mark):
                text, origin = mark + text, [first, *as_list(origin, len(text))]
            if self.split:
                out += [(text[a:b], sub_origin(origin, a, b))
                        for a, b in split_spans(self._cut, text, "merged_with_next")]
            else:
                out.append((text, origin))
        return out
