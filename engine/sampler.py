"""Choosing the next token on the device: the sampler and Whisper's token rules as one kernel
after the model's head, so a decode step reads back one id and its log-probability (16 bytes)
instead of the whole vocabulary's logits.

    selector = TokenSelector(vocab, device)
    selector.start(rules, prompt_ids, rng)          # once per sequence
    step = lambda ids, positions: selector.select(model(ids, positions, ...)[0, -1], ids, positions)
    for out in selector.choices(logits, position, count, launch, follows):   # launch: the step captured
        token, logprob = int(out[0]), out[1]                                  # and submitted (pipeline)

The kernel ("select_token", engine.ops.FUSED) takes one position's logits (V,) and state it
keeps on the device between steps:
- `marks` (V,) int32: bit 0, the token is in the sequence so far (repetition penalty); bit 1,
  always suppressed; bit 2, suppressed as the first sampled token; bits 8 and up, how many times
  it was generated (presence and frequency penalties);
- `state` (8,) int32: tokens sampled so far, the last two, the last timestamp token (-1: none);
- `config` (CONFIG + U,) float32: the options (below) and U uniform draws, one per step, drawn
  up front from the host's seeded generator in the order the host sampler draws them.

It writes the chosen token into `ids` and advances `positions`, the decode step's own inputs, so
the next step can be submitted before this one's answer is read (engine.generation), and it
updates marks and state. What it computes, in this order, is what the host does (float64 there,
float32 here):
- engine.generation.process: the repetition penalty over the sequence (prompt included), the
  presence and frequency penalties over the generated tokens, then temperature, top-k and top-p;
- Whisper's filters (engine.speech.decoding): suppressed tokens, the blank tokens as the first
  token, and TimestampRules (pairs, monotonic timestamps, the initial-timestamp limit, and text
  suppressed when the timestamps' total probability beats every text token's);
- greedy: argmax (the first of equal maxima); else the inverse of the cumulative distribution in
  index order at u * total, which is what numpy's Generator.choice and Whisper's sampler compute
  from the same uniform draw;
- the log-probability of the token under the filtered logits at temperature 1 (Whisper's
  sum_logprob).

One difference: top-p keeps every token tied with the last one it keeps, where the host's
stable sort keeps the tied ones of lower index until the mass is reached (ties of float32 logits
at that boundary).

engine.selection holds the buffers' layout and the kernel's NumPy reference (the numpy backend's
"select_token"); the webgpu backend's is shaders/select_token.wgsl.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dtypes import float32, int32, int64
from .functions import run_fused
from .selection import (BEGIN, CONFIG, EOT, FREQUENCY, LAST, LAST_TIMESTAMP, MAX_INITIAL, NO_TIMESTAMPS,
                        PENULTIMATE, PRESENCE, REPETITION, SEEN, STATE, SUPPRESS, SUPPRESS_FIRST, TEMPERATURE,
                        TOP_K, TOP_P, UNIFORMS, VOCAB, WHISPER)
from .tensor import tensor


@dataclass(frozen=True)
class Rules:
    """How one sequence's tokens are chosen (see the module's docstring)."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    suppress: tuple = ()               # never chosen
    suppress_first: tuple = ()         # not as the first token
    timestamps: tuple | None = None    # Whisper's (timestamp_begin, eot, no_timestamps, max_initial index or -1)

    def config(self, vocab: int) -> np.ndarray:
        c = np.zeros(CONFIG + UNIFORMS, np.float32)
        c[[TEMPERATURE, TOP_K, TOP_P, REPETITION, PRESENCE, FREQUENCY]] = (
            self.temperature, self.top_k, self.top_p, self.repetition_penalty, self.presence_penalty,
            self.frequency_penalty)
        c[VOCAB] = vocab
        c[[WHISPER, BEGIN, EOT, NO_TIMESTAMPS, MAX_INITIAL]] = (1, *self.timestamps) if self.timestamps \
            else (0, vocab, -1, -1, -1)
        return c

    def marks(self, vocab: int, seen=()) -> np.ndarray:
        m = np.zeros(vocab, np.int32)
        if self.repetition_penalty != 1.0 and len(seen):
            m[np.asarray(seen, np.int64)] |= SEEN
        m[np.asarray(self.suppress, np.int64)] |= SUPPRESS
        m[np.asarray(self.suppress_first, np.int64)] |= SUPPRESS_FIRST
        return m


# --- the state on a device, for a decode loop --------------------------------------------------
# what a device's decode step costs, as the backend counts it (backend.counters(): submissions,
# bytes read back, dispatches recorded from Python, calls into WebGPU), reported per step
TRAFFIC = ("submits", "read_bytes", "recorded", "calls")


def selects(device) -> bool:
    """Whether `device` chooses tokens where its tensors live: a backend that keeps them off the
    host (a GPU) and has the select_token kernel. On the host the host's sampler is as fast."""
    from .device import get_backend
    backend = get_backend(device)
    return "select_token" in backend.fused and backend.storage != "numpy"


class TokenSelector:
    """A sequence's marks, state and config as tensors on `device`, written at `start` and then
    only by the kernel; `select` is called inside the captured decode step."""

    def __init__(self, vocab: int, device):
        self.vocab, self.device = vocab, device
        self.marks = tensor(np.zeros(vocab, np.int32), dtype=int32, device=device)
        self.state = tensor(np.zeros(STATE, np.int32), dtype=int32, device=device)
        self.config = tensor(np.zeros(CONFIG + UNIFORMS, np.float32), dtype=float32, device=device)
        for t in (self.marks, self.state, self.config):
            _own(t)
        self.rules: Rules | None = None
        self._rng = None
        self._filled = 0                    # the draws on the device cover the steps before this one
        self.launched = 0                   # decode steps launched through choices(), ever

    def start(self, rules: Rules, seen=(), rng: np.random.Generator | None = None) -> None:
        """A new sequence: `seen` the ids so far (the repetition penalty's prompt), `rng` the seeded
        generator whose uniform draws the sampler uses (temperature > 0)."""
        self.rules, self._rng, self._filled = rules, rng, 0
        self.refill(0)
        self._write(self.marks, rules.marks(self.vocab, seen))
        state = np.zeros(STATE, np.int32)
        state[[LAST, PENULTIMATE, LAST_TIMESTAMP]] = -1
        self._write(self.state, state)

    def refill(self, sampled: int) -> None:
        """Before the step that samples token number `sampled` (0 first): the config with the next
        UNIFORMS draws once the ones on the device are used up (the step reads draw sampled % UNIFORMS)."""
        if sampled < self._filled:
            return
        config = self.rules.config(self.vocab)
        if self._rng is not None and self.rules.temperature > 0.0:
            config[CONFIG:] = self._rng.random(UNIFORMS)
        self._write(self.config, config)
        self._filled += UNIFORMS

    @staticmethod
    def _write(t, values) -> None:
        """A state tensor's new values, written where it lives (a device buffer, or a host array)."""
        backend = t._backend
        if hasattr(backend, "write_input"):
            backend.write_input(t._buf, values)
        else:
            np.copyto(backend.view(t._buf, t._layout), values)

    def select(self, logits, ids, positions):
        """logits (V,) of one position -> (4,) float32 [token, log-probability, 0, 0]; ids and
        positions (the step's inputs) are advanced on the device."""
        _own(ids)
        _own(positions)
        return run_fused("select_token", [logits.float() if logits.dtype != float32 else logits, self.marks,
                                          self.state, self.config, ids, positions])


    def choices(self, logits, position: int, count: int, launch, follows):
        """The answers [token, log-probability, 0, 0] (NumPy) of `count` choices after start(): the
        first from `logits` (V,) (the prompt's last position, a tensor on the device), then one a
        decode step through pipeline(), with the draws refilled before each step;
        launch(token, position) submits a step that calls select() inside it."""
        scratch = [tensor([[0]], dtype=int64, device=self.device), tensor([0], dtype=int64, device=self.device)]
        first = self.select(logits, *scratch).numpy()
        sampled = iter(range(1, count + 1))

        def step(token, at):
            self.refill(next(sampled))
            self.launched += 1
            return launch(token, at)
        return pipeline(first, position, count, step, follows)


def _own(t) -> None:
    """A tensor the kernel writes gets a buffer of its own (a device shares small constant ones)."""
    own = getattr(t._backend, "own_input", None)
    if own is not None:
        own(t._buf)


def pipeline(first, position: int, count: int, launch, follows):
    """The decode loop's steps as answers [token, logprob, ...] (NumPy), `count` of them: `first`,
    then each step's. launch(token, position) submits the step that feeds `token` at `position`
    (token None: the token the step before chose, already in the step's inputs on the device) and
    returns what gives its answer (result()); follows(position, next) says whether the step at
    `next` may run on the inputs the step at `position` wrote. While the host reads one step's
    answer, the next step is already submitted; the answers of steps submitted ahead and not
    asked for are read when the loop is closed (their buffers go back)."""
    out, pending, ahead = first, None, None
    try:
        for n in range(count):
            yield out
            if n + 1 == count:
                return
            if pending is None:
                pending = launch(int(out[0]), position)
            if n + 2 < count and follows(position, position + 1):
                ahead = launch(None, position + 1)
            out = pending.result()
            pending, ahead, position = ahead, None, position + 1
    finally:
        for left in (pending, ahead):
            if left is not None:
                left.result()
