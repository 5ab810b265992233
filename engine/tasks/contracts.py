"""What each task needs of its model, as code: one `typing.Protocol` per kind of model.

A pipeline class names its contract (`MODEL`); `base.Pipeline.build` checks the model its entry's
`load` gives against it, so a model file that lacks a member fails when the pipeline is built,
with a ContractError naming every member missing, not deep inside the first call. A member
annotated with another Protocol (a config) is checked member by member in turn; a method must be
callable. The contracts say what the tasks use, nothing more: engine.generation's Generator and
engine.speech's decoder call what CausalLM and SpeechModel list.

Adding a model of an existing kind (another decoder LM, another detector) means providing its
contract's members; adding a kind of model means a Protocol here and a task that names it
(docs/adding-a-model.md).
"""
from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Protocol

from ..errors import ContractError


class Model(Protocol):
    """Every model: an engine.nn.Module, moved between backends by the pipeline."""

    def to(self, device): ...


class ImageClassifier(Model, Protocol):
    """forward(x) with x (N, C, H, W) float32 -> (N, classes) logits (digits, photos)."""

    def forward(self, x): ...


class Detector(Model, Protocol):
    """forward(x) with x (N, 3, H, W) RGB in [0, 1] -> (N, 4 + classes + keypoints, anchors), the
    head's decoded output (engine/tasks/object_detection.py)."""

    def forward(self, x): ...


class TextReader(Model, Protocol):
    """PP-OCR's three networks (engine/tasks/ocr.py): det(x) (N, 3, H, W) -> (N, 1, H, W) text
    probabilities, cls(x) (N, 3, 48, 192) -> (N, 2) probabilities of 0 and 180 degrees, rec(x)
    (N, 3, 48, W) -> (N, W / 8, classes) probabilities; `settings` (thresholds and input shapes)
    and the recognizer's `characters` (class 0: CTC's blank)."""
    settings: Mapping
    characters: list

    def det(self, x): ...

    def cls(self, x): ...

    def rec(self, x): ...


class SentenceEncoder(Model, Protocol):
    """forward(input_ids, attention_mask, token_type_ids) -> (N, L, hidden) states, which the model
    file's `embed(model, batch)` pools."""

    def forward(self, input_ids, attention_mask=None, token_type_ids=None): ...


class LMConfig(Protocol):
    max_position_embeddings: int           # the longest context: the cache's capacity at most


class CausalLM(Model, Protocol):
    """A decoder LM for engine.generation: forward(input_ids (1, T), positions (T,), cache,
    last_only, window) -> logits; a KV cache of its own shape; its GGUF metadata (tokenizer and
    chat template, engine.text.Tokenizer.from_gguf); the token ids that end an answer."""
    config: LMConfig
    metadata: Mapping
    end_token_ids: frozenset

    def forward(self, input_ids, positions, cache=None, last_only=False, window=None): ...

    def new_cache(self, capacity=None, batch=1, allocate=None): ...


class SpeechConfig(Protocol):
    n_mels: int
    n_audio_ctx: int
    n_text_ctx: int
    n_vocab: int


class SpeechModel(Model, Protocol):
    """An encoder-decoder for engine.speech: encode(mel) -> audio features; cross_attention(features)
    -> their keys and values for the decoder; decoder(ids, positions, cache, cross, ...) -> logits."""
    config: SpeechConfig

    def encode(self, mel): ...

    def decoder(self, input_ids, positions, cache, cross, rows=None, window=None): ...

    def new_cache(self, capacity=None, batch=1): ...

    def new_cross(self, batch=1): ...

    def cross_attention(self, features, out=None): ...


class VADConfig(Protocol):
    sample_rate: int
    chunk: int                             # samples per probability


class VoiceActivityModel(Model, Protocol):
    """A voice activity detector for engine/tasks/voice_activity.py: initial_state(batch),
    step(chunk (B, chunk) float32, state) -> (speech probabilities (B,), the next state), and
    run(samples (N * chunk,), state of one stream) -> (probabilities (N,), the next state), the
    same as N steps."""
    config: VADConfig

    def initial_state(self, batch=1): ...

    def step(self, chunk, state): ...

    def run(self, samples, state): ...


def members(contract: type) -> dict[str, object]:
    """name -> what it must be: a Protocol (checked in turn), a type (an attribute), or None (a
    method), over `contract` and the Protocols it extends."""
    found: dict[str, object] = {}
    for cls in reversed(contract.__mro__):
        if not getattr(cls, "_is_protocol", False) or cls is Protocol:
            continue
        hints = typing.get_type_hints(cls) if cls.__dict__.get("__annotations__") else {}
        for name in cls.__dict__.get("__annotations__", {}):
            found[name] = hints[name]
        for name, value in cls.__dict__.items():
            if callable(value) and not name.startswith("_"):
                found[name] = None
    return found


def missing(obj, contract: type, prefix: str = "") -> list[str]:
    """The members of `contract` that `obj` lacks (dotted for a member's own), "(not callable)"
    for a method that is something else."""
    out = []
    for name, kind in members(contract).items():
        value = getattr(obj, name, _ABSENT)
        if value is _ABSENT:
            out.append(prefix + name)
        elif kind is None and not callable(value):
            out.append(f"{prefix}{name} (not callable)")
        elif getattr(kind, "_is_protocol", False):
            out += missing(value, kind, f"{prefix}{name}.")
    return out


def check(model, contract: type, name: str, task: str) -> None:
    """ContractError naming what `model` (registry entry `name`) lacks of `contract`."""
    lacks = missing(model, contract)
    if lacks:
        raise ContractError(f"model {name} does not give the {task} task what it needs of its model "
                            f"({contract.__name__}, engine/tasks/contracts.py): missing {', '.join(lacks)}")


_ABSENT = object()
