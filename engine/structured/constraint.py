"""Constrained decoding on a model's own vocabulary: which tokens may come next so that the
answer stays a prefix of the grammar's language (machine.py), and ends within its token budget.

    grammar = Grammar(compile_schema(schema), tokenizer)      # once per schema and tokenizer
    constraint = grammar.start(budget=256, eos_ids={2})
    token = constraint.choose(logits, pick)                    # pick(logits) -> id
    constraint.advance(token)

The cost per step is kept off the common path, as llama.cpp's sampler does it (its facts: sample
first, check the one token, and mask the whole vocabulary only when that token does not fit):
`choose` walks the sampled token's bytes through the machine (transitions cached by state), and
only when they do not fit builds the mask of every allowed token, cached by state. The mask
walks the vocabulary sorted by bytes, so a shared prefix is walked once and a dead prefix cuts
all the tokens under it; inside a free string, the tokens of plain string bytes (no quote,
backslash or control byte, UTF-8 that continues what is pending) are allowed as one
precomputed array, and only the others are walked.

The budget: a token fits only when the shortest completion after it (machine.rest), spelt with
the longest tokens that start what is left, still fits the tokens left, so an answer cut by
max_tokens is still whole JSON; where nothing sampled fits, the longest token that starts the
shortest completion is forced.
"""
from __future__ import annotations

from bisect import bisect_left

import numpy as np

from ..errors import InputError
from . import machine

_CACHE = 100_000                 # transitions and completions kept per grammar before they are dropped
_MASKS = 256                     # masks kept per grammar, packed 8 tokens a byte (Qwen2.5's: 19 KB each)
_PENDING = (0, (1, 0x80, 0xBF), (2, 0xA0, 0xBF), (2, 0x80, 0xBF), (2, 0x80, 0x9F), (3, 0x90, 0xBF),
            (3, 0x80, 0xBF), (3, 0x80, 0x8F))


class Vocabulary:
    """A tokenizer's tokens as bytes (Tokenizer.token_bytes), sorted for prefix walks, with the
    plain-string tokens' classes; one per tokenizer and logits width."""

    def __init__(self, pieces: list, size: int):
        self.size = size
        self.pieces = list(pieces[:size]) + [None] * (size - len(pieces))
        listed = sorted((p, i) for i, p in enumerate(self.pieces) if p)
        self.keys = [p for p, _ in listed]
        self.ids = np.array([i for _, i in listed], np.int64)
        self.index = {p: i for p, i in reversed(listed)}
        self.longest = max(map(len, self.keys), default=0)
        plain = {p: np.zeros(size, bool) for p in _PENDING}
        self.chars = np.zeros(size, np.int64)
        other = []
        for piece, i in listed:
            ok = False
            for pending in _PENDING:
                walked = _plain_walk(piece, pending)
                if walked is not None:
                    plain[pending][i], self.chars[i], ok = True, walked, True
            if not ok:
                other.append((piece, i))
        self.plain = plain
        self.other_keys = [p for p, _ in other]
        self.other_ids = np.array([i for _, i in other], np.int64)

    def piece(self, token: int) -> bytes | None:
        """A token's bytes; None for a special token or an id past the vocabulary."""
        return self.pieces[token] if 0 <= token < self.size else None

    def longest_prefix(self, text: bytes) -> int | None:
        """The id of the longest token that `text` starts with."""
        for n in range(min(len(text), self.longest), 0, -1):
            i = self.index.get(text[:n])
            if i is not None:
                return i
        return None

    def split(self, text: bytes) -> list[int]:
        """`text` as tokens, longest first (a bound on the tokens it takes, not the tokenizer's way)."""
        out = []
        while text:
            i = self.longest_prefix(text)
            if i is None:
                raise InputError(f"the vocabulary has no token for the byte {text[:1]!r} the format needs")
            out.append(i)
            text = text[len(self.pieces[i]):]
        return out

    @classmethod
    def of(cls, tokenizer, size: int) -> "Vocabulary":
        cached = getattr(tokenizer, "_vocabulary", None)
        if cached is None or cached.size != size:
            cached = cls(tokenizer.token_bytes(), size)
            tokenizer._vocabulary = cached
        return cached


def _plain_walk(piece: bytes, pending):
    """The characters a token adds inside a free string, starting with `pending` UTF-8
    continuation bytes due; None where it is not plain string content from there."""
    chars = 0
    for b in piece:
        if pending:
            more, lo, hi = pending
            if not lo <= b <= hi:
                return None
            pending = (more - 1, 0x80, 0xBF) if more > 1 else 0
            continue
        if b < 0x20 or b in (34, 92):
            return None
        chars += 1
        if b >= 0x80:
            pending = machine._lead(b)
            if pending is None:
                return None
    return chars


class Grammar:
    """A compiled schema over one vocabulary, with exact text around it (a tool call's wrapper);
    its caches serve every answer that uses it."""

    def __init__(self, node, tokenizer, size: int, before: bytes = b"", after: bytes = b""):
        self.vocab = Vocabulary.of(tokenizer, size)
        self.first = machine.initial(node, before, after)
        self.moves: dict = {}
        self.masks: dict = {}
        self.rests: dict = {}

    def move(self, state, b: int):
        key = (state, b)
        try:
            return self.moves[key]
        except KeyError:
            if len(self.moves) > _CACHE:
                self.moves.clear()
            new = self.moves[key] = machine.step(state, b)
            return new

    def walk(self, state, piece: bytes):
        for b in piece:
            state = self.move(state, b)
            if state is None:
                return None
        return state

    def rest(self, state) -> bytes:
        """The shortest completion from `state` (machine.rest)."""
        return self._rest(state)[0]

    def cost(self, state) -> int:
        """The tokens the shortest completion takes, each the longest token that starts what is
        left (as the forced path writes it)."""
        return self._rest(state)[1]

    def _rest(self, state) -> tuple[bytes, int]:
        known = self.rests.get(state)
        if known is None:
            if len(self.rests) > _CACHE:
                self.rests.clear()
            text = machine.rest(state)
            known = self.rests[state] = (text, len(self.vocab.split(text)))
        return known

    def mask(self, state) -> np.ndarray:
        """Every token that may come next from `state` (end-of-sequence aside)."""
        packed = self.masks.get(state)
        if packed is not None:
            return np.unpackbits(packed, count=self.vocab.size).view(bool)
        vocab = self.vocab
        mask = np.zeros(vocab.size, bool)
        string = _free_string(state)
        if string is not None:
            node, length, pending = string
            mask |= vocab.plain[pending]
            if node.high is not None:
                mask &= vocab.chars <= node.high - length
            keys, ids = vocab.other_keys, vocab.other_ids
        else:
            keys, ids = vocab.keys, vocab.ids
        found: list[int] = []
        self._walk_sorted(state, keys, 0, len(keys), 0, found)
        mask[ids[found]] = True
        if len(self.masks) >= _MASKS:
            self.masks.pop(next(iter(self.masks)))
        self.masks[state] = np.packbits(mask)
        return mask

    def _walk_sorted(self, state, keys, lo: int, hi: int, depth: int, found: list) -> None:
        """Add to `found` the positions in keys[lo:hi] (which share their first `depth` bytes,
        walked to `state`) of the tokens the machine takes whole."""
        while lo < hi and len(keys[lo]) == depth:
            found.append(lo)
            lo += 1
        while lo < hi:
            b = keys[lo][depth]
            end = hi if b == 255 else bisect_left(keys, keys[lo][:depth] + bytes((b + 1,)), lo, hi)
            after = self.move(state, b)
            if after is not None:
                self._walk_sorted(after, keys, lo, end, depth + 1, found)
            lo = end

    def start(self, budget: int, eos_ids) -> "Constraint":
        """An answer's constraint, `budget` tokens at most."""
        shortest = self.cost(self.first)
        if shortest > budget:
            raise InputError(f"max_tokens = {budget} cannot hold the shortest answer the format allows "
                             f"({shortest} tokens: {self.rest(self.first).decode(errors='replace')!r})")
        return Constraint(self, budget, eos_ids)


def _free_string(state):
    """(node, length, pending) where `state` is one alternative inside a string with no escape
    under way, else None."""
    if len(state) != 1 or state[0][0] is None:
        return None
    frame = state[0][0][0]
    if frame[0] != "S" or frame[4] != 0:
        return None
    return frame[1], frame[2], frame[3]


class Constraint:
    """One answer's walk through a grammar: the state, the tokens left, what may come next."""

    def __init__(self, grammar: Grammar, budget: int, eos_ids):
        self.grammar, self.state, self.left = grammar, grammar.first, budget
        self.eos_ids = sorted(int(i) for i in eos_ids)
        self.masked = self.forced = 0

    @property
    def complete(self) -> bool:
        """Whether what came so far is a whole answer."""
        return machine.ends(self.state)

    @property
    def done(self) -> bool:
        """Whether nothing but whitespace may follow."""
        return all(stack is None for stack, _ in self.state)

    def fits(self, token: int) -> bool:
        """Whether `token` may come next (its bytes walk, and what must follow still fits)."""
        if token in self.eos_ids:
            return self.complete
        piece = self.grammar.vocab.piece(token)
        if not piece:
            return False
        after = self.grammar.walk(self.state, piece)
        return after is not None and self.grammar.cost(after) <= self.left - 1

    def allowed(self) -> np.ndarray:
        """The mask (V,) of the tokens the grammar takes next (the budget checked on the one chosen)."""
        mask = self.grammar.mask(self.state)
        if self.complete and self.eos_ids:
            mask = mask.copy()
            mask[[i for i in self.eos_ids if i < mask.size]] = True
        return mask

    def choose(self, logits: np.ndarray, pick) -> int:
        """pick(logits) if that token fits, else pick over the allowed tokens' logits, else the
        shortest completion's next token."""
        token = pick(logits)
        if self.fits(token):
            return token
        self.masked += 1
        masked = np.where(self.allowed(), logits, -np.inf)
        token = pick(masked)
        if np.isfinite(masked[token]) and self.fits(token):
            return token
        self.forced += 1
        return self._shortest_token()

    def _shortest_token(self) -> int:
        """The longest token that starts the shortest completion (end-of-sequence where it is done)."""
        rest = self.grammar.rest(self.state)
        return self.grammar.vocab.split(rest[:self.grammar.vocab.longest])[0] if rest else self.eos_ids[0]

    def advance(self, token: int) -> None:
        self.left -= 1
        if token in self.eos_ids:
            return
        self.state = self.grammar.walk(self.state, self.grammar.vocab.pieces[token])


class Triggered:
    """Free text until `trigger` (bytes) is written, then the grammar until its text is done, then
    free again: tool_choice "auto", where the model decides whether to call. `bare`: a grammar
    that applies when the answer's first token starts it (a call written without its tags)."""

    def __init__(self, grammar: Grammar, trigger: bytes, budget: int, eos_ids, bare: Grammar | None = None):
        self.grammar, self.trigger, self.left, self.eos_ids, self.bare = grammar, trigger, budget, eos_ids, bare
        self.tail, self.inner, self.fresh = b"", None, True
        self.masked = self.forced = 0

    @property
    def complete(self) -> bool:
        return self.inner is None

    def choose(self, logits: np.ndarray, pick) -> int:
        if self.inner is None:
            token = pick(logits)
            if not (self.fresh and self.bare is not None):
                return token
            if not (self.grammar.vocab.piece(token) or b"").lstrip().startswith(b"{"):
                return token
            self.inner = Constraint(self.bare, self.left, self.eos_ids)
        return self.inner.choose(logits, pick)

    def advance(self, token: int) -> None:
        self.left -= 1
        self.fresh = False
        if self.inner is not None:
            self.inner.advance(token)
            if self.inner.done:
                self.masked += self.inner.masked
                self.forced += self.inner.forced
                self.inner, self.tail = None, b""
            return
        self.tail = (self.tail + (self.grammar.vocab.piece(token) or b""))[-len(self.trigger):]
        if self.tail == self.trigger:
            self.inner = Constraint(self.grammar, max(self.left, 0), self.eos_ids)


class Trigger:
    """A grammar that applies once `trigger` is written (Generator.tokens' `grammar`, as Grammar),
    and `bare` where the answer starts with it."""

    def __init__(self, grammar: Grammar, trigger: bytes, bare: Grammar | None = None):
        self.grammar, self.trigger, self.bare = grammar, trigger, bare

    def start(self, budget: int, eos_ids) -> Triggered:
        return Triggered(self.grammar, self.trigger, budget, eos_ids, self.bare)


class Ban:
    """Tokens that may not come, as a grammar (tool_choice "none": the tag that opens a call)."""

    masked = forced = 0
    complete = True

    def __init__(self, ids):
        self.ids = [int(i) for i in ids]

    def start(self, budget: int, eos_ids) -> "Ban":
        return self

    def choose(self, logits: np.ndarray, pick) -> int:
        logits = np.array(logits, copy=True)
        logits[self.ids] = -np.inf
        return pick(logits)

    def advance(self, token: int) -> None:
        pass
