"""Decoders: tokens -> text.

`decode_chain(tokens)` returns the tokens as strings to join (so decoders can be chained, as in
the reference's Sequence decoder); `decode(tokens)` joins them.

Facts taken from the reference (`tokenizers`, decoders/wordpiece.rs): the WordPiece decoder drops
the continuing-subword prefix ("##") from a token that has it and puts a space before every other
token but the first; with `cleanup` it then removes, token by token, the spaces that tokenization
put before punctuation and English contractions (" ." -> ".", " n't" -> "n't", " do not" ->
" don't", ...).

The ByteLevel decoder (decoders/byte_level.rs) turns each token's byte characters back into
bytes, a token holding any character outside the 256 (an added token such as "über€") giving its
own UTF-8 bytes instead, then reads all the bytes as UTF-8, each invalid or incomplete sequence
becoming one U+FFFD (Rust's from_utf8_lossy, Python's "replace": both follow Unicode's "maximal
subpart" practice).
"""
from __future__ import annotations

import re

from .config import Registry, Section
from .pre_tokenizers import BYTE_CHARS

DECODERS = Registry("decoder")

_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def cleanup(text: str) -> str:
    for dirty, clean in _CLEANUP:
        text = text.replace(dirty, clean)
    return text


class _Decoder:
    def decode(self, tokens: list[str]) -> str:
        return "".join(self.decode_chain(list(tokens)))


@DECODERS.register("WordPiece")
class WordPiece(_Decoder):
    def __init__(self, prefix: str = "##", cleanup: bool = True):
        self.prefix, self.cleanup = prefix, cleanup

    @classmethod
    def from_config(cls, s: Section) -> WordPiece:
        return cls(s.get("prefix", str, "##"), s.get("cleanup", bool, True))

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out, prefix = [], self.prefix
        for i, token in enumerate(tokens):
            if i:
                token = token[len(prefix):] if token.startswith(prefix) else " " + token
            out.append(cleanup(token) if self.cleanup else token)
        return out


@DECODERS.register("Sequence")
class Sequence(_Decoder):
    def __init__(self, steps: list):
        self.steps = steps

    @classmethod
    def from_config(cls, s: Section) -> Sequence:
        return cls([DECODERS.build(step) for step in s.sections("decoders")])

    def decode_chain(self, tokens: list[str]) -> list[str]:
        for step in self.steps:
            tokens = step.decode_chain(tokens)
        return tokens


_TO_LATIN1 = str.maketrans({c: chr(b) for b, c in BYTE_CHARS.items()})
_NOT_BYTE_CHAR = re.compile(f"[^{re.escape(''.join(BYTE_CHARS.values()))}]")


def byte_level_bytes(tokens: list[str]) -> bytes:
    """The bytes byte-level tokens stand for."""
    joined = "".join(tokens)
    if _NOT_BYTE_CHAR.search(joined) is None:
        return joined.translate(_TO_LATIN1).encode("latin-1")
    return b"".join(t.encode("utf-8") if _NOT_BYTE_CHAR.search(t) else t.translate(_TO_LATIN1).encode("latin-1")
                    for t in tokens)


@DECODERS.register("ByteLevel")
class ByteLevel(_Decoder):
    @classmethod
    def from_config(cls, s: Section) -> ByteLevel:
        return cls()

    def decode_chain(self, tokens: list[str]) -> list[str]:
        return [byte_level_bytes(tokens).decode("utf-8", "replace")]
