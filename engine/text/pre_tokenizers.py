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
  in Oniguruma; they reach Python's `re` through translate_regex.
- Digits: numeric characters (Rust char::is_numeric) each on their own (individual_digits) or
  in runs.
"""
from __future__ import annotations

import re
from functools import lru_cache
from re import _constants as _sre, _parser

from . import unicode_tables
from .config import Registry, Section, char_class, code_points
from .normalizers import expanded_origin, sub_origin

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


# --- regexes written for the reference's engine ------------------------------------------------------

# the sets Oniguruma gives \p{L}, \p{N} and \s, read off the reference (unicode_tables.py)
_CLASSES = {"L": code_points(unicode_tables.LETTER), "N": code_points(unicode_tables.NUMBER)}
_REGEX_SPACE = code_points(unicode_tables.REGEX_SPACE)
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}
_LITERAL_ESCAPES = set("\\.^$|?*+()[]{}-/ '\"#&~!%,:;<=>@`_")
_ASTRAL = 0x10000


def _union(ranges) -> list[tuple[int, int]]:
    out = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _complement(ranges) -> list[tuple[int, int]]:
    out, start = [], 0
    for first, last in _union(ranges):
        if first > start:
            out.append((start, first - 1))
        start = last + 1
    if start <= 0x10FFFF:
        out.append((start, 0x10FFFF))
    return out


def _body(ranges) -> str:
    return "".join(f"\\U{a:08x}" + (f"-\\U{b:08x}" if b != a else "") for a, b in ranges)


def char_set(ranges) -> str:
    """A regex matching one character of `ranges`. Python's `re` finds a character below U+10000
    in a bitmap but tries ranges above it one by one, and the Unicode classes have hundreds of
    those: so they sit behind a one-range lookahead that characters below U+10000 fail at once
    (about 3x faster on ordinary text)."""
    ranges = _union(ranges)
    low = [(a, min(b, _ASTRAL - 1)) for a, b in ranges if a < _ASTRAL]
    high = [(max(a, _ASTRAL), b) for a, b in ranges if b >= _ASTRAL]
    if len(high) <= 1:
        return f"[{_body(low + high)}]" if ranges else "[^\\x00-\\U0010ffff]"
    astral = f"(?=[\\U{_ASTRAL:08x}-\\U0010ffff])[{_body(high)}]"
    return f"(?:[{_body(low)}]|{astral})" if low else astral


def translate_regex(pattern: str, *, skeleton: bool = False) -> str:
    r"""A regex written for the reference (Oniguruma, as in tokenizer.json "Split" patterns) as an
    equivalent Python `re` pattern. Character classes become explicit sets, \p{L}, \p{N} and \s
    taken from tables (Python's `re` has no \p, and its Unicode is not the reference's). What
    cannot be translated faithfully is refused (ValueError) rather than approximated: other
    Unicode classes, \d \w \b and the like (whose meaning differs between engines), anchors,
    nested classes and class intersections. With `skeleton`, every class is written "." instead:
    the pattern's structure without char_set's own (disjoint) alternatives."""
    out, i, n = [], 0, len(pattern)
    char_set_or_dot = (lambda ranges: ".") if skeleton else char_set

    def escape(i: int) -> tuple[list, int]:
        """The escape at pattern[i] (a backslash): (the characters it stands for, as ranges; next i)."""
        if i + 1 >= n:
            raise ValueError("the pattern ends with a lone backslash")
        e, i = pattern[i + 1], i + 2
        if e in "pP":
            if pattern.startswith("{", i):
                stop = pattern.find("}", i)
                if stop < 0:
                    raise ValueError(f"unclosed \\{e}{{ in the pattern")
                name, i = pattern[i + 1:stop], stop + 1
            else:
                name, i = pattern[i:i + 1], i + 1
            negated = e == "P"
            if name.startswith("^"):
                name, negated = name[1:], not negated
            if name not in _CLASSES:
                raise ValueError(f"\\{e}{{{name}}}: this engine implements only the Unicode classes "
                                 f"\\p{{L}} and \\p{{N}} in split patterns")
            return (_complement(_CLASSES[name]) if negated else _CLASSES[name]), i
        if e in "sS":
            return (_complement(_REGEX_SPACE) if e == "S" else _REGEX_SPACE), i
        if e in "xu":
            if e == "x" and pattern.startswith("{", i):
                stop = pattern.find("}", i)
                if stop < 0:
                    raise ValueError("unclosed \\x{ in the pattern")
                digits, i = pattern[i + 1:stop], stop + 1
            else:
                width = 2 if e == "x" else 4
                digits, i = pattern[i:i + width], i + width
            try:
                c = int(digits, 16)
            except ValueError:
                raise ValueError(f"bad escape \\{e}{digits}") from None
            return [(c, c)], i
        if e in _SIMPLE_ESCAPES:
            c = ord(_SIMPLE_ESCAPES[e])
            return [(c, c)], i
        if e in _LITERAL_ESCAPES:
            return [(ord(e), ord(e))], i
        raise ValueError(f"the escape \\{e} is not implemented (its meaning differs between regex engines)")

    def character_class(i: int) -> tuple[str, int]:
        """The class opening at pattern[i] ("["): (its regex, next i)."""
        i += 1
        negated = pattern.startswith("^", i)
        i += negated
        members, first = [], True
        while True:
            if i >= n:
                raise ValueError("unclosed character class")
            c = pattern[i]
            if c == "]" and not first:        # a "]" right after "[" or "[^" is a literal
                i += 1
                break
            first = False
            if c == "[" or pattern.startswith("&&", i):
                raise ValueError("nested character classes and class intersections (&&) are not implemented")
            if c == "\\":
                ranges, i = escape(i)
            else:
                ranges, i = [(ord(c), ord(c))], i + 1
            # a range "x-y" between two single characters
            if (len(ranges) == 1 and ranges[0][0] == ranges[0][1] and pattern.startswith("-", i)
                    and i + 1 < n and pattern[i + 1] != "]"):
                if pattern[i + 1] == "\\":
                    end, after = escape(i + 1)
                else:
                    end, after = [(ord(pattern[i + 1]), ord(pattern[i + 1]))], i + 2
                if len(end) != 1 or end[0][0] != end[0][1] or end[0][0] < ranges[0][0]:
                    raise ValueError(f"bad range in a character class at {pattern[i - 1:after]!r}")
                ranges, i = [(ranges[0][0], end[0][0])], after
            members += ranges
        return char_set_or_dot(_complement(members) if negated else members), i

    while i < n:
        c = pattern[i]
        if c == "\\":
            ranges, i = escape(i)
            out.append(char_set_or_dot(ranges) if len(ranges) != 1 or ranges[0][0] != ranges[0][1]
                       else re.escape(chr(ranges[0][0])))
        elif c == "[":
            text, i = character_class(i)
            out.append(text)
        elif c in "^$":
            raise ValueError(f"the anchor {c!r} is not implemented (Oniguruma's is per line, Python's is not)")
        elif pattern.startswith("(?<", i) and i + 3 < n and pattern[i + 3] not in "=!":
            out.append("(?P<")                    # a named group
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


# Python's `re` (3.11+) parses patterns with re._parser: its tree shows what a repetition repeats
_REPEATS = (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT)


def _check_backtracking(items, repeated: bool = False) -> None:
    """Refuse a repetition of something that itself repeats or alternates, as in "(a+)+b" or
    "(a|aa)*b": backtracking engines (Python's `re` and Oniguruma alike) take exponential time on
    texts that almost match, and a tokenizer.json must not be able to hang the page that encodes
    with it. Real split patterns (GPT-2's, Llama 3's, Qwen's...) repeat only characters and classes."""
    for op, argument in items:
        if op in _REPEATS:
            if repeated:
                raise ValueError("a repeated group holds another repetition (exponential backtracking)")
            _check_backtracking(argument[2], repeated or argument[1] > 1)
        elif op is _sre.BRANCH:
            if repeated:
                raise ValueError("a repeated group holds alternatives (exponential backtracking)")
            for branch in argument[1]:
                _check_backtracking(branch, repeated)
        elif op is _sre.SUBPATTERN:
            _check_backtracking(argument[3], repeated)
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            _check_backtracking(argument[1], repeated)


def compile_regex(pattern: str, s: Section | None = None, key: str = "pattern") -> re.Pattern:
    try:
        _check_backtracking(_parser.parse(translate_regex(pattern, skeleton=True)))
        return re.compile(translate_regex(pattern))
    except (ValueError, OverflowError, RecursionError, re.error) as e:    # Overflow: "a{4294967296}"
        message = f"cannot use the regex {pattern!r}: {e}"
        if s is None:
            raise ValueError(message) from None
        raise s.error(message, key) from None


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
        spec = s.section("pattern")
        if spec is None or len(spec.data) != 1 or next(iter(spec.data)) not in ("String", "Regex"):
            raise s.error('expected {"String": text} or {"Regex": pattern}', "pattern")
        kind = next(iter(spec.data))
        text = spec.get(kind, str)
        pattern = re.compile(re.escape(text)) if kind == "String" else compile_regex(text, spec, kind)
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
