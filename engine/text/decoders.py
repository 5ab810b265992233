"""Decoders: tokens -> text.

`decode_chain(tokens)` returns the tokens as strings to join (so decoders can be chained, as in
the reference's Sequence decoder); `decode(tokens)` joins them.

Facts taken from the reference (`tokenizers`, decoders/wordpiece.rs): the WordPiece decoder drops
the continuing-subword prefix ("##") from a token that has it and puts a space before every other
token but the first; with `cleanup` it then removes, token by token, the spaces that tokenization
put before punctuation and English contractions (" ." -> ".", " n't" -> "n't", " do not" ->
" don't", ...).
"""
from __future__ import annotations

from .config import Registry, Section

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
