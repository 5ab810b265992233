"""A Tokenizer from a GGUF file's metadata: llama.cpp's `tokenizer.ggml.*` keys.

    from engine.text import Tokenizer
    tok = Tokenizer.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")    # or engine.load_gguf(...).metadata
    tok.encode("Hello!").ids, tok.chat_template, tok.special_tokens["eos_token"]

A GGUF has no tokenizer.json: it stores the vocabulary (`tokens`, with a `token_type` each), the
merges, the special token ids, add_bos/add_eos flags and the name of a pre-tokenizer (`pre`),
which the reader must know. Implemented: `model` "gpt2" (byte-level BPE) with the `pre` names in
SPLITS; anything else is refused with a TokenizerError naming the key.

Facts taken from the references, checked by tests/text/test_bpe_parity.py:
- transformers (integrations/gguf/gguf_tokenizer_mapping.py, 5.x) builds GPT2Tokenizer from the
  tokens and merges: a token with a character outside GPT-2's byte alphabet is respelled as its
  UTF-8 bytes; tokens of type CONTROL (3) whose characters are all in the alphabet become special
  added tokens, USER_DEFINED (4) ones plain added tokens (never normalized); bos/eos/unk/pad name
  special tokens; add_bos_token/add_eos_token put BOS/EOS around each sequence
  ("<bos> A <eos>", "<bos> A <eos> <bos> B:1 <eos>:1"). Its split is set only for the `pre` names
  in its own table; every other name, `smollm` and `gpt-2` among them, keeps GPT2Tokenizer's
  ByteLevel(add_prefix_space=false, use_regex=true): GPT-2's regex, numbers in runs.
- llama.cpp (src/llama-vocab.cpp) gives `smollm` the regexes of its StarCoder family, each run on
  the pieces of the one before: "\\p{N}" (every number character alone), then GPT-2's. By the
  evidence of the vocabulary (no merge involves an ASCII digit) SmolLM2 was trained with digits
  split so; a Digits(individual_digits) + ByteLevel tokenizer.json gives the same pieces (the
  tests compare both with `tokenizers`; llama.cpp itself is not run). The two readings differ
  where whitespace or a space precedes a number: "a  12" is "a", "ĠĠ", "1", "2" for llama.cpp and
  "a", "Ġ", "Ġ", "1", "2" for transformers; " ½" is "Ġ", "Â½" against "ĠÂ", "½". `reference`
  picks one; the default is transformers, the reference the tests compare ids with.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import TokenizerError
from .added_tokens import AddedToken
from .decoders import ByteLevel as ByteLevelDecoder
from .models import BPE
from .pre_tokenizers import BYTE_CHARS, ByteLevel, Digits, Sequence
from .processors import TemplateProcessing
from .truncation import Padding

CONTROL, USER_DEFINED = 3, 4            # llama.cpp's token types (gguf.TokenType)
REFERENCES = ("transformers", "llama.cpp")


def _gpt2_split():
    return ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2_split():
    return Sequence([Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)])


# tokenizer.ggml.pre -> {reference: the pre-tokenizer it builds for that name}
SPLITS = {
    "gpt-2": {"transformers": _gpt2_split, "llama.cpp": _gpt2_split},
    "smollm": {"transformers": _gpt2_split, "llama.cpp": _digits_then_gpt2_split},
}

_SPECIAL = (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"),
            ("pad_token", "padding_token_id"))
_ALPHABET = frozenset(BYTE_CHARS.values())


class _Metadata:
    """Typed reads of GGUF metadata; every error names the file and the key."""

    def __init__(self, metadata: Mapping, file: str | None):
        self.metadata, self.file = metadata, file

    def error(self, message: str, key: str) -> TokenizerError:
        return TokenizerError(message, file=self.file, field=key)

    def get(self, key: str, kind: type, required: bool = True):
        if key not in self.metadata:
            if required:
                raise self.error("missing metadata key", key)
            return None
        value = self.metadata[key]
        if kind is bool:
            ok = type(value) is bool
        elif kind is int:               # an int or a NumPy integer
            ok = type(value) is not bool and hasattr(value, "__index__") and not isinstance(value, str)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise self.error(f"expected {_NAMES.get(kind, kind.__name__)}, got {type(value).__name__}", key)
        return value

    def strings(self, key: str, required: bool = True) -> list[str] | None:
        values = self.metadata.get(key)
        if values is None:
            if required:
                raise self.error("missing metadata key", key)
            return None
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise self.error(f"expected an array of strings, got {type(values).__name__}", key)
        for i, value in enumerate(values):
            if isinstance(value, bytes):
                raise self.error("not UTF-8 text", f"{key}[{i}]")
            if not isinstance(value, str):
                raise self.error(f"expected a string, got {type(value).__name__}", f"{key}[{i}]")
        return list(values)

    def integers(self, key: str, length: int) -> list[int] | None:
        values = self.metadata.get(key)
        if values is None:
            return None
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise self.error(f"expected an array of integers, got {type(values).__name__}", key)
        values = values.tolist() if hasattr(values, "tolist") else list(values)
        for i, value in enumerate(values):
            if type(value) is bool or not hasattr(value, "__index__"):      # int or a NumPy integer
                raise self.error(f"expected an integer, got {type(value).__name__}", f"{key}[{i}]")
        if len(values) != length:
            raise self.error(f"{len(values)} entries for {length} tokens", key)
        return values

    def token_id(self, key: str, n_tokens: int) -> int | None:
        value = self.get(key, int, required=False)
        if value is not None:
            value = int(value)
        if value is not None and not 0 <= value < n_tokens:
            raise self.error(f"token id {value} is outside the vocabulary of {n_tokens} tokens", key)
        return value


_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


def tokenizer_parts(source, reference: str = "transformers") -> dict:
    """The parts of the Tokenizer a GGUF describes, for `Tokenizer.from_gguf` to assemble: its
    constructor's arguments (model, pre_tokenizer, post_processor, decoder, added_tokens) and what a
    GGUF says beyond them (chat_template, special_tokens, padding: what encode_batch_arrays pads
    with, or None). `source`: a path, an opened GGUF (engine.load_gguf) or its metadata mapping.
    `reference`: whose reading of the `pre` name to follow ("transformers", the default, or
    "llama.cpp"; see the module docstring)."""
    file = None
    if isinstance(source, (str, os.PathLike)):
        from ..site import load_gguf
        file = os.fspath(source)
        with load_gguf(source) as weights:
            metadata = weights.metadata
    elif isinstance(getattr(source, "metadata", None), Mapping):
        file, metadata = getattr(source, "name", None), source.metadata
    elif isinstance(source, Mapping):
        metadata = source
    else:
        raise TokenizerError(f"expected a GGUF path, file or metadata mapping, got {type(source).__name__}")
    if reference not in REFERENCES:
        raise TokenizerError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    m = _Metadata(metadata, file)

    model = m.get("tokenizer.ggml.model", str)
    if model != "gpt2":
        raise m.error(f"tokenizer model {model!r} is not implemented; this engine reads 'gpt2' (byte-level BPE)",
                      "tokenizer.ggml.model")
    pre = m.get("tokenizer.ggml.pre", str)
    if pre not in SPLITS:
        raise m.error(f"unknown pre-tokenizer {pre!r}; this engine implements {', '.join(sorted(SPLITS))}",
                      "tokenizer.ggml.pre")
    tokens = m.strings("tokenizer.ggml.tokens")
    if not tokens:
        raise m.error("the vocabulary is empty", "tokenizer.ggml.tokens")
    merges = m.strings("tokenizer.ggml.merges")
    types = m.integers("tokenizer.ggml.token_type", len(tokens)) or [1] * len(tokens)
    special_ids = {name: m.token_id(f"tokenizer.ggml.{key}", len(tokens)) for name, key in _SPECIAL}
    add_bos = m.get("tokenizer.ggml.add_bos_token", bool, required=False) or False
    add_eos = m.get("tokenizer.ggml.add_eos_token", bool, required=False) or False
    chat_template = m.get("tokenizer.chat_template", str, required=False)

    # tokens outside the byte alphabet are respelled as their bytes (transformers does this)
    vocab = {(token if _ALPHABET.issuperset(token) else "".join(BYTE_CHARS[b] for b in token.encode("utf-8"))): i
             for i, token in enumerate(tokens)}
    pairs = []
    for i, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise m.error(f'a merge is two tokens "a b", got {merge!r}', f"tokenizer.ggml.merges[{i}]")
        pairs.append((parts[0], parts[1]))
    bpe = BPE(vocab, pairs, file=file, field="tokenizer.ggml.merges")

    special = {name: tokens[i] for name, i in special_ids.items() if i is not None}
    added = [AddedToken(content, 0, special=True, normalized=False) for content in special.values()]
    added += [AddedToken(token, 0, special=True, normalized=False) for token, kind in zip(tokens, types)
              if kind == CONTROL and _ALPHABET.issuperset(token)]
    added += [AddedToken(token, 0, special=False, normalized=False) for token, kind in zip(tokens, types)
              if kind == USER_DEFINED and token in vocab]
    first = {}
    for token in added:                 # a token listed twice keeps its first mention
        first.setdefault(token.content, token)
    added = list(first.values())

    processor = None
    for flag, name, key in ((add_bos, "bos_token", "tokenizer.ggml.add_bos_token"),
                            (add_eos, "eos_token", "tokenizer.ggml.add_eos_token")):
        if flag and name not in special:
            raise m.error(f"asks for a {name} but the file gives no {name} id", key)
    if add_bos or add_eos:
        bos = [(False, special["bos_token"], 0)] if add_bos else []
        eos = [(False, special["eos_token"], 0)] if add_eos else []
        single = bos + [(True, "A", 0)] + eos
        pair = single + [(False, n, 1) for _, n, _ in bos] + [(True, "B", 1)] + [(False, n, 1) for _, n, _ in eos]
        processor = TemplateProcessing(single, pair, {special[name]: ([special_ids[name]], [special[name]])
                                                      for name, flag in (("bos_token", add_bos), ("eos_token", add_eos))
                                                      if flag})
    padding = None
    if "pad_token" in special:          # what encode_batch_arrays pads with (padding stays off)
        padding = Padding(pad_id=special_ids["pad_token"], pad_token=special["pad_token"])
    return {"model": bpe, "pre_tokenizer": SPLITS[pre][reference](), "post_processor": processor,
            "decoder": ByteLevelDecoder(), "added_tokens": added, "chat_template": chat_template,
            "special_tokens": special, "padding": padding, "file": file}
