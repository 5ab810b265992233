"""Added tokens: strings such as [CLS] or [MASK] that are one token wherever they appear in the text.

Facts taken from the reference (`tokenizers`, tokenizer/added_vocabulary.rs), checked by
tests/text/test_wordpiece_parity.py:
- Tokens with normalized=false are found in the raw text first; the pieces between them are
  normalized, then tokens with normalized=true (their content normalized the same way) are found
  in those. Neither kind is looked for inside the other's matches.
- Matching is leftmost-longest and non-overlapping.
- single_word: a match with a word character (regex \\w) just before or just after is skipped.
  lstrip / rstrip: the match takes in the whitespace on its left (not past the previous match) /
  its right; the token's text and offsets then include that whitespace.
- A normalized token's content is normalized for matching, and id_to_token gives it back that way
  (so do decode; skip_special_tokens compares the content as written, as the reference does).
- An added token's id is the model's id for its content if the model has one; otherwise ids
  continue after the model's vocabulary (the ids written in tokenizer.json are not read).
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from . import unicode_tables
from .config import Section, char_class
from .normalizers import sub_origin

# Rust's regex \s is White_Space
_SPACE = re.compile(f"[{char_class(unicode_tables.SPLIT_SPACE)}]")
_SPACES = re.compile(f"[{char_class(unicode_tables.SPLIT_SPACE)}]*")
# letters that are symbols (So) yet Alphabetic: circled and squared Latin letters
_ALPHABETIC_SYMBOLS = re.compile("[\u24b6-\u24e9\U0001f130-\U0001f149\U0001f150-\U0001f169\U0001f170-\U0001f189]")


def _is_word_char(c: str) -> bool:
    """Rust's regex \\w: Alphabetic, marks, Nd, Pc, Join_Control (Python's \\w takes No, such as
    "²", and leaves out marks)."""
    category = unicodedata.category(c)
    return (category[0] in "LM" or category in ("Nd", "Nl", "Pc") or c in "\u200c\u200d"
            or _ALPHABETIC_SYMBOLS.match(c) is not None)


@dataclass(frozen=True)
class AddedToken:
    content: str
    id: int
    special: bool = False
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = True


_TREE_DEPTH = 32          # branch points nested in the regex; deeper, the rest is one flat alternation


def _common_prefix(a: str, b: str, start: int) -> int:
    """How many characters a[start:] and b[start:] share (slices compared in C, halving the span)."""
    low, high = start, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[start:middle] == b[start:middle]:
            low = middle
        else:
            high = middle - 1
    return low - start


def _alternation(patterns: list[str], start: int = 0, depth: int = 0) -> str:
    """A regex matching, at a position, the longest of `patterns` (sorted, distinct, all sharing
    their first `start` characters) there, as a prefix tree: their common part once, then one
    alternative per next character, longer ones before the end of a shorter pattern (the regex takes
    the first alternative that matches, and the tree leaves at most one to try). A flat alternation
    of every pattern, longest first, matches the same, but `re` compiles it at about a microsecond a
    character: 1,000 added tokens of 5,000 characters took 3 s."""
    common = _common_prefix(patterns[0], patterns[-1], start)
    head, start = re.escape(patterns[0][start:start + common]), start + common
    ends = patterns[0] if len(patterns[0]) == start else None      # sorted: a pattern ending here comes first
    rest = patterns[1:] if ends is not None else patterns
    if not rest:
        return head
    if depth >= _TREE_DEPTH:
        branches = [re.escape(p[start:]) for p in sorted(rest, key=len, reverse=True)]
    else:
        groups: dict[str, list[str]] = {}
        for p in rest:
            groups.setdefault(p[start], []).append(p)
        branches = [_alternation(group, start, depth + 1) for group in groups.values()]
    return f"{head}(?:{'|'.join(branches)}{'|' if ends is not None else ''})"


class _Matcher:
    """Finds the tokens of one kind (raw or normalized) in a string."""

    def __init__(self, by_pattern: dict[str, AddedToken]):
        self.by_pattern = by_pattern
        patterns = sorted(p for p in by_pattern if p)
        self.regex = re.compile(_alternation(patterns)) if patterns else None

    def find(self, text: str) -> list[tuple[int, int, AddedToken | None]]:
        """(start, stop, token or None) pieces covering `text`."""
        if self.regex is None:
            return [(0, len(text), None)]
        pieces, last = [], 0
        for m in self.regex.finditer(text):
            start, stop = m.span()
            token = self.by_pattern[m.group()]
            if token.single_word and ((start > 0 and _is_word_char(text[start - 1]))
                                      or (stop < len(text) and _is_word_char(text[stop]))):
                continue
            if token.lstrip:
                while start > last and _SPACE.match(text, start - 1):
                    start -= 1
            if token.rstrip:
                stop = _SPACES.match(text, stop).end()
            if last < start:
                pieces.append((last, start, None))
            pieces.append((start, stop, token))
            last = stop
        if last < len(text) or not pieces:
            pieces.append((last, len(text), None))
        return pieces


class AddedVocabulary:
    def __init__(self, tokens: list[AddedToken], model, normalizer=None):
        vocab_size = model.get_vocab_size()
        self.by_content: dict[str, AddedToken] = {}
        for token in tokens:
            i = model.token_to_id(token.content)
            if i is None and token.content in self.by_content:
                i = self.by_content[token.content].id
            if i is None:
                top = max((t.id for t in self.by_content.values()), default=-1)
                i = top + 1 if top >= vocab_size else vocab_size
            self.by_content[token.content] = AddedToken(token.content, i, token.special, token.single_word,
                                                        token.lstrip, token.rstrip, token.normalized)
        self.special = {t.content for t in self.by_content.values() if t.special}
        raw, normalized = {}, {}
        self.by_id = {}
        for content, token in self.by_content.items():
            if token.normalized and normalizer is not None:
                content = normalizer.normalize(content, 0)[0]
            (normalized if token.normalized else raw).setdefault(content, token)
            self.by_id[token.id] = content
        self.raw = _Matcher(raw)
        self.normalized = _Matcher(normalized)

    @staticmethod
    def read(s: Section) -> list[AddedToken]:
        tokens = []
        for entry in s.sections("added_tokens") if "added_tokens" in s.data else []:
            special = entry.get("special", bool, False)
            tokens.append(AddedToken(entry.get("content", str), entry.get("id", int, 0), special,
                                     entry.get("single_word", bool, False), entry.get("lstrip", bool, False),
                                     entry.get("rstrip", bool, False), entry.get("normalized", bool, not special)))
        return tokens

    def __len__(self) -> int:
        return len(self.by_content)

    def split_raw(self, text: str) -> list[tuple[int, int, AddedToken | None]]:
        return self.raw.find(text)

    def split_normalized(self, text: str, origin) -> list[tuple[str, object, AddedToken | None]]:
        """(text, origin, token or None) pieces of a normalized piece."""
        if self.normalized.regex is None:
            return [(text, origin, None)]
        return [(text[a:b], sub_origin(origin, a, b), token) for a, b, token in self.normalized.find(text)]
