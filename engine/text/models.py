"""Models: one word -> its tokens. WordPiece (BERT) now; byte-level BPE joins it here.

`tokenize(word)` returns `(ids, tokens, spans)`, three tuples, `spans` being each token's
(start, stop) within the word. Results are cached per word in `model.cache` (a bounded dict, oldest
out first), which the tokenizer reads before calling tokenize: real text repeats its words, and a
hit skips all the work. A model also has token_to_id, id_to_token, get_vocab, get_vocab_size.

WordPiece, as the reference (`tokenizers`, models/wordpiece) does it: a word longer than
max_input_chars_per_word characters is one unk_token; otherwise take the longest prefix that is
in the vocabulary, then the longest vocabulary entry "##" + rest, and so on; if some position has
no match at all, the whole word is one unk_token. (Wu et al. 2016, arXiv:1609.08144, section 4.1;
Devlin et al. 2018, BERT.)
"""
from __future__ import annotations

from collections import OrderedDict

from .config import Registry, Section
from ..errors import TokenizerError

MODELS = Registry("model")

CACHE_WORDS = 20_000


def read_vocab(s: Section, key: str = "vocab") -> dict[str, int]:
    vocab = s.get(key, dict)
    for token, i in vocab.items():
        if type(i) is not int or i < 0:
            raise s.error(f"the id of {token!r} must be a non-negative integer, got {i!r}", key)
    return vocab


class Cache(OrderedDict):
    """A dict that forgets its oldest entry once it holds `capacity` of them. (An OrderedDict:
    evicting from a plain dict's front costs a scan over the holes earlier deletions left.)"""

    def __init__(self, capacity: int = CACHE_WORDS):
        super().__init__()
        self.capacity = capacity

    def put(self, key, value):
        if len(self) >= self.capacity:
            self.popitem(last=False)
        self[key] = value
        return value


@MODELS.register("WordPiece")
class WordPiece:
    def __init__(self, vocab: dict[str, int], unk_token: str = "[UNK]",
                 continuing_subword_prefix: str = "##", max_input_chars_per_word: int = 100,
                 file: str | None = None):
        self.vocab = vocab
        self.ids = {i: token for token, i in vocab.items()}
        self.unk_token = unk_token
        self.prefix = continuing_subword_prefix
        self.max_input_chars_per_word = max_input_chars_per_word
        self.file = file
        # no vocabulary entry is longer: the search for the longest match starts there
        self._longest = max(map(len, vocab), default=0)
        self._longest_continuing = max((len(t) - len(self.prefix) for t in vocab if t.startswith(self.prefix)),
                                       default=0)
        self.cache = Cache()

    @classmethod
    def from_config(cls, s: Section) -> WordPiece:
        return cls(read_vocab(s), s.get("unk_token", str, "[UNK]"), s.get("continuing_subword_prefix", str, "##"),
                   s.get("max_input_chars_per_word", int, 100), file=s.file)

    def token_to_id(self, token: str) -> int | None:
        return self.vocab.get(token)

    def id_to_token(self, i: int) -> str | None:
        return self.ids.get(i)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def get_vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, word: str) -> tuple:
        hit = self.cache.get(word)
        if hit is not None:
            return hit
        return self.cache.put(word, self._tokenize(word))

    def _tokenize(self, word: str) -> tuple:
        vocab, n = self.vocab, len(word)
        if n > self.max_input_chars_per_word:
            return self._unknown(n)
        i = vocab.get(word)
        if i is not None:
            return (i,), (word,), ((0, n),)
        ids, tokens, spans = [], [], []
        prefix, start = self.prefix, 0
        while start < n:
            if start == 0:
                stop = min(n, self._longest)
                while stop > 0 and word[:stop] not in vocab:
                    stop -= 1
                piece = word[:stop]
            else:
                stop = min(n, start + self._longest_continuing)
                while stop > start and prefix + word[start:stop] not in vocab:
                    stop -= 1
                piece = prefix + word[start:stop]
            if stop == start:
                return self._unknown(n)
            ids.append(vocab[piece])
            tokens.append(piece)
            spans.append((start, stop))
            start = stop
        return tuple(ids), tuple(tokens), tuple(spans)

    def _unknown(self, n: int) -> tuple:
        i = self.vocab.get(self.unk_token)
        if i is None:
            raise TokenizerError(f"a word is not in the vocabulary and neither is the unk_token {self.unk_token!r}",
                                 file=self.file, field="model.unk_token")
        return (i,), (self.unk_token,), ((0, n),)
