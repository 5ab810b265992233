"""A Tokenizer from a GGUF file's metadata: llama.cpp's `tokenizer.ggml.*` keys.

    from engine.text import Tokenizer
    tok = Tokenizer.from_gguf("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")    # or engine.load_gguf(...).metadata
    tok.encode("Hello!").ids, tok.chat_template, tok.special_tokens["eos_token"]

A GGUF has no tokenizer.json: it stores the vocabulary (`tokens`, with a `token_type` each, and
for SentencePiece a `scores` each), the merges of a byte-level BPE, the special token ids,
add_bos/add_eos flags and the name of a pre-tokenizer (`pre`), which the reader must know; the
rest follows from the kind of vocabulary (`model`) and, for SentencePiece, from the model's
architecture (`general.architecture`). Implemented:
- `model` "gpt2": byte-level BPE, split as `pre` says (gguf_pre.py: Llama 3, Qwen 2/2.5/3,
  Qwen 3.5, Tekken, GPT-4o/Llama 4, SmolLM, GPT-2 and every other name llama.cpp knows);
- `model` "llama": SentencePiece BPE with byte fallback (Llama 2, Mistral v0.1-v0.3, Phi-3,
  Gemma 1-3), its merges implied by the scores (sentencepiece.py);
- `model` "gemma4": Gemma's pipeline over the merges the file lists.
Any other `model` ("bert", "t5", "rwkv", ...), a `pre` neither reference knows, a vocabulary
that is malformed or absurdly large (MAX_TOKENS, MAX_MERGES, MAX_TOKEN_LENGTH), byte tokens
that are not the 256 "<0xNN>": a TokenizerError naming the file and the key.

Facts taken from the reference, transformers 5.x (integrations/gguf/gguf_tokenizer_mapping.py,
tokenization_utils_tokenizers.py), checked by tests/text/test_gguf_parity.py (real files),
test_gguf_sentencepiece.py and test_gguf_pre.py (files written there), test_bpe_parity.py:
- "gpt2": GPT2Tokenizer from the tokens and merges; a token with a character outside GPT-2's
  byte alphabet is respelled as its UTF-8 bytes; the split as gguf_pre.py says.
- "llama": a BPE with byte_fallback and fuse_unk from the tokens, with merges generated from
  the scores (sentencepiece.py says how); the rest by architecture:
  - gemma, gemma2, gemma3: a token of spaces only is respelled "▁" times its length and merges
    follow the vocabulary's order, not the scores; normalizer Replace(" ", "▁"), pre-tokenizer
    Split(" ", merged_with_previous) (which then never splits: the whole text between added
    tokens is one word), unk_token "<unk>"; decoder Replace("▁", " "), ByteFallback, Fuse;
  - phi3: normalizer Prepend("▁") then Replace(" ", "▁") (every piece between added tokens
    gets its "▁"), no pre-tokenizer, no unk_token; decoder as Llama's;
  - any other (llama, mistral, ...): pre-tokenizer Metaspace("▁", prepend_scheme "first",
    no split): only the text's start gets a "▁"; no unk_token (a character with neither a token
    nor byte tokens is dropped); decoder Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0).
  A file without add_bos_token adds BOS (llama.cpp's default for SentencePiece) when it names
  one. `tokenizer.ggml.add_space_prefix` is not read (llama.cpp reads it); a file that lists
  merges has them used as they are.
- "gemma4": as Gemma's, over the file's merges (without them, merges from the scores), and
  never a BOS (its chat template writes `<bos>`).
- Added tokens: CONTROL (3) tokens become special (for "gpt2" only those spelled in the byte
  alphabet: llama.cpp mislabels others), USER_DEFINED (4) ones plain added tokens, if the
  vocabulary (respelled) has them; none normalized; then bos/eos/unk/pad name special tokens.
  add_bos_token/add_eos_token put BOS/EOS around each sequence ("<bos> A <eos>",
  "<bos> A <eos> <bos> B:1 <eos>:1").
`reference="llama.cpp"` follows llama.cpp's reading of `pre` where gguf_pre.py implements it
(it is refused for the other names and for SentencePiece, whose llama.cpp tokenizer is its own).
"""
from __future__ import annotations

import operator
import os
from collections.abc import Mapping
from itertools import compress, repeat

import numpy as np

from ..errors import TokenizerError
from .added_tokens import AddedToken
from .decoders import ByteFallback, Fuse, Replace as ReplaceDecoder, Sequence as DecoderSequence, Strip
from .decoders import ByteLevel as ByteLevelDecoder
from .gguf_pre import SPLITS
from .models import BPE
from .normalizers import Prepend, Replace, Sequence as NormalizerSequence
from .patterns import compile_regex
from .pre_tokenizers import BYTE_CHARS, Metaspace, Split
from .processors import TemplateProcessing
from .sentencepiece import ScoredBPE
from .truncation import Padding

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6     # llama.cpp's token types
REFERENCES = ("transformers", "llama.cpp")
MAX_TOKENS = 1 << 22                    # vocabularies run to ~262,000; more than 4M is no real file
MAX_MERGES = 1 << 24
MAX_TOKEN_LENGTH = 1 << 16              # characters

_ALPHABET = frozenset(BYTE_CHARS.values())

# --- SentencePiece: the pipeline by architecture -------------------------------------------------------

GEMMA_ARCHITECTURES = ("gemma", "gemma2", "gemma3")
_SPACE = "\u2581"


def _sentencepiece_decoder(strip: bool):
    steps = [ReplaceDecoder(_SPACE, " "), ByteFallback(), Fuse()]
    return DecoderSequence(steps + [Strip(" ", 1, 0)] if strip else steps)


def _gemma_pipeline() -> dict:
    return {"normalizer": Replace(" ", _SPACE), "pre_tokenizer": Split(compile_regex(" "), "merged_with_previous"),
            "decoder": _sentencepiece_decoder(strip=False), "unk_token": "<unk>"}


def _phi3_pipeline() -> dict:
    return {"normalizer": NormalizerSequence([Prepend(_SPACE), Replace(" ", _SPACE)]), "pre_tokenizer": None,
            "decoder": _sentencepiece_decoder(strip=True), "unk_token": None}


def _llama_pipeline() -> dict:
    return {"normalizer": None, "pre_tokenizer": Metaspace(_SPACE, "first", split=False),
            "decoder": _sentencepiece_decoder(strip=True), "unk_token": None}


# --- reading the metadata --------------------------------------------------------------------------------

_SPECIAL = (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"),
            ("pad_token", "padding_token_id"))
_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


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

    def _array(self, key: str, what: str, required: bool):
        values = self.metadata.get(key)
        if values is None:
            if required:
                raise self.error("missing metadata key", key)
            return None
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise self.error(f"expected an array of {what}, got {type(values).__name__}", key)
        return values

    def strings(self, key: str, required: bool = True, limit: int | None = None) -> list[str] | None:
        values = self._array(key, "strings", required)
        if values is None:
            return None
        limit = MAX_TOKENS if limit is None else limit
        if len(values) > limit:
            raise self.error(f"{len(values):,} entries; this engine reads at most {limit:,}", key)
        if set(map(type, values)) - {str}:            # (the check runs in C; the loop only to name the entry)
            for i, value in enumerate(values):
                if isinstance(value, bytes):
                    raise self.error("not UTF-8 text", f"{key}[{i}]")
                if not isinstance(value, str):
                    raise self.error(f"expected a string, got {type(value).__name__}", f"{key}[{i}]")
        return list(values)

    def integers(self, key: str, length: int) -> np.ndarray | None:
        values = self._array(key, "integers", required=False)
        if values is None:
            return None
        if not (isinstance(values, np.ndarray) and values.dtype.kind in "iu"):     # a long array is one already
            values = values.tolist() if hasattr(values, "tolist") else list(values)
            for i, value in enumerate(values):
                if type(value) is bool or not hasattr(value, "__index__"):      # int or a NumPy integer
                    raise self.error(f"expected an integer, got {type(value).__name__}", f"{key}[{i}]")
                if not -(1 << 63) <= value < (1 << 63):
                    raise self.error(f"{value} is out of range", f"{key}[{i}]")
            values = np.array(values, dtype=np.int64)
        if len(values) != length:
            raise self.error(f"{len(values)} entries for {length} tokens", key)
        return values

    def numbers(self, key: str, length: int, required: bool) -> np.ndarray | None:
        values = self._array(key, "numbers", required)
        if values is None:
            return None
        if not (isinstance(values, np.ndarray) and values.dtype.kind in "iuf"):
            values = values.tolist() if hasattr(values, "tolist") else list(values)
            for i, value in enumerate(values):
                if type(value) is bool or not isinstance(value, (int, float)):
                    raise self.error(f"expected a number, got {type(value).__name__}", f"{key}[{i}]")
            values = np.array(values, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            raise self.error(f"expected a finite number, got {values[bad[0]]}", f"{key}[{bad[0]}]")
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


def _open(source) -> tuple[Mapping, str | None]:
    if isinstance(source, (str, os.PathLike)):
        from ..site import load_gguf
        with load_gguf(source) as weights:
            return weights.metadata, os.fspath(source)
    if isinstance(getattr(source, "metadata", None), Mapping):
        return source.metadata, getattr(source, "name", None)
    if isinstance(source, Mapping):
        return source, None
    raise TokenizerError(f"expected a GGUF path, file or metadata mapping, got {type(source).__name__}")


def tokenizer_parts(source, reference: str = "transformers") -> dict:
    """The parts of the Tokenizer a GGUF describes, for `Tokenizer.from_gguf` to assemble: its
    constructor's arguments (model, normalizer, pre_tokenizer, post_processor, decoder,
    added_tokens) and what a GGUF says beyond them (chat_template, special_tokens, padding: what
    encode_batch_arrays pads with, or None). `source`: a path, an opened GGUF (engine.load_gguf)
    or its metadata mapping. `reference`: whose reading to follow ("transformers", the default,
    or "llama.cpp"; see the module docstring)."""
    metadata, file = _open(source)
    if reference not in REFERENCES:
        raise TokenizerError(f"reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    m = _Metadata(metadata, file)
    kind = m.get("tokenizer.ggml.model", str)
    if kind not in ("gpt2", "llama", "gemma4"):
        raise m.error(f"tokenizer model {kind!r} is not implemented; this engine reads 'gpt2' (byte-level BPE), "
                      "'llama' and 'gemma4' (SentencePiece BPE)", "tokenizer.ggml.model")
    tokens = m.strings("tokenizer.ggml.tokens")
    if not tokens:
        raise m.error("the vocabulary is empty", "tokenizer.ggml.tokens")
    lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    if lengths.max() > MAX_TOKEN_LENGTH:
        i = int(lengths.argmax())
        raise m.error(f"a token of {lengths[i]:,} characters; this engine reads at most {MAX_TOKEN_LENGTH:,}",
                      f"tokenizer.ggml.tokens[{i}]")
    types = m.integers("tokenizer.ggml.token_type", len(tokens))
    if types is None:
        types = np.full(len(tokens), NORMAL)
    special_ids = {name: m.token_id(f"tokenizer.ggml.{key}", len(tokens)) for name, key in _SPECIAL}
    parts = (_byte_level(m, tokens, reference) if kind == "gpt2" else _sentencepiece(m, tokens, types, kind, reference))
    model = parts.pop("model")
    vocab = model.vocab

    # added tokens, in transformers' order (ids past the vocabulary go to the first named)
    added = {}
    for i in np.flatnonzero(types == CONTROL).tolist():
        if parts["all_control"] or _ALPHABET.issuperset(tokens[i]):
            added.setdefault(tokens[i], AddedToken(tokens[i], 0, special=True, normalized=False))
    for i in np.flatnonzero(types == USER_DEFINED).tolist():
        if tokens[i] in vocab or tokens[i] in added:
            added.setdefault(tokens[i], AddedToken(tokens[i], 0, special=False, normalized=False))
    special = {name: tokens[i] for name, i in special_ids.items() if i is not None}
    for content in special.values():
        added.setdefault(content, AddedToken(content, 0, special=True, normalized=False))

    add_bos = m.get("tokenizer.ggml.add_bos_token", bool, required=False)
    add_eos = m.get("tokenizer.ggml.add_eos_token", bool, required=False) or False
    if parts["add_bos"] is not None:        # what the kind of vocabulary decides, whatever the flag
        add_bos = parts["add_bos"]
    elif add_bos is None:                   # no flag: the kind's default, where there is a BOS to add
        add_bos = parts["default_bos"] and "bos_token" in special
    for flag, name, key in ((add_bos, "bos_token", "tokenizer.ggml.add_bos_token"),
                            (add_eos, "eos_token", "tokenizer.ggml.add_eos_token")):
        if flag and name not in special:
            raise m.error(f"asks for a {name} but the file gives no {name} id", key)
    processor = None
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
    return {"model": model, "normalizer": parts["normalizer"], "pre_tokenizer": parts["pre_tokenizer"],
            "post_processor": processor, "decoder": parts["decoder"], "added_tokens": list(added.values()),
            "chat_template": m.get("tokenizer.chat_template", str, required=False), "special_tokens": special,
            "padding": padding, "file": m.file}


def _merges(m: _Metadata, required: bool) -> list[list[str]] | None:
    """The merges, each [a, b]."""
    merges = m.strings("tokenizer.ggml.merges", required=required, limit=MAX_MERGES)
    if merges is None:
        return None
    pairs = list(map(str.split, merges, repeat(" ")))
    if set(map(len, pairs)) - {2}:
        i = next(i for i, parts in enumerate(pairs) if len(parts) != 2)
        raise m.error(f'a merge is two tokens "a b", got {merges[i]!r}', f"tokenizer.ggml.merges[{i}]")
    return pairs


def _byte_level(m: _Metadata, tokens: list[str], reference: str) -> dict:
    pre = m.get("tokenizer.ggml.pre", str, required=False)
    name = "default" if pre is None else pre
    if name not in SPLITS:
        raise m.error(f"unknown pre-tokenizer {pre!r}: neither transformers nor llama.cpp knows it (llama.cpp's "
                      "names are engine.text.gguf_pre.LLAMA_CPP_NAMES)", "tokenizer.ggml.pre")
    if reference not in SPLITS[name]:
        readings = sorted(n for n, r in SPLITS.items() if reference in r)
        raise m.error(f"pre-tokenizer {pre!r} as {reference} reads it is not implemented; for {reference} this "
                      f"engine implements {', '.join(readings)}", "tokenizer.ggml.pre")
    reading = SPLITS[name][reference]
    # tokens outside the byte alphabet are respelled as their bytes (transformers does this)
    spelled = list(tokens)
    for i in compress(range(len(tokens)), map(operator.not_, map(_ALPHABET.issuperset, tokens))):
        spelled[i] = "".join(BYTE_CHARS[b] for b in tokens[i].encode("utf-8"))
    vocab = dict(zip(spelled, range(len(spelled))))
    bpe = BPE(vocab, _merges(m, required=True), ignore_merges=reading.whole_words, file=m.file,
              field="tokenizer.ggml.merges")
    return {"model": bpe, "normalizer": None, "pre_tokenizer": reading.split(), "decoder": ByteLevelDecoder(),
            "all_control": False, "add_bos": None, "default_bos": reading.default_bos}


def _sentencepiece(m: _Metadata, tokens: list[str], types: np.ndarray, kind: str, reference: str) -> dict:
    if reference != "transformers":
        raise m.error(f"reference={reference!r} is not implemented for SentencePiece vocabularies (its score-"
                      "driven merging and space handling are its own); use the default, transformers",
                      "tokenizer.ggml.model")
    architecture = m.get("general.architecture", str)
    gemma = kind == "gemma4" or architecture in GEMMA_ARCHITECTURES
    if architecture in GEMMA_ARCHITECTURES and kind == "llama":   # "  " is looked up as "▁▁"
        tokens = list(tokens)
        for i in compress(range(len(tokens)), map(operator.contains, tokens, repeat(" "))):
            if not tokens[i].strip():
                tokens[i] = _SPACE * len(tokens[i])
    _check_byte_tokens(m, tokens, types)
    pipeline = _gemma_pipeline() if gemma else _phi3_pipeline() if architecture == "phi3" else _llama_pipeline()
    unk = pipeline.pop("unk_token")
    merges = _merges(m, required=False)
    if merges is not None:
        vocab = dict(zip(tokens, range(len(tokens))))
        model = BPE(vocab, merges, unk_token=unk, fuse_unk=True, byte_fallback=True, file=m.file,
                    field="tokenizer.ggml.merges")
    elif architecture in GEMMA_ARCHITECTURES and kind == "llama":
        model = ScoredBPE(tokens, None, unk_token=unk, file=m.file)
    else:
        scores = m.numbers("tokenizer.ggml.scores", len(tokens), required=True)
        model = ScoredBPE(tokens, scores, unk_token=unk, file=m.file)
    return {"model": model, **pipeline, "all_control": True, "add_bos": False if kind == "gemma4" else None,
            "default_bos": True}


def _check_byte_tokens(m: _Metadata, tokens: list[str], types: np.ndarray) -> None:
    """A token of type BYTE must be "<0xNN>", each byte once; and byte fallback needs all 256."""
    seen = {}
    for i in np.flatnonzero(types == BYTE).tolist():
        token = tokens[i]
        digits = token[3:5]
        if not (len(token) == 6 and token.startswith("<0x") and token.endswith(">")
                and all(c in "0123456789ABCDEF" for c in digits)):
            raise m.error(f'a BYTE token must be "<0xNN>" (two upper-case hexadecimal digits), got {token!r}',
                          f"tokenizer.ggml.tokens[{i}]")
        if digits in seen:
            raise m.error(f"byte token {token} is listed twice (ids {seen[digits]} and {i})",
                          f"tokenizer.ggml.tokens[{i}]")
        seen[digits] = i
    if seen and len(seen) != 256:
        missing = next(f"<0x{b:02X}>" for b in range(256) if f"{b:02X}" not in seen)
        raise m.error(f"byte fallback needs a token for each of the 256 bytes; {256 - len(seen)} are missing "
                      f"({missing} first)", "tokenizer.ggml.token_type")
