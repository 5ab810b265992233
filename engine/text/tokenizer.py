"""Tokenizer: a Hugging Face tokenizer.json run in pure Python (stdlib + NumPy), so that the same
code tokenizes natively and in Pyodide, where no `tokenizers` wheel exists.

The pipeline and its names are those of the `tokenizers` package
(https://huggingface.co/docs/tokenizers/pipeline): added tokens are found in the raw text, the
rest is normalized, pre-tokenized into words, each word tokenized by the model; then truncation,
the post-processor's special tokens, padding. Each stage is a component registered under its
tokenizer.json "type" (normalizers.py, pre_tokenizers.py, models.py, processors.py,
decoders.py); the core here knows none of them by name.

    tok = Tokenizer.from_file("tokenizer.json")
    tok.encode("Hello world!").ids                          # [101, 7592, 2088, 999, 102, 0, ...]
    batch = tok.encode_batch_arrays(["a", "longer text"])   # (N, L) int64 arrays for a model
    batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch.truncated
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import InputError, TokenizerError
from ..untrusted import load_json
from .added_tokens import AddedVocabulary
from .chat import ChatTemplate
from .config import Section
from .decoders import DECODERS
from .encoding import Encoding
from .models import MODELS
from .normalizers import NORMALIZERS, original_span
from .pre_tokenizers import PRE_TOKENIZERS
from .processors import PROCESSORS, default_process
from .stream import StreamDecoder
from .truncation import (Padding, Truncation, checked_truncation, pad, read_padding, read_truncation,
                         round_up, truncate)

class BatchArrays(dict):
    """input_ids, attention_mask, token_type_ids: (N, L) int64 arrays, ready for `model(**batch)`;
    `.truncated[i]` says whether text i lost tokens to truncation; `.encodings` are the Encodings
    (whose overflowing parts stop short: tokenizing a long text stops once truncation is certain)."""

    def __init__(self, arrays: dict, truncated: list[bool], encodings: list[Encoding]):
        super().__init__(arrays)
        self.truncated = truncated
        self.encodings = encodings


class Tokenizer:
    """A tokenizer.json's pipeline; the methods and their names are the `tokenizers` package's
    (from_file, encode, encode_batch, decode, token_to_id, enable_truncation, enable_padding, ...),
    plus encode_batch_arrays, which gives a model its inputs as NumPy arrays."""

    def __init__(self, model, normalizer=None, pre_tokenizer=None, post_processor=None, decoder=None,
                 added_tokens=(), truncation: Truncation | None = None, padding: Padding | None = None):
        self.model = model
        self.normalizer = normalizer
        self.pre_tokenizer = pre_tokenizer
        self.post_processor = post_processor
        self.decoder = decoder
        self.added = AddedVocabulary(list(added_tokens), model, normalizer)
        self._truncation = truncation
        self._padding = padding
        # what a GGUF (or a tokenizer_config.json) says beyond tokenizer.json: the chat template and
        # the names of the special tokens ("bos_token": "<|im_start|>", "eos_token": ...)
        self.chat_template: str | None = None
        self.chat_template_origin = {"file": None, "field": "chat_template"}    # for its errors
        self.special_tokens: dict[str, str] = {}
        self._chat = None
        self._token_bytes = None
        # what encode_batch_arrays pads with, even while padding is off
        pad_token = padding.pad_token if padding else "[PAD]"
        pad_id = self.token_to_id(pad_token)
        self._pad = padding or Padding(pad_id=pad_id or 0, pad_token=pad_token)

    def __repr__(self) -> str:
        parts = [type(c).__name__ for c in (self.normalizer, self.pre_tokenizer, self.model, self.post_processor,
                                            self.decoder) if c is not None]
        return f"Tokenizer({' -> '.join(parts)}, vocab={self.get_vocab_size()})"

    # --- loading ---------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path) -> Tokenizer:
        try:
            data = Path(path).read_bytes()
        except (OSError, ValueError) as e:          # ValueError: a NUL in the path
            raise TokenizerError(f"cannot read the tokenizer: {getattr(e, 'strerror', None) or e}", file=path) from e
        return cls.from_buffer(data, file=str(path))

    @classmethod
    def from_buffer(cls, data: bytes, file: str = "<buffer>") -> Tokenizer:
        return cls.from_str(data, file=file)

    @classmethod
    def from_str(cls, json_text: str | bytes, file: str = "<string>") -> Tokenizer:
        """The tokenizer of a tokenizer.json's text (str, or UTF-8 bytes)."""
        data = load_json(json_text, lambda message: TokenizerError(message, file=file), what="the tokenizer")
        if not isinstance(data, dict):
            raise TokenizerError(f"expected a JSON object, got {type(data).__name__}", file=file)
        root = Section(data, "", file)
        model = root.section("model")
        if model is None:
            raise root.error("a tokenizer needs a model", "model")
        return cls(MODELS.build(model),
                   normalizer=NORMALIZERS.build(root.section("normalizer", optional=True)),
                   pre_tokenizer=PRE_TOKENIZERS.build(root.section("pre_tokenizer", optional=True)),
                   post_processor=PROCESSORS.build(root.section("post_processor", optional=True)),
                   decoder=DECODERS.build(root.section("decoder", optional=True)),
                   added_tokens=AddedVocabulary.read(root),
                   truncation=read_truncation(root.section("truncation", optional=True)),
                   padding=read_padding(root.section("padding", optional=True)))

    @classmethod
    def from_gguf(cls, source, reference: str = "transformers") -> Tokenizer:
        """The tokenizer a GGUF's metadata describes (a path, an opened GGUF or its metadata);
        see engine/text/gguf.py."""
        from .gguf import tokenizer_parts
        with _collector_paused():
            parts = tokenizer_parts(source, reference)
            tok = cls(parts["model"], normalizer=parts["normalizer"], pre_tokenizer=parts["pre_tokenizer"],
                      post_processor=parts["post_processor"], decoder=parts["decoder"],
                      added_tokens=parts["added_tokens"])
        tok.chat_template = parts["chat_template"]
        tok.chat_template_origin = {"file": parts["file"], "field": "tokenizer.chat_template"}
        tok.special_tokens = parts["special_tokens"]
        if parts["padding"] is not None:
            tok._pad = parts["padding"]
        return tok

    # --- vocabulary ------------------------------------------------------------------------------

    def token_to_id(self, token: str) -> int | None:
        added = self.added.by_content.get(token)
        return added.id if added is not None else self.model.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        token = self.added.by_id.get(i)
        return token if token is not None else self.model.id_to_token(i)

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        vocab = self.model.get_vocab()
        if with_added_tokens:
            vocab.update((t.content, t.id) for t in self.added.by_content.values())
        return vocab

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        return len(self.get_vocab(True)) if with_added_tokens else self.model.get_vocab_size()

    def num_special_tokens_to_add(self, is_pair: bool = False) -> int:
        return self.post_processor.added_tokens(is_pair) if self.post_processor is not None else 0

    # --- truncation and padding ------------------------------------------------------------------

    def enable_truncation(self, max_length: int, stride: int = 0, strategy: str = "longest_first",
                          direction: str = "right") -> None:
        self._truncation = checked_truncation(Truncation(max_length, stride, strategy, direction))

    def no_truncation(self) -> None:
        self._truncation = None

    @property
    def truncation(self) -> dict | None:
        t = self._truncation
        return None if t is None else {"max_length": t.max_length, "stride": t.stride, "strategy": t.strategy,
                                       "direction": t.direction}

    def enable_padding(self, direction: str = "right", pad_id: int = 0, pad_type_id: int = 0,
                       pad_token: str = "[PAD]", length: int | None = None,
                       pad_to_multiple_of: int | None = None) -> None:
        if direction not in ("right", "left"):
            raise InputError(f"padding direction must be 'right' or 'left', got {direction!r}")
        self._padding = self._pad = Padding(length, pad_to_multiple_of, pad_id, pad_type_id, pad_token, direction)

    def no_padding(self) -> None:
        self._padding = None

    @property
    def padding(self) -> dict | None:
        p = self._padding
        return None if p is None else {"length": p.length, "pad_to_multiple_of": p.pad_to_multiple_of,
                                       "pad_id": p.pad_id, "pad_token": p.pad_token,
                                       "pad_type_id": p.pad_type_id, "direction": p.direction}

    # --- encoding --------------------------------------------------------------------------------

    def encode(self, sequence: str, pair: str | None = None, add_special_tokens: bool = True) -> Encoding:
        _check_text(sequence, "the text")
        if pair is not None:
            _check_text(pair, "the pair text")
        encoding = self._encode(sequence, pair, add_special_tokens, self._truncation)
        if self._padding is not None:
            pad([encoding], self._padding)
        return encoding

    def encode_batch(self, inputs, add_special_tokens: bool = True) -> list[Encoding]:
        """Each input a text or a (text, pair text); padded together as the padding settings say."""
        encodings = [self._encode(a, b, add_special_tokens, self._truncation) for a, b in _batch(inputs)]
        if self._padding is not None:
            pad(encodings, self._padding)
        return encodings

    def encode_batch_arrays(self, texts, max_length: int | None = None,
                            add_special_tokens: bool = True) -> BatchArrays:
        """The texts (or (text, pair) tuples) as (N, L) int64 arrays, padded to the longest of the
        batch. max_length (special tokens included) truncates; None: the tokenizer's truncation."""
        batch = _batch(texts)
        truncation = self._truncation
        if max_length is not None:
            truncation = checked_truncation(replace(truncation, max_length=max_length) if truncation
                                             else Truncation(max_length))
            pairs = any(pair is not None for _, pair in batch)
            if add_special_tokens and max_length < self.num_special_tokens_to_add(pairs):
                raise InputError(f"max_length={max_length} leaves no room for the "
                                 f"{self.num_special_tokens_to_add(pairs)} special tokens")
        encodings = [self._encode(a, b, add_special_tokens, truncation, stop_early=True) for a, b in batch]
        padding = self._pad                 # its pad id, type id, direction; always to the longest
        length = round_up(max(len(e.ids) for e in encodings), padding.pad_to_multiple_of)
        input_ids = np.full((len(encodings), length), padding.pad_id, dtype=np.int64)   # (N, L)
        token_type_ids = np.full((len(encodings), length), padding.pad_type_id, dtype=np.int64)
        attention_mask = np.zeros((len(encodings), length), dtype=np.int64)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            cols = slice(0, n) if padding.direction == "right" else slice(length - n, length)
            input_ids[row, cols] = e.ids
            token_type_ids[row, cols] = e.type_ids
            attention_mask[row, cols] = 1
        return BatchArrays({"input_ids": input_ids, "attention_mask": attention_mask,
                            "token_type_ids": token_type_ids},
                           [e.truncated for e in encodings], encodings)

    def _encode(self, sequence: str, pair: str | None, add_special_tokens: bool,
                truncation: Truncation | None, stop_early: bool = False) -> Encoding:
        """stop_early: stop tokenizing one token past what truncation keeps (the overflowing parts
        are then incomplete, but whether there were any is still right)."""
        added = self.num_special_tokens_to_add(pair is not None) if add_special_tokens else 0
        limit = None
        if (stop_early and truncation is not None and pair is None and truncation.direction == "right"
                and truncation.max_length >= added):
            limit = truncation.max_length - added
        encoding = self._encode_sequence(sequence, 0, limit)
        pair_encoding = None if pair is None else self._encode_sequence(pair, 1)
        if truncation is not None:
            # a max_length that cannot even hold the special tokens truncates nothing, as in the reference
            if truncation.max_length >= added:
                truncate(encoding, pair_encoding, replace(truncation, max_length=truncation.max_length - added))
        if self.post_processor is None:
            return default_process(encoding, pair_encoding)
        return self.post_processor.process(encoding, pair_encoding, add_special_tokens)

    def _encode_sequence(self, text: str, index: int, limit: int | None = None) -> Encoding:
        """One text's tokens: no special tokens yet, type id and sequence id `index`; if `limit`,
        only until there are more than `limit` of them."""
        ids, tokens, offsets, words = [], [], [], []
        normalizer, pre_tokenizer, tokenize = self.normalizer, self.pre_tokenizer, self.model.tokenize
        cached = self.model.cache.get
        word = 0
        for start, stop, added in self.added.split_raw(text):
            if limit is not None and len(ids) > limit:
                break
            if added is not None:
                ids.append(added.id)
                tokens.append(text[start:stop])
                offsets.append((start, stop))
                words.append(word)
                word += 1
                continue
            piece = text[start:stop]
            if not piece:
                continue
            origin = start
            if normalizer is not None:
                piece, origin = normalizer.normalize(piece, origin)
            for part, part_origin, added in self.added.split_normalized(piece, origin):
                if limit is not None and len(ids) > limit:
                    break
                if added is not None:
                    ids.append(added.id)
                    tokens.append(part)
                    offsets.append(original_span(part_origin, 0, len(part)))
                    words.append(word)
                    word += 1
                    continue
                if not part:
                    continue
                for w, w_origin in (pre_tokenizer.pre_tokenize([(part, part_origin)]) if pre_tokenizer is not None
                                    else [(part, part_origin)]):
                    w_ids, w_tokens, spans = cached(w) or tokenize(w)
                    if len(w_ids) == 1:         # most words are one token
                        ids.append(w_ids[0])
                        tokens.append(w_tokens[0])
                        (a, b), = spans
                        offsets.append((w_origin + a, w_origin + b) if type(w_origin) is int
                                       else (w_origin[a], w_origin[b - 1] + 1))
                        words.append(word)
                    else:
                        ids += w_ids
                        tokens += w_tokens
                        if type(w_origin) is int:
                            offsets += [(w_origin + a, w_origin + b) for a, b in spans]
                        else:
                            offsets += [(w_origin[a], w_origin[b - 1] + 1) for a, b in spans]
                        words += [word] * len(w_ids)
                    word += 1
                    if limit is not None and len(ids) > limit:
                        break
        return Encoding.of_sequence(ids, tokens, offsets, words, index, index)

    # --- decoding --------------------------------------------------------------------------------

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """The text of `ids`; ids the vocabulary does not have are left out, as the reference does."""
        tokens = []
        for position, i in enumerate(ids):
            if not isinstance(i, (int, np.integer)) or isinstance(i, bool):
                raise InputError(f"id {position} must be an int, got {type(i).__name__}")
            token = self.id_to_token(int(i))
            if token is not None and not (skip_special_tokens and token in self.added.special):
                tokens.append(token)
        return self.decoder.decode(tokens) if self.decoder is not None else " ".join(tokens)

    def token_bytes(self) -> list[bytes | None]:
        """Each id's bytes as generated text (decoders.token_bytes), None for a special token or an
        id without a token: the vocabulary constrained decoding walks (engine.structured). Cached."""
        if self._token_bytes is None:
            from .decoders import token_bytes
            size = max([self.model.get_vocab_size()] + [t.id + 1 for t in self.added.by_content.values()])
            out: list[bytes | None] = [None] * size
            for i in range(size):
                token = self.id_to_token(i)
                if token is not None and token not in self.added.special:
                    out[i] = token_bytes(self.decoder, token)
            self._token_bytes = out
        return self._token_bytes

    def decode_batch(self, sequences, skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in sequences]

    def apply_chat_template(self, messages, add_generation_prompt: bool = False, tokenize: bool = True, **kwargs):
        """The conversation as the model's chat template writes it (see chat.py; its special
        tokens from `special_tokens`; `kwargs`: tools=, documents=, more variables): its ids, or
        with tokenize=False the text, as transformers' apply_chat_template gives them (its
        tokenize=True wraps the ids in a dict)."""
        if self.chat_template is None:
            raise InputError("this tokenizer has no chat template (a GGUF's tokenizer.chat_template, "
                             "or tokenizer_config.json's chat_template)")
        if (self._chat is None or self._chat.template != self.chat_template
                or self._chat.special_tokens != self.special_tokens):
            self._chat = ChatTemplate(self.chat_template, special_tokens=self.special_tokens,
                                      **self.chat_template_origin)
        text = self._chat.render(messages, add_generation_prompt, **kwargs)
        return self.encode(text, add_special_tokens=False).ids if tokenize else text

    def decode_stream(self, skip_special_tokens: bool = False) -> StreamDecoder:
        """A StreamDecoder: feed it generated ids one at a time, get the text each completes."""
        return StreamDecoder(self, skip_special_tokens)


# --- helpers -------------------------------------------------------------------------------------

@contextmanager
def _collector_paused():
    """Python's cycle collector off while a vocabulary's hundreds of thousands of strings, tuples
    and dict entries are made (none of them in a cycle): its passes over the growing heap took
    half the time of building a 150,000-merge tokenizer."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_text(text, what: str) -> None:
    if not isinstance(text, str):
        raise InputError(f"{what} must be a str, got {type(text).__name__}")


def _batch(inputs) -> list[tuple[str, str | None]]:
    if isinstance(inputs, (str, bytes)):
        raise InputError(f"expected a list of texts, got one {type(inputs).__name__}; "
                         "encode() takes a single text")
    try:
        items = list(inputs)
    except TypeError:
        raise InputError(f"expected a list of texts, got {type(inputs).__name__}") from None
    if not items:
        raise InputError("empty batch: expected at least one text")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, (tuple, list)) and len(item) == 2:
            _check_text(item[0], f"text {i} (first of its pair)")
            _check_text(item[1], f"text {i} (second of its pair)")
            out.append((item[0], item[1]))
        else:
            _check_text(item, f"text {i}")
            out.append((item, None))
    return out
