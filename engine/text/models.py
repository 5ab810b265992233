"""Models: one word -> its tokens. WordPiece (BERT) and BPE (GPT-2, SmolLM2, ...).

`tokenize(word)` returns `(ids, tokens, spans)`, three tuples, `spans` being each token's
(start, stop) within the word. Results are cached per word in `model.cache` (a bounded dict, oldest
out first), which the tokenizer reads before calling tokenize: real text repeats its words, and a
hit skips all the work. A model also has token_to_id, id_to_token, get_vocab, get_vocab_size.

WordPiece, as the reference (`tokenizers`, models/wordpiece) does it: a word longer than
max_input_chars_per_word characters is one unk_token; otherwise take the longest prefix that is
in the vocabulary, then the longest vocabulary entry "##" + rest, and so on; if some position has
no match at all, the whole word is one unk_token. (Wu et al. 2016, arXiv:1609.08144, section 4.1;
Devlin et al. 2018, BERT.)

BPE, as the reference does it (models/bpe/model.rs and word.rs; Sennrich et al. 2016,
arXiv:1508.07909; byte-level: Radford et al. 2019, GPT-2): a merge (a, b) with rank r (its place
in `merges`) joins neighbours a and b into a + b. Starting from the word's characters (the first
without, the others with continuing_subword_prefix; the last with end_of_word_suffix), the
current pair of lowest rank is merged, its leftmost occurrence first, until no pair has a merge.
A character the vocabulary lacks becomes its <0xXX> byte tokens (byte_fallback), else unk_token
(consecutive ones fused into one with fuse_unk), else nothing; an unk_token still open when byte
tokens come is written after them, as the reference does (model.rs merge_word). Where a character
was dropped or an unk_token moved so, offsets are the reference's: the symbols laid end to end by
their UTF-8 lengths (a dropped character moves the later ones back). With ignore_merges a word that is
itself in the vocabulary is that one token. A merge listed twice keeps its later rank.
"""
from __future__ import annotations

import heapq
import operator
from collections import OrderedDict

from .config import U32_MAX, Registry, Section
from ..errors import TokenizerError
from ..untrusted import shown

MODELS = Registry("model")

CACHE_WORDS = 20_000


def read_vocab(s: Section, key: str = "vocab") -> dict[str, int]:
    vocab = s.get(key, dict)
    for token, i in vocab.items():
        if type(i) is not int or not 0 <= i <= U32_MAX:
            raise s.error(f"the id of {shown(token)} must be a non-negative integer up to {U32_MAX}, got {shown(i)}",
                          key)
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


class _VocabModel:
    """What WordPiece and BPE share: the vocabulary both ways and a cache of tokenized words
    (subclasses set `vocab`, `ids` and `cache`, and write `_tokenize`)."""

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


@MODELS.register("WordPiece")
class WordPiece(_VocabModel):
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


@MODELS.register("BPE")
class BPE(_VocabModel):
    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]], unk_token: str | None = None,
                 continuing_subword_prefix: str = "", end_of_word_suffix: str = "", fuse_unk: bool = False,
                 byte_fallback: bool = False, ignore_merges: bool = False, file: str | None = None,
                 field: str = "model.merges"):
        """merges: (a, b) pairs, best first. Raises TokenizerError (naming `file` and `field[i]`)
        for a merge whose parts or result are not in the vocabulary."""
        self.vocab = vocab
        self.ids = {i: token for token, i in vocab.items()}
        self.unk_token = unk_token
        self.prefix, self.suffix = continuing_subword_prefix or "", end_of_word_suffix or ""
        self.fuse_unk, self.byte_fallback, self.ignore_merges = fuse_unk, byte_fallback, ignore_merges
        self.file = file
        # (id of a, id of b) -> (rank, id of the merged token)
        self.merges: dict[tuple[int, int], tuple[int, int]] = {}
        cut = len(self.prefix)
        if not cut and merges:              # the common case, in C (a 150,000-merge table in ~40 ms)
            firsts, seconds = zip(*merges)
            get = vocab.get
            a_ids, b_ids = list(map(get, firsts)), list(map(get, seconds))
            merged_ids = list(map(get, map(operator.add, firsts, seconds)))
            if None not in a_ids and None not in b_ids and None not in merged_ids:
                self.merges = dict(zip(zip(a_ids, b_ids), zip(range(len(merged_ids)), merged_ids)))
                merges = ()
        for rank, (a, b) in enumerate(merges):
            merged = a + b[cut:] if cut and b.startswith(self.prefix) else a + b
            for part in (a, b, merged):
                if part not in vocab:
                    raise TokenizerError(f"merge {a!r} + {b!r}: {part!r} is not in the vocabulary", file=file,
                                         field=f"{field}[{rank}]")
            self.merges[vocab[a], vocab[b]] = (rank, vocab[merged])
        self.cache = Cache()

    @classmethod
    def from_config(cls, s: Section) -> BPE:
        dropout = s.get("dropout", (float, int, type(None)), None)
        if dropout:
            raise s.error("BPE dropout (random merges) is not implemented; set it to null", "dropout")
        vocab = read_vocab(s)
        return cls(vocab, read_merges(s), s.get("unk_token", (str, type(None)), None),
                   s.get("continuing_subword_prefix", (str, type(None)), None) or "",
                   s.get("end_of_word_suffix", (str, type(None)), None) or "",
                   s.get("fuse_unk", bool, False), s.get("byte_fallback", bool, False),
                   s.get("ignore_merges", bool, False), file=s.file, field=s.where("merges"))

    def _tokenize(self, word: str) -> tuple:
        vocab = self.vocab
        if self.ignore_merges and word in vocab:
            return (vocab[word],), (word,), ((0, len(word)),)
        ids, spans = self._symbols(word)
        if len(ids) > LONG_WORD:
            ids, spans = self._merge_long(ids, spans)
        elif len(ids) > 1:
            merges, none = self.merges, (_NO_RANK, -1)
            pairs = [merges.get(pair, none) for pair in zip(ids, ids[1:])]    # pairs[i]: ids[i], ids[i + 1]
            while pairs:
                best = min(pairs)
                if best[0] == _NO_RANK:
                    break
                i = pairs.index(best)           # the leftmost occurrence of the best pair
                ids[i] = best[1]
                spans[i] = (spans[i][0], spans[i + 1][1])
                del ids[i + 1], spans[i + 1], pairs[i]
                if i:
                    pairs[i - 1] = merges.get((ids[i - 1], ids[i]), none)
                if i < len(pairs):
                    pairs[i] = merges.get((ids[i], ids[i + 1]), none)
        names = self.ids
        return tuple(ids), tuple(names[i] for i in ids), tuple(spans)

    def _merge_long(self, ids: list[int], spans: list) -> tuple[list[int], list]:
        """The same merges as _tokenize's loop, for long words: a heap of (rank, position, new id)
        and a linked list of symbols, as the reference's word.rs, instead of a scan per merge."""
        merges, n = self.merges, len(ids)
        following = list(range(1, n + 1))       # following[k]: the symbol after k (n: none)
        preceding = list(range(-1, n - 1))
        heap = []
        for k in range(n - 1):
            m = merges.get((ids[k], ids[k + 1]))
            if m is not None:
                heap.append((m[0], k, m[1]))
        heapq.heapify(heap)
        while heap:
            _, k, new = heapq.heappop(heap)
            j = following[k]
            if ids[k] < 0 or j >= n:
                continue
            m = merges.get((ids[k], ids[j]))
            if m is None or m[1] != new:        # an entry for a pair that has changed since
                continue
            ids[k], ids[j] = new, -1
            spans[k] = (spans[k][0], spans[j][1])
            after = following[k] = following[j]
            if after < n:
                preceding[after] = k
                m = merges.get((new, ids[after]))
                if m is not None:
                    heapq.heappush(heap, (m[0], k, m[1]))
            before = preceding[k]
            if before >= 0:
                m = merges.get((ids[before], new))
                if m is not None:
                    heapq.heappush(heap, (m[0], before, m[1]))
        kept = [k for k in range(n) if ids[k] >= 0]
        return [ids[k] for k in kept], [spans[k] for k in kept]

    def _symbols(self, word: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The word's characters as ids, with the span of the word each covers."""
        vocab, prefix, suffix = self.vocab, self.prefix, self.suffix
        if not prefix and not suffix:
            try:
                return [vocab[c] for c in word], [(k, k + 1) for k in range(len(word))]
            except KeyError:
                pass
        ids, spans, sizes = [], [], []          # sizes: each symbol's length in UTF-8 bytes
        unk = None                              # [id, start, stop, size] of a pending unknown run
        shifted = False                         # whether the spans must be the reference's (below)

        def flush():
            ids.append(unk[0])
            spans.append((unk[1], unk[2]))
            sizes.append(unk[3])

        last = len(word) - 1
        for k, c in enumerate(word):
            size = len(c.encode("utf-8", "surrogatepass"))
            piece = (prefix + c if k and prefix else c) + (suffix if k == last else "")
            i = vocab.get(piece)
            if i is not None:
                if unk is not None:
                    flush()
                    unk = None
                ids.append(i)
                spans.append((k, k + 1))
                sizes.append(size)
                continue
            if self.byte_fallback:
                fallback = [vocab.get(f"<0x{b:02X}>") for b in piece.encode("utf-8", "surrogatepass")]
                if None not in fallback:        # a pending unk_token stays pending: it follows the bytes
                    shifted = shifted or unk is not None or len(fallback) != size
                    ids += fallback
                    spans += [(k, k + 1)] * len(fallback)     # each byte token reports its character
                    sizes += [1] * len(fallback)
                    continue
            if self.unk_token is not None:
                unk_id = vocab.get(self.unk_token)
                if unk_id is None:
                    raise TokenizerError(f"a character is not in the vocabulary and neither is the unk_token "
                                         f"{self.unk_token!r}", file=self.file, field="model.unk_token")
                if unk is not None and self.fuse_unk:
                    unk[2], unk[3] = k + 1, unk[3] + size
                    continue
                if unk is not None:
                    flush()
                unk = [unk_id, k, k + 1, size]
            else:
                shifted = True                  # the character is dropped
        if unk is not None:
            flush()
        if shifted:
            spans = _spans_by_size(word, sizes)
        return ids, spans


def _spans_by_size(word: str, sizes: list[int]) -> list[tuple[int, int]]:
    """The spans the reference reports where symbols were dropped or reordered: it lays the
    symbols end to end by their UTF-8 lengths and gives each the characters its bytes fall in
    (so a dropped character moves later offsets back, as in `tokenizers`)."""
    char_of_byte = [k for k, c in enumerate(word) for _ in range(len(c.encode("utf-8", "surrogatepass")))]
    end = len(char_of_byte) - 1
    spans, at = [], 0
    for size in sizes:
        first, last = min(at, end), min(at + size - 1, end)
        spans.append((char_of_byte[first], char_of_byte[last] + 1))
        at += size
    return spans


_NO_RANK = float("inf")             # above every rank, however large (scored merges rank with big ints)
# words of more symbols than this merge through a heap (O(n log n)); shorter ones scan the pairs
# for the best (O(n) in C per merge, faster for the words of ordinary text)
LONG_WORD = 16


def read_merges(s: Section, key: str = "merges") -> list[tuple[str, str]]:
    """tokenizer.json merges: "a b" strings (older files) or ["a", "b"] pairs."""
    merges = []
    for i, merge in enumerate(s.get(key, list)):
        if isinstance(merge, str):
            parts = merge.split(" ")
        elif isinstance(merge, list) and all(isinstance(part, str) for part in merge):
            parts = merge
        else:
            raise s.error(f'expected "a b" or ["a", "b"], got {merge!r}', f"{key}[{i}]")
        if len(parts) != 2:
            raise s.error(f"a merge joins two tokens, got {merge!r}", f"{key}[{i}]")
        merges.append((parts[0], parts[1]))
    return merges
