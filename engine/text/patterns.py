r"""Regexes written for the reference's engine (Oniguruma, as in tokenizer.json "Split" and
"Replace" patterns and the split regexes of GGUF vocabularies) as Python `re` patterns.

    compile_regex(r"\p{N}{1,3}| ?\p{L}+")     # a re.Pattern matching what Oniguruma matches

Character classes become explicit sets: \p{L}, \p{N}, \p{M}, the letter subclasses and \s are
the reference's own, read off it (unicode_tables.py); what cannot be translated faithfully is
refused rather than approximated (translate_regex), and so are patterns that would backtrack
exponentially (_check_backtracking).
"""
from __future__ import annotations

import re
from functools import cache
from re import _constants as _sre, _parser

from . import unicode_tables
from .config import Section, code_points

# the sets Oniguruma gives \p{L}, \p{N}, \p{M}, the letter subclasses and \s, read off the reference
# (unicode_tables.py)
_CLASSES = {"L": unicode_tables.LETTER, "N": unicode_tables.NUMBER, "M": unicode_tables.MARK,
            "Lu": unicode_tables.UPPERCASE_LETTER, "Ll": unicode_tables.LOWERCASE_LETTER,
            "Lt": unicode_tables.TITLECASE_LETTER, "Lm": unicode_tables.MODIFIER_LETTER,
            "Lo": unicode_tables.OTHER_LETTER}
_CLASS_NAMES = ", ".join("\\p{" + name + "}" for name in _CLASSES)
_REGEX_SPACE = code_points(unicode_tables.REGEX_SPACE)
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}
_LITERAL_ESCAPES = set("\\.^$|?*+()[]{}-/ '\"#&~!%,:;<=>@`_")
_ASTRAL = 0x10000


@cache
def _class_ranges(name: str) -> tuple[tuple[int, int], ...]:
    return tuple(code_points(_CLASSES[name]))


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
                                 f"{_CLASS_NAMES} in split patterns")
            ranges = _class_ranges(name)
            return (_complement(ranges) if negated else ranges), i
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


def read_pattern(s: Section, key: str = "pattern") -> str | re.Pattern:
    """A tokenizer.json pattern ({"String": text} or {"Regex": pattern}): the text to find as it
    is, or the compiled regex (translated from the reference's engine, see translate_regex)."""
    spec = s.section(key)
    if spec is None or len(spec.data) != 1 or next(iter(spec.data)) not in ("String", "Regex"):
        raise s.error('expected {"String": text} or {"Regex": pattern}', key)
    kind = next(iter(spec.data))
    text = spec.get(kind, str)
    return text if kind == "String" else compile_regex(text, spec, kind)
