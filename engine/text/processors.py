"""Post-processors: put the special tokens around the encoded text(s) ([CLS] A [SEP] B [SEP]).

Facts taken from the reference (`tokenizers`, processors/template.rs, processors/bert.rs):
- A template is a list of pieces, each a special token or sequence A or B, each with a type id;
  the sequence's tokens all take the piece's type id, special tokens take theirs.
- With add_special_tokens=False only the sequences remain (still with the template's type ids).
- The pieces are merged one after another, overflowing parts included (Encoding.merge_with), so
  every part cut off by truncation gets its own [CLS] ... [SEP].
- BertProcessing {cls, sep} is the template "[CLS] A [SEP]" / "[CLS] A [SEP] B:1 [SEP]:1".
- ByteLevel (processors/byte_level.rs) adds no token; with trim_offsets, a token's offsets leave
  out its leading and trailing spaces ("Ġ" characters), except the one space add_prefix_space
  put before the first word; the sequences are then joined as without a post-processor.
"""
from __future__ import annotations

from . import unicode_tables
from .config import U32_MAX, Registry, Section, code_points
from .encoding import Encoding
from .pre_tokenizers import BYTE_CHARS

PROCESSORS = Registry("post_processor")


def default_process(encoding: Encoding, pair: Encoding | None) -> Encoding:
    """No post-processor: the sequences one after the other."""
    return encoding if pair is None else Encoding.merge([encoding, pair])


@PROCESSORS.register("TemplateProcessing")
class TemplateProcessing:
    def __init__(self, single: list[tuple], pair: list[tuple], special_tokens: dict[str, tuple]):
        """single, pair: pieces (is_sequence, "A" | "B" | special token name, type_id);
        special_tokens: name -> (ids, tokens)."""
        self.single, self.pair, self.special_tokens = single, pair, special_tokens

    @classmethod
    def from_config(cls, s: Section) -> TemplateProcessing:
        special = {}
        specials = s.section("special_tokens", optional=True)
        if specials is not None:
            for name in specials.data:
                entry = specials.required_section(name)
                ids, tokens = entry.get("ids", list), entry.get("tokens", list)
                for i, token_id in enumerate(ids):
                    entry.check(token_id, int, f"ids[{i}]", at_most=U32_MAX)
                for i, token in enumerate(tokens):
                    entry.check(token, str, f"tokens[{i}]")
                if len(ids) != len(tokens):
                    raise entry.error(f"{len(ids)} ids but {len(tokens)} tokens", "ids")
                special[name] = (ids, tokens)
        single = _template(s, "single", special, ("A",))
        pair = _template(s, "pair", special, ("A", "B"))
        return cls(single, pair, special)

    @classmethod
    def bert(cls, cls_token: tuple[str, int], sep_token: tuple[str, int]) -> TemplateProcessing:
        (cls_name, cls_id), (sep_name, sep_id) = cls_token, sep_token
        special = {cls_name: ([cls_id], [cls_name]), sep_name: ([sep_id], [sep_name])}
        single = [(False, cls_name, 0), (True, "A", 0), (False, sep_name, 0)]
        return cls(single, single + [(True, "B", 1), (False, sep_name, 1)], special)

    def added_tokens(self, is_pair: bool) -> int:
        return sum(len(self.special_tokens[name][0])
                   for is_sequence, name, _ in (self.pair if is_pair else self.single) if not is_sequence)

    def process(self, encoding: Encoding, pair: Encoding | None, add_special_tokens: bool = True) -> Encoding:
        sequences = (encoding, pair)
        parts = []
        for is_sequence, name, type_id in (self.single if pair is None else self.pair):
            if is_sequence:
                index = 0 if name == "A" else 1
                sequence = sequences[index]
                if any(p is sequence for p in parts):       # a template naming a sequence twice
                    sequence = sequence.copy()
                n = len(sequence.ids)
                sequence.type_ids = [type_id] * n
                sequence.sequence_ids = [index] * n
                parts.append(sequence)
            elif add_special_tokens:
                ids, tokens = self.special_tokens[name]
                parts.append(Encoding.of_special(ids, tokens, type_id))
        if encoding.overflowing or (pair is not None and pair.overflowing):
            return Encoding.merge(parts)
        return Encoding.concat(parts)


def _template(s: Section, key: str, special: dict, sequences: tuple) -> list[tuple]:
    pieces = []
    for piece in s.sections(key):
        if len(piece.data) != 1 or next(iter(piece.data)) not in ("SpecialToken", "Sequence"):
            raise piece.error('expected {"SpecialToken": {...}} or {"Sequence": {...}}')
        kind = next(iter(piece.data))
        body = piece.required_section(kind)
        name, type_id = body.get("id", str), body.get("type_id", int, 0, at_most=U32_MAX)
        if kind == "Sequence" and name not in sequences:
            raise body.error(f"sequence {name!r} in the {key} template (expected {' or '.join(sequences)})", "id")
        if kind == "SpecialToken" and name not in special:
            raise body.error(f"special token {name!r} is not listed in special_tokens", "id")
        pieces.append((kind == "Sequence", name, type_id))
    return pieces


@PROCESSORS.register("BertProcessing")
class BertProcessing:
    @classmethod
    def from_config(cls, s: Section) -> TemplateProcessing:
        def token(key):
            value = s.get(key, list)
            if len(value) != 2 or not isinstance(value[0], str) or type(value[1]) is not int \
                    or not 0 <= value[1] <= U32_MAX:
                raise s.error(f'expected ["token", id] with an id in [0, {U32_MAX}]', key)
            return value[0], value[1]
        return TemplateProcessing.bert(token("cls"), token("sep"))


# "Ġ" (a byte-level space) and what Rust's char::is_whitespace calls whitespace
_SPACES = BYTE_CHARS[ord(" ")] + "".join(chr(c) for first, last in code_points(unicode_tables.SPLIT_SPACE)
                                         for c in range(first, last + 1))


@PROCESSORS.register("ByteLevel")
class ByteLevel:
    def __init__(self, trim_offsets: bool = True, add_prefix_space: bool = True):
        self.trim_offsets, self.add_prefix_space = trim_offsets, add_prefix_space

    @classmethod
    def from_config(cls, s: Section) -> ByteLevel:
        return cls(s.get("trim_offsets", bool, True), s.get("add_prefix_space", bool, True))

    def added_tokens(self, is_pair: bool) -> int:
        return 0

    def process(self, encoding: Encoding, pair: Encoding | None, add_special_tokens: bool = True) -> Encoding:
        if self.trim_offsets:
            for e in (encoding, pair):
                if e is not None:
                    for part in (e, *e.overflowing):
                        self._trim(part)
        return default_process(encoding, pair)

    def _trim(self, e: Encoding) -> None:
        offsets = e.offsets
        for i, token in enumerate(e.tokens):
            leading = len(token) - len(token.lstrip(_SPACES))
            trailing = len(token) - len(token.rstrip(_SPACES))
            if not (leading or trailing):
                continue
            start, stop = offsets[i]
            if leading:
                if (i == 0 or start == 0) and self.add_prefix_space and leading == 1:
                    leading = 0
                start = min(start + leading, stop)
            if trailing and stop >= trailing:
                stop = max(stop - trailing, start)
            offsets[i] = (start, stop)
