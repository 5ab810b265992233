"""Small GGUFs that hold a tokenizer and no tensors, written with gguf-py's GGUFWriter, for the
tests to load with Tokenizer.from_gguf and with transformers alike.

- write_gguf(path, architecture, **fields): the file; each field goes to GGUFWriter.add_<field>.
- sentencepiece_vocabulary(): a SentencePiece BPE vocabulary learned here, deterministically
  (the most frequent pair merged first, ties by the pair's text), from the Latin-script
  characters of the corpus's handwritten texts (every other character is left to byte fallback):
  its pieces with "▁" for spaces, a score each (-rank, as SentencePiece writes them), the control
  tokens, the 256 byte tokens.
- byte_level_subset(metadata, n): the first n tokens of a byte-level vocabulary (all 256 byte
  characters kept) with the merges that stay inside them, for a quick transformers load.
"""
from __future__ import annotations

import collections
from functools import lru_cache

from tests.helpers import need_import
from tests.text.corpus import HANDWRITTEN

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def write_gguf(path, architecture: str, **fields) -> None:
    gguf = need_import("gguf", "the tests write GGUF files with gguf-py")
    writer = gguf.GGUFWriter(str(path), architecture)
    for name, value in fields.items():
        getattr(writer, f"add_{name}")(value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@lru_cache(maxsize=None)
def _learned(merges: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(characters, merged pieces in the order learned)."""
    words = collections.Counter()
    for text in HANDWRITTEN:                # Latin script only: other characters fall back to bytes
        text = "".join(c for c in text if c < "\u0250")
        for line in ("▁" + text.replace(" ", "▁")).split("\n"):
            if line:
                words[line] += 1
    pieces = {word: list(word) for word in words}
    learned = []
    for _ in range(merges):
        pairs = collections.Counter()
        for word, count in words.items():
            symbols = pieces[word]
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        if not pairs:
            break
        (a, b), _ = min(pairs.items(), key=lambda item: (-item[1], item[0]))
        learned.append(a + b)
        for word in words:
            symbols, out, i = pieces[word], [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            pieces[word] = out
    characters = sorted({c for word in words for c in word} - set(learned))
    return tuple(characters), tuple(learned)


def sentencepiece_vocabulary(merges: int = 400, head=(("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL)),
                             byte_tokens: bool = True) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types): `head` first, then the byte tokens (score 0), the learned
    pieces (score -rank), the characters (below every piece)."""
    characters, learned = _learned(merges)
    taken = {token for token, _ in head}
    tokens = [token for token, _ in head] + (BYTE_TOKENS if byte_tokens else [])
    types = [kind for _, kind in head] + ([BYTE] * 256 if byte_tokens else [])
    scores = [0.0] * len(tokens)
    body = [t for t in learned if t not in taken] + [c for c in characters if c not in taken]
    tokens += body
    types += [NORMAL] * len(body)
    scores += [-float(i) for i in range(len(body))]
    return tokens, scores, types


def byte_level_subset(metadata, n: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges): the first n tokens of a byte-level GGUF vocabulary, the
    byte characters it lacks added, and the merges whose parts and result are among them."""
    from engine.text.pre_tokenizers import BYTE_CHARS
    tokens = list(metadata["tokenizer.ggml.tokens"][:n])
    types = [int(t) for t in metadata["tokenizer.ggml.token_type"][:n]]
    for c in BYTE_CHARS.values():
        if c not in tokens:
            tokens.append(c)
            types.append(NORMAL)
    kept = set(tokens)
    merges = [m for m in metadata["tokenizer.ggml.merges"]
              if (parts := m.split(" ")) and parts[0] in kept and parts[1] in kept and parts[0] + parts[1] in kept]
    return tokens, types, merges
