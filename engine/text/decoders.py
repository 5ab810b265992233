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

The SentencePiece decoders (decoders/byte_fallback.rs, fuse.rs, strip.rs, and Replace):
- Replace writes `content` for each match of its pattern in each token ("▁" -> " ").
- ByteFallback turns each run of byte tokens ("<0xE2>": six bytes, "<0x", two hexadecimal
  digits, ">") into the text of its bytes when they are UTF-8, else into one U+FFFD per token of
  the run; every other token passes as it is. So a character spelled over several byte tokens
  comes back whole, and a broken one as replacement characters.
- Fuse joins the tokens into one.
- Strip drops, from each token, up to `start` leading and up to `stop` trailing `content`
  characters (Llama's decoder: the space its pre-tokenizer put before the first word).
"""
from __future__ import annotations

import re

from .config import U32_MAX, Registry, Section
from .patterns import read_pattern
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


@DECODERS.register("Replace")
class Replace(_Decoder):
    def __init__(self, pattern: re.Pattern | str, content: str):
        """pattern: a compiled regex, or a string to find as it is."""
        self.literal = pattern if isinstance(pattern, str) else None
        self.pattern = None if isinstance(pattern, str) else pattern
        self.content = content

    @classmethod
    def from_config(cls, s: Section) -> Replace:
        return cls(read_pattern(s), s.get("content", str))

    def decode_chain(self, tokens: list[str]) -> list[str]:
        if self.literal is not None:
            return [t.replace(self.literal, self.content) for t in tokens] if self.literal else tokens
        return [self.pattern.sub(lambda m: self.content, t) for t in tokens]


_HEX = frozenset("0123456789abcdefABCDEF")


def fallback_byte(token: str) -> int | None:
    """The byte a byte-fallback token stands for ("<0x0A>" -> 10), else None. As the reference
    reads it (Rust's u8::from_str_radix on the two characters, which takes a leading "+")."""
    if len(token) != 6 or not token.startswith("<0x") or token[5] != ">":
        return None
    digits = token[3:5]
    if not (digits[1] in _HEX and (digits[0] in _HEX or digits[0] == "+")):
        return None
    return int(digits, 16)


@DECODERS.register("ByteFallback")
class ByteFallback(_Decoder):
    @classmethod
    def from_config(cls, s: Section) -> ByteFallback:
        return cls()

    def decode_chain(self, tokens: list[str]) -> list[str]:
        out, run = [], bytearray()
        for token in tokens:
            byte = fallback_byte(token)
            if byte is not None:
                run.append(byte)
                continue
            if run:
                out.append(_run_text(run))
                run = bytearray()
            out.append(token)
        if run:
            out.append(_run_text(run))
        return out


def _run_text(run: bytearray) -> str:
    try:
        return run.decode("utf-8")
    except UnicodeDecodeError:
        return "\ufffd" * len(run)


@DECODERS.register("Fuse")
class Fuse(_Decoder):
    @classmethod
    def from_config(cls, s: Section) -> Fuse:
        return cls()

    def decode_chain(self, tokens: list[str]) -> list[str]:
        return ["".join(tokens)]


@DECODERS.register("Strip")
class Strip(_Decoder):
    def __init__(self, content: str = " ", start: int = 0, stop: int = 0):
        self.content, self.start, self.stop = content, start, stop

    @classmethod
    def from_config(cls, s: Section) -> Strip:
        content = s.get("content", str)
        if len(content) != 1:
            raise s.error(f"expected one character, got {content!r}", "content")
        return cls(content, s.get("start", int, at_most=U32_MAX), s.get("stop", int, at_most=U32_MAX))

    def decode_chain(self, tokens: list[str]) -> list[str]:
        return [self._strip(t) for t in tokens]

    def _strip(self, token: str) -> str:
        c, begin, end = self.content, 0, len(token)
        while begin < min(self.start, end) and token[begin] == c:
            begin += 1
        while len(token) - end < self.stop and end > begin and token[end - 1] == c:
            end -= 1
        return token[begin:end]


def token_bytes(decoder, token: str) -> bytes:
    """The bytes one token adds to generated text, on its own: byte-level tokens' bytes, byte
    fallback tokens' byte, the rest after Replace steps (SentencePiece's "\u2581" as a space);
    Fuse and Strip, which act on a whole text, do nothing to one token in the middle of it."""
    if isinstance(decoder, ByteLevel):
        return byte_level_bytes([token])
    if isinstance(decoder, Sequence):
        for step in decoder.steps:
            if isinstance(step, ByteLevel):
                return byte_level_bytes([token])
            if isinstance(step, ByteFallback) and fallback_byte(token) is not None:
                return bytes((fallback_byte(token),))
            if isinstance(step, Replace):
                token = step.decode_chain([token])[0]
        return token.encode("utf-8")
    return (decoder.decode([token]) if decoder is not None else token).encode("utf-8")
