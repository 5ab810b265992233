"""Autoregressive text generation over a KV cache: sampling, stop conditions, streaming.

    gen = Generator(model, tokenizer, capacity=2048, eos_ids={2})
    for piece in gen.stream(prompt_ids, GenerationConfig(max_new_tokens=64)):
        print(piece, end="")
    gen.stats          # {"prompt_tokens", "reused_tokens", "new_tokens", "ttft_s", "prefill_tok_s", ...}

The model is any causal LM with `forward(input_ids (B, T), positions (T,), cache, last_only)`
returning logits and `new_cache(capacity, allocate=)` (models/llama.py). One KVCache of fixed
capacity is written in place, its rows allocated as the conversation needs them (doubling, so a
few times per conversation at most); a new prompt that starts with tokens the cache already
holds (the earlier turns of a chat) feeds only the rest (`reused_tokens`). Prompts are fed in
chunks of `prefill_chunk` tokens, so attention scores never exceed chunk x capacity.

Sampling follows transformers' logits processors, in its order: repetition penalty (Keskar et
al. 2019, CTRL: a seen token's logit divided by the penalty when positive, multiplied when
negative), temperature, top-k, top-p (Holtzman et al. 2019: the smallest set of most likely
tokens whose probability reaches p, the most likely always kept); temperature 0 is greedy
(argmax, the first of equal maxima). A seed makes sampling repeatable.

OpenAI's presence and frequency penalties apply to the tokens generated so far (before
temperature). A `grammar` (engine.structured: a JSON Schema, a tool call) constrains the answer:
the sampled token is checked against it, and only when it does not fit are the logits masked to
the tokens that do (the constraint's choose/advance); `logprobs` records each token's
log-probability and the likeliest alternatives.

Stops: an end-of-sequence id (not given out), a stop string (the text before it is given out;
text that may be the start of a stop string is held back until it is not), max_new_tokens,
or `cancel()` / a `cancel` callable returning True, checked before each token.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, fields

import numpy as np

from . import graph, sampler
from .device import get_backend
from .dtypes import int64
from .errors import InputError
from .functions import arange
from .sampler import Rules, TokenSelector
from .tensor import tensor


@dataclass
class GenerationConfig:
    max_new_tokens: int = 256
    temperature: float = 0.0          # 0: greedy
    top_k: int = 0                    # 0: no limit
    top_p: float = 1.0                # 1: no limit
    repetition_penalty: float = 1.0   # 1: none
    presence_penalty: float = 0.0     # OpenAI's: subtracted from the logit of a token already generated
    frequency_penalty: float = 0.0    # OpenAI's: times the number of times it was generated
    seed: int | None = None
    stop: tuple[str, ...] = ()        # stop strings
    logprobs: int | None = None       # None: off; k: each token's log-probability and the k likeliest

    @classmethod
    def of(cls, options: dict) -> "GenerationConfig":
        """From keyword options, rejecting unknown names and bad values with InputError."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise InputError(f"unknown generation option(s) {unknown}; known: {sorted(names)}")
        config = cls(**options)
        config.stop = (config.stop,) if isinstance(config.stop, str) else tuple(config.stop or ())
        config.check()
        return config

    def check(self) -> None:
        def bad(name, why):
            raise InputError(f"{name} = {getattr(self, name)!r}: {why}")
        for name in ("max_new_tokens", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                bad(name, "must be an integer >= 0")
        for name, lo, hi in (("temperature", 0.0, 100.0), ("top_p", 0.0, 1.0), ("repetition_penalty", 0.0, 100.0),
                             ("presence_penalty", -2.0, 2.0), ("frequency_penalty", -2.0, 2.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                bad(name, f"must be a number in [{lo}, {hi}]")
        if self.top_p == 0.0 or self.repetition_penalty == 0.0:
            bad("top_p" if self.top_p == 0.0 else "repetition_penalty", "must be > 0")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            bad("seed", "must be an integer >= 0 or None")
        if not all(isinstance(s, str) and s for s in self.stop):
            bad("stop", "must be non-empty strings")
        if self.logprobs is not None and (isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int)
                                          or not 0 <= self.logprobs <= 20):
            bad("logprobs", "must be None or an integer in [0, 20] (the likeliest tokens given beside each)")


def process(logits: np.ndarray, history, config: GenerationConfig, new=()) -> np.ndarray:
    """One position's logits (V,) after the repetition penalty, the presence and frequency
    penalties (on the `new` ids, those generated so far), temperature, top-k and top-p, in
    float64; tokens top-k/top-p exclude are -inf. (Greedy needs only the penalties.)"""
    logits = np.asarray(logits, np.float64).copy()
    if config.repetition_penalty != 1.0 and len(history):
        seen = np.unique(np.asarray(history, np.int64))
        values = logits[seen]
        logits[seen] = np.where(values > 0, values / config.repetition_penalty, values * config.repetition_penalty)
    if (config.presence_penalty or config.frequency_penalty) and len(new):
        ids, counts = np.unique(np.asarray(new, np.int64), return_counts=True)
        logits[ids] -= config.presence_penalty + config.frequency_penalty * counts
    if config.temperature == 0.0:
        return logits
    logits /= config.temperature
    if 0 < config.top_k < logits.size:
        kth = np.partition(logits, -config.top_k)[-config.top_k]
        logits[logits < kth] = -np.inf
    if config.top_p < 1.0:
        order = np.argsort(-logits, kind="stable")
        probs = np.exp(logits[order] - logits[order[0]])
        probs /= probs.sum()
        cut = np.cumsum(probs) - probs >= config.top_p      # tokens whose predecessors already reach p
        logits[order[cut]] = -np.inf
    return logits


def sample(logits: np.ndarray, history, config: GenerationConfig, rng: np.random.Generator, new=()) -> int:
    """The next token id from one position's logits (V,), given the ids seen so far (`new`: those
    generated)."""
    logits = process(logits, history, config, new)
    if config.temperature == 0.0:
        return int(np.argmax(logits))
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    return int(rng.choice(probs.size, p=probs))


def log_probs(logits: np.ndarray, token: int, top: int) -> dict:
    """The model's log-probability of `token` and of its `top` likeliest tokens (log-softmax of
    the raw logits, before any sampling option), as {"id", "logprob", "top": [(id, logprob)]}."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max()
    logp = shifted - np.log(np.exp(shifted).sum())
    best = np.argsort(-logp, kind="stable")[:top] if top else []
    return {"id": int(token), "logprob": float(logp[token]), "top": [(int(i), float(logp[i])) for i in best]}


class StopStrings:
    """Text pieces in, text pieces out, cut before the first stop string: a tail that could be
    the start of one is held until the next piece shows it is not."""

    def __init__(self, stops):
        self.stops, self.held, self.hit = tuple(stops), "", None

    def feed(self, piece: str) -> str:
        text = self.held + piece
        found = [(text.find(s), s) for s in self.stops if s in text]
        if found:
            at, self.hit = min(found)
            self.held = ""
            return text[:at]
        keep = max((n for s in self.stops for n in range(min(len(s) - 1, len(text)), 0, -1)
                    if text.endswith(s[:n])), default=0)
        self.held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        text, self.held = self.held, ""
        return text


class Generator:
    """A causal LM, its tokenizer and one KV cache: prompts in, token ids or text pieces out.

    Attention reads a window of the cache: its first W positions, W the smallest power of two
    (>= 64) that holds them all, so a step costs what the conversation needs, not the capacity.
    Decode steps (one token) are captured once per window as engine.graph graphs and replayed
    (`use_graphs`, then `steps`; where the backend cannot replay, they run eagerly). The cache allocates
    `first_rows` positions at first and doubles as the conversation grows (engine.nn.KVCache
    .reserve); a growth drops the captured graphs, which held the old tensors."""

    prefill_chunk = 128
    min_window = 64
    first_rows = 256

    def __init__(self, model, tokenizer, capacity: int = 2048, eos_ids=(), use_graphs: bool = True):
        self.tokenizer = tokenizer
        self.eos_ids = {int(i) for i in eos_ids}
        self.steps = graph.StepGraphs(use_graphs)   # window -> the captured decode step
        self.stats: dict = {}
        self.logprobs: list = []                    # with GenerationConfig.logprobs: one entry per token
        self._cancelled = False
        self._selector = None                       # engine.sampler's state on the device, made on first use
        self.bind(model, capacity)

    def bind(self, model, capacity: int | None = None) -> None:
        """Use `model` (say, moved to another backend) with a new, empty cache."""
        self.model = model
        self.cache = model.new_cache(capacity or self.cache.capacity, allocate=self.first_rows)
        self.steps.clear()

    @property
    def captured(self) -> bool:
        """Whether decode steps are being replayed from captured graphs (engine.graph)."""
        return self.steps.captured

    def cancel(self) -> None:
        """Stop the running generation before its next token (from a callback or another thread)."""
        self._cancelled = True

    def reset(self) -> None:
        """Forget the cached conversation (the next prompt is fed whole)."""
        self.cache.reset()

    def _window(self, end: int) -> int:
        window = self.min_window
        while window < end:
            window *= 2
        return min(window, self.cache.allocated)

    def _forward(self, ids: list[int], host: bool = True):
        """Feed ids at the cache's next positions; the logits (V,) after the last of them (as a
        tensor where the backend holds it, host False)."""
        device, start = self.cache.device, self.cache.length
        if self.cache.reserve(start + len(ids)):
            self.steps.clear()                      # captured over the tensors just replaced
        window = self._window(start + len(ids))
        if len(ids) == 1 and self.steps.enabled:
            logits = self.steps.run(window, lambda i, p: self.model(i, p, self.cache, last_only=True, window=window),
                                    ([[ids[0]]], [start]), device)   # (1, 1, V)
        elif self.steps.enabled and graph.Passes.replays(device):
            # a prefill chunk, replayed per (length, window) where a whole pass replays faster than
            # it records (webgpu); with the one captured before it at most, as each holds its activations
            key = ("prefill", len(ids), window)
            held = [k for k in self.steps.graphs if isinstance(k, tuple) and k[0] == "prefill" and k != key]
            for k in held[:-1]:
                del self.steps.graphs[k]
            logits = self.steps.run(key, lambda i, p: self.model(i, p, self.cache, last_only=True, window=window),
                                    ([ids], list(range(start, start + len(ids)))), device)   # (1, 1, V)
        else:
            x = tensor([ids], dtype=int64, device=device)                                # (1, T)
            positions = arange(start, start + len(ids), device=device)                  # (T,)
            logits = self.model(x, positions, self.cache, last_only=True, window=window)  # (1, 1, V)
        self.cache.append(ids)
        return logits.numpy()[0, -1] if host else logits[0, -1]

    def _prefill(self, prompt: list[int], host: bool = True):
        held = self.cache.tokens
        shared = 0
        limit = min(len(held), len(prompt) - 1)            # at least one token is fed, for its logits
        while shared < limit and held[shared] == prompt[shared]:
            shared += 1
        self.cache.truncate(shared)
        self.stats["reused_tokens"] = shared
        for start in range(shared, len(prompt), self.prefill_chunk):
            logits = self._forward(prompt[start:start + self.prefill_chunk], host)
        return logits

    def selects_on_device(self, config: GenerationConfig, grammar=None) -> bool:
        """Whether tokens are chosen on the device (engine.sampler): on a backend that keeps tensors
        there and has the kernel, with decode steps captured, and no option that needs the logits
        on the host (a grammar, logprobs)."""
        return (self.steps.enabled and sampler.selects(self.cache.device) and grammar is None
                and config.logprobs is None)

    def _device_tokens(self, logits, prompt: list[int], config: GenerationConfig, budget: int, rng):
        """tokens()'s ids chosen on the device (engine.sampler): each decode step is one captured
        graph (the model, then select_token) submitted with its 16-byte read-back, the next step
        submitted before the host reads this one's token (engine.sampler.pipeline). The caller
        appends each token it goes on from to the cache before asking for the next."""
        device = self.cache.device
        if self._selector is None or self._selector.vocab != logits.shape[-1] or self._selector.device != device:
            self._selector = TokenSelector(logits.shape[-1], device)
        selector = self._selector
        selector.start(Rules(config.temperature, config.top_k, config.top_p, config.repetition_penalty,
                             config.presence_penalty, config.frequency_penalty), prompt,
                       rng if config.temperature > 0 else None)
        for out in selector.choices(logits, self.cache.length, budget,
                                    lambda token, position: self._launch(selector, position, token), self._same_step):
            yield int(out[0])

    def _step_key(self, position: int):
        return ("select", self._window(position + 1))

    def _same_step(self, position: int, following: int) -> bool:
        """Whether the step at `following` replays the graph of the one at `position` with the
        cache as it is (so it can run on the inputs that step wrote on the device)."""
        return (following + 1 <= self.cache.allocated and self._step_key(position) == self._step_key(following)
                and self._step_key(position) in self.steps.graphs)

    def _launch(self, selector, position: int, token):
        """Submit the decode step at `position`: token None feeds what the previous step chose (on
        the device), else `token`. Returns what gives its [token, logprob, 0, 0]."""
        if self.cache.reserve(position + 1):
            self.steps.clear()                          # captured over the tensors just replaced
        window = self._window(position + 1)

        def step(i, p):
            logits = self.model(i, p, self.cache, last_only=True, window=window)     # (1, 1, V)
            return selector.select(logits[0, -1], i, p)                             # (4,)
        values = () if token is None else ([[token]], [position])
        return self.steps.launch(self._step_key(position), step, values, self.cache.device)

    def tokens(self, prompt_ids, config: GenerationConfig | None = None, cancel=None, grammar=None):
        """Generated ids, one at a time (an end-of-sequence id ends it and is not given out).
        grammar: an engine.structured Grammar the answer must follow (constrained decoding).
        With config.logprobs set, `self.logprobs` gets one entry per token (log_probs)."""
        config = config or GenerationConfig()
        prompt = [int(i) for i in prompt_ids]
        if not prompt:
            raise InputError("the prompt is empty: generation needs at least one token")
        room = self.cache.capacity - len(prompt)
        if room < 1:
            raise InputError(f"the prompt has {len(prompt)} tokens; the context holds {self.cache.capacity}")
        budget = min(config.max_new_tokens, room)
        constraint = grammar.start(budget, self.eos_ids) if grammar is not None else None   # engine.structured
        rng = np.random.default_rng(config.seed)
        self._cancelled = False
        self.stats = {"prompt_tokens": len(prompt), "new_tokens": 0, "stop_reason": "length"}
        self.logprobs = []
        on_device = constraint is None and self.selects_on_device(config)
        began = time.perf_counter()
        logits = self._prefill(prompt, host=not on_device)
        prefilled = time.perf_counter()
        fed = len(prompt) - self.stats["reused_tokens"]
        self.stats.update(prefill_s=prefilled - began, prefill_tok_s=fed / max(prefilled - began, 1e-9))
        history, first = list(prompt), None
        penalized = bool(config.presence_penalty or config.frequency_penalty)
        constrained_s = 0.0

        def pick(logits):
            return sample(logits, history, config, rng, history[len(prompt):] if penalized else ())
        chosen = self._device_tokens(logits, prompt, config, budget, rng) if on_device else None
        counters = getattr(get_backend(self.cache.device), "counters", None)
        token = None
        try:
            for n in range(budget):
                if self._cancelled or (cancel is not None and cancel()):
                    self.stats["stop_reason"] = "cancelled"
                    return
                if chosen is not None:
                    if n:
                        self.cache.append([token])      # the step that chooses the next one feeds it
                    token = next(chosen)
                elif constraint is None:
                    token = pick(logits)
                else:
                    began_step = time.perf_counter()
                    token = constraint.choose(logits, pick)
                    constraint.advance(token)
                    constrained_s += time.perf_counter() - began_step
                if config.logprobs is not None:
                    self.logprobs.append(log_probs(logits, token, config.logprobs))
                if n == 0:
                    first = time.perf_counter()
                    self.stats["ttft_s"] = first - began
                    before = counters() if counters is not None else None
                if token in self.eos_ids:
                    self.stats["stop_reason"] = "eos"
                    return
                history.append(token)
                self.stats["new_tokens"] = n + 1
                yield token
                if chosen is None and n + 1 < budget:
                    logits = self._forward([token])
        finally:                                  # decoding: the tokens after the first, and their time
            if chosen is not None:
                chosen.close()
            done = time.perf_counter()
            steps = max(self.stats["new_tokens"] - 1, 0)
            self.stats.update(total_s=done - began, decode_s=done - first if first else 0.0,
                              decode_tok_s=steps / (done - first) if first and steps else 0.0,
                              selected_on_device=on_device)
            if first and steps and counters is not None:     # a device's traffic per decode step
                after = counters()
                self.stats.update({f"{name}_per_step": (after[name] - before[name]) / steps
                                   for name in sampler.TRAFFIC})
            if constraint is not None:
                self.stats.update(masked_steps=constraint.masked, forced_tokens=constraint.forced,
                                  complete=constraint.complete, constraint_s=constrained_s)

    def stream(self, prompt_ids, config: GenerationConfig | None = None, cancel=None, grammar=None):
        """Text pieces as the ids come (UTF-8 safe, special tokens skipped, cut at stop strings)."""
        config = config or GenerationConfig()
        decoder = self.tokenizer.decode_stream(skip_special_tokens=True)
        stops = StopStrings(config.stop)
        ids = self.tokens(prompt_ids, config, cancel, grammar)
        for token in ids:
            piece = stops.feed(decoder.step(token))
            if piece:
                yield piece
            if stops.hit is not None:
                ids.close()
                self.stats["stop_reason"] = "stop"
                return
        tail = stops.feed(decoder.flush() or "")
        if stops.hit is not None:
            self.stats["stop_reason"] = "stop"
        tail += stops.flush() if stops.hit is None else ""
        if tail:
            yield tail
