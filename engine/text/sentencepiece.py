"""SentencePiece's BPE as a GGUF stores it: a vocabulary with a score per token and no merges.

SentencePiece (Kudo and Richardson 2018, arXiv:1808.06226) merges, at each step, the neighbours
whose concatenation is the vocabulary's best-scored token. transformers reads such a GGUF by
writing the merges out (tokenization_utils_base.generate_merges, 5.x) and running ordinary
rank-based BPE over them (the `tokenizers` BPE model, as models.BPE here); this model ranks the
same merges without listing them, so that a 262,144-token vocabulary builds in milliseconds.

Facts taken from the reference (transformers' generate_merges and integrations/gguf), checked by
tests/text/test_gguf_sentencepiece.py against transformers loading the same files:
- a merge is any (a, b) whose concatenation a + b is a token; a token listed twice is the id of
  its last listing, and its score is the last listing's score;
- merges are ranked by the score of a + b (highest first), then the longer `a`, then the longer
  `b`, then the order in which a + b first appears in the vocabulary (Python's sort is stable);
- Gemma's files carry scores that do not follow its merge order: there the token's place in the
  vocabulary is its score (earlier is better), `scores=None` here.
"""
from __future__ import annotations

import numpy as np

from .models import BPE, Cache

# merges looked up so far are remembered; past this many, forgotten all at once
_REMEMBERED_MERGES = 1 << 20
# words longer than this (Gemma's pre-tokenizer leaves the whole text one word) are not cached
CACHE_LONGEST = 256


class ScoredBPE(BPE):
    def __init__(self, tokens: list[str], scores=None, unk_token: str | None = None, byte_fallback: bool = True,
                 fuse_unk: bool = True, file: str | None = None):
        """tokens: the vocabulary in id order (the same string twice: the later id is the token's);
        scores: one number per token (a higher score merges first), or None: earlier merges first.
        The rest as for BPE (byte_fallback: a character the vocabulary lacks is its <0xXX> tokens)."""
        self.vocab = vocab = dict(zip(tokens, range(len(tokens))))
        n = len(tokens)
        names = list(tokens)
        if len(vocab) != n:                    # a token listed twice: only its last id is the token's
            for i, token in enumerate(tokens):
                if vocab[token] != i:
                    names[i] = None
        self.ids = names
        self.unk_token, self.prefix, self.suffix = unk_token, "", ""
        self.fuse_unk, self.byte_fallback, self.ignore_merges = fuse_unk, byte_fallback, False
        self.file = file
        self.merges = _ImpliedMerges(names, vocab, scores, _first_listing(tokens, vocab))
        self.cache = Cache()

    def id_to_token(self, i: int) -> str | None:
        return self.ids[i] if 0 <= i < len(self.ids) else None

    def tokenize(self, word: str) -> tuple:
        if len(word) > CACHE_LONGEST:
            return self._tokenize(word)
        return super().tokenize(word)


def _first_listing(tokens: list[str], vocab: dict[str, int]) -> dict[int, int] | None:
    """id -> the index where its token is first listed, for the tokens listed twice (None: none is)."""
    if len(vocab) == len(tokens):
        return None
    first = {}
    for i, token in enumerate(tokens):
        first.setdefault(vocab[token], i)
    return {i: j for i, j in first.items() if i != j}


class _ImpliedMerges(dict):
    """(id of a, id of b) -> (rank, id of a + b), or None for a pair that does not merge; what
    BPE's `merges` dict holds, computed the first time a pair is asked for. A rank is one integer
    ordering the merges as the module docstring says."""

    def __init__(self, names: list, vocab: dict[str, int], scores, first: dict[int, int] | None):
        super().__init__()
        self.names, self.vocab, self.first = names, vocab, first
        longest = max(map(len, vocab), default=0)
        self.longest, self.width, self.n = longest, longest + 1, len(names)
        if scores is None:
            self.score_rank = None
        else:                                  # 0 for the highest score, 1 for the next, ...
            values = np.asarray(scores, dtype=np.float64)
            _, inverse = np.unique(-values, return_inverse=True)
            self.score_rank = inverse.reshape(-1).tolist()

    def __missing__(self, pair):
        a, b = pair
        left, right = self.names[a], self.names[b]
        merged = self.vocab.get(left + right)
        value = None
        if merged is not None:
            short_left, short_right = self.longest - len(left), self.longest - len(right)
            if self.score_rank is None:        # the place in the vocabulary is the score
                rank = merged * self.width + short_left
            else:
                first = merged if self.first is None else self.first.get(merged, merged)
                rank = ((self.score_rank[merged] * self.width + short_left) * self.width + short_right) * self.n + first
            value = (rank, merged)
        if len(self) >= _REMEMBERED_MERGES:
            self.clear()
        self[pair] = value
        return value

    def get(self, pair, default=None):
        value = self[pair]
        return default if value is None else value
