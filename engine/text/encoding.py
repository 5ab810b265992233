"""Encoding: the tokens of one input, with everything a model or a user asks of them.

Names follow the `tokenizers` package (Encoding.ids, .tokens, .type_ids, .attention_mask,
.offsets, .word_ids, .special_tokens_mask, .sequence_ids, .overflowing), and so do truncate,
merge and pad, which reproduce its rules (tokenizer/encoding.rs) so that overflowing parts,
offsets and masks come out the same.
"""
from __future__ import annotations

from ..errors import InputError

_FIELDS = ("ids", "type_ids", "tokens", "offsets", "word_ids", "special_tokens_mask", "attention_mask",
           "sequence_ids")


class Encoding:
    """ids, type_ids, tokens, offsets ((start, stop) in the input text, in characters; (0, 0) for
    tokens the post-processor or the padding added), word_ids, special_tokens_mask (1 for added
    and padding tokens), attention_mask (0 for padding), sequence_ids (0 or 1 for the tokens of the
    first or second text, None elsewhere), and overflowing: the parts that truncation cut off, each
    an Encoding of its own. `truncated` says whether there were any."""

    __slots__ = _FIELDS + ("overflowing",)

    def __init__(self, ids, type_ids, tokens, offsets, word_ids, special_tokens_mask, attention_mask,
                 sequence_ids, overflowing=None):
        self.ids = ids
        self.type_ids = type_ids
        self.tokens = tokens
        self.offsets = offsets
        self.word_ids = word_ids
        self.special_tokens_mask = special_tokens_mask
        self.attention_mask = attention_mask
        self.sequence_ids = sequence_ids
        self.overflowing = [] if overflowing is None else overflowing

    @classmethod
    def of_sequence(cls, ids: list, tokens: list, offsets: list, word_ids: list, type_id: int,
                    sequence_id: int = 0) -> Encoding:
        n = len(ids)
        return cls(ids, [type_id] * n, tokens, offsets, word_ids, [0] * n, [1] * n, [sequence_id] * n)

    @classmethod
    def of_special(cls, ids: list, tokens: list, type_id: int) -> Encoding:
        n = len(ids)
        return cls(list(ids), [type_id] * n, list(tokens), [(0, 0)] * n, [None] * n, [1] * n, [1] * n,
                   [None] * n)

    @property
    def truncated(self) -> bool:
        return bool(self.overflowing)

    @property
    def words(self) -> list:
        return self.word_ids

    @property
    def n_sequences(self) -> int:
        return len({s for s in self.sequence_ids if s is not None})

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        more = f", overflowing=[...{len(self.overflowing)}]" if self.overflowing else ""
        return f"Encoding(num_tokens={len(self.ids)}, tokens={self.tokens[:8]}{'...' if len(self) > 8 else ''}{more})"

    def copy(self) -> Encoding:
        return Encoding(*(list(getattr(self, f)) for f in _FIELDS), [o.copy() for o in self.overflowing])

    def _slice(self, start: int, stop: int) -> Encoding:
        return Encoding(*(getattr(self, f)[start:stop] for f in _FIELDS))

    def truncate(self, max_length: int, stride: int = 0, direction: str = "right") -> None:
        """Keep max_length tokens; the rest becomes `overflowing`: further windows of max_length
        tokens, each starting `stride` tokens before the previous one ended."""
        n = len(self.ids)
        if max_length >= n:
            return
        if max_length == 0:
            whole = self.copy()
            for f in _FIELDS:
                setattr(self, f, [])
            self.overflowing = [whole]
            return
        if stride >= max_length:
            raise InputError(f"stride ({stride}) must be less than the length truncated to ({max_length}), "
                             "which excludes the special tokens")
        step = max_length - stride
        windows = []
        if direction == "right":
            for start in range(0, n, step):
                stop = min(start + max_length, n)
                windows.append((start, stop))
                if stop == n:
                    break
        else:
            for last in range(n - 1, -1, -step):
                start = max(0, last + 1 - max_length)
                windows.append((start, last + 1))
                if start == 0:
                    break
        kept, *overflowing = [self._slice(start, stop) for start, stop in windows]
        for f in _FIELDS:
            setattr(self, f, getattr(kept, f))
        self.overflowing = overflowing

    def merge_with(self, other: Encoding) -> None:
        """Append `other`; the overflowing parts combine as the reference's do (each of ours with
        `other` and its parts, then ourselves with each of its parts)."""
        overflowing = []
        for mine in self.overflowing:
            combined = mine.copy()
            combined.merge_with(other.copy())
            overflowing.append(combined)
            for theirs in other.overflowing:
                combined = mine.copy()
                combined.merge_with(theirs.copy())
                overflowing.append(combined)
        for theirs in other.overflowing:
            combined = self.copy()
            combined.merge_with(theirs.copy())
            overflowing.append(combined)
        for f in _FIELDS:
            getattr(self, f).extend(getattr(other, f))
        self.overflowing = overflowing

    @staticmethod
    def concat(encodings: list[Encoding]) -> Encoding:
        """The encodings one after the other, in new lists (overflowing parts are not looked at)."""
        fields = []
        for f in _FIELDS:
            joined = []
            for e in encodings:
                joined += getattr(e, f)
            fields.append(joined)
        return Encoding(*fields)

    @staticmethod
    def merge(encodings: list[Encoding]) -> Encoding:
        if not encodings:
            return Encoding([], [], [], [], [], [], [], [])
        merged = encodings[0]
        for other in encodings[1:]:
            merged.merge_with(other)
        return merged

    def pad(self, length: int, pad_id: int = 0, pad_type_id: int = 0, pad_token: str = "[PAD]",
            direction: str = "right") -> None:
        """Pad (it and its overflowing parts) to `length` tokens with pad tokens that the attention
        mask hides."""
        for o in self.overflowing:
            o.pad(length, pad_id, pad_type_id, pad_token, direction)
        missing = length - len(self.ids)
        if missing <= 0:
            return
        fill = {"ids": [pad_id] * missing, "type_ids": [pad_type_id] * missing, "tokens": [pad_token] * missing,
                "offsets": [(0, 0)] * missing, "word_ids": [None] * missing,
                "special_tokens_mask": [1] * missing, "attention_mask": [0] * missing,
                "sequence_ids": [None] * missing}
        for f in _FIELDS:
            if direction == "right":
                getattr(self, f).extend(fill[f])
            else:
                setattr(self, f, fill[f] + getattr(self, f))
