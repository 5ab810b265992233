"""A speech model's decoder over one 30 s window: the self-attention cache, the cross-attention
K/V, and decode steps replayed from captured graphs.

    session = DecoderSession(model)
    session.set_audio(model.encode(mel))           # cross K/V computed once for the window
    logits = session.feed([sot, lang, task], rows=(0, -1))   # (2, vocab): the rows asked for
    logits = session.feed([token])                 # one decode step: (1, vocab)
    session.rewind(3)                              # decode the window again from the prompt
    logits, scores = session.attention(tokens, heads, rows)   # word timestamps: one pass from position 0

The model is an encoder-decoder with `new_cache()` (an engine.nn.KVCache of the decoder's
positions), `new_cross()` and `cross_attention(features, out=)` (each block's K/V of the audio,
written into fixed buffers), and `decoder(input_ids, positions, cache, cross, rows, window)`
(models/whisper.py). The buffers live as long as the session, so a decode step captured once
(engine.graph) replays in every later window: only the token and position change. As in
engine.generation, attention reads the cache's first W positions, W the smallest power of two
(>= 64) that holds them, so a step costs what the window needs, and there is one graph per W.

`attention` runs a whole sequence from position 0 over the window's cross K/V (no second encoder
pass) and returns, beside the logits, the cross-attention scores of chosen heads
(engine.speech.timing aligns words with them); it leaves the session empty, as rewind(0).
"""
from __future__ import annotations

import numpy as np

from .. import graph
from ..dtypes import int64
from ..errors import InputError
from ..functions import arange
from ..sampler import TokenSelector, selects
from ..tensor import tensor


class DecoderSession:
    min_window = 64

    def __init__(self, model, use_graphs: bool = True):
        self.model = model
        self.cache = model.new_cache()
        self.cross = model.new_cross()
        self.steps = graph.StepGraphs(use_graphs)   # window -> the captured decode step
        self.has_audio = False
        self._selector: TokenSelector | None = None
        self.traffic: dict = {}                     # on a device: decode steps launched, their submissions, bytes read
        self._heads: dict = {}                      # (layer, head) pairs -> per block index tensors

    @property
    def length(self) -> int:
        """Positions held (the tokens fed since the window's start, less what was rewound)."""
        return self.cache.length

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    @property
    def captured(self) -> bool:
        """Whether decode steps replay from captured graphs."""
        return self.steps.captured

    def set_audio(self, features) -> None:
        """Start a window: the audio features' cross-attention K/V into the session's buffers,
        the self-attention cache emptied."""
        self.model.cross_attention(features, out=self.cross)
        self.cache.reset()
        self.has_audio = True

    def rewind(self, n: int) -> None:
        """Keep the first n positions (later rows are overwritten by the next feed)."""
        if not 0 <= n <= self.length:
            raise InputError(f"rewind({n}): the session holds {self.length} positions")
        self.cache.truncate(n)

    def _window(self, end: int) -> int:
        window = self.min_window
        while window < end:
            window *= 2
        return min(window, self.cache.capacity)

    def _check(self, tokens, start: int, rows) -> tuple[list[int], list[int]]:
        """The tokens as ints and the rows as indices into them, or InputError."""
        tokens = [int(t) for t in tokens]
        n = len(tokens)
        if not self.has_audio:
            raise InputError("set_audio(features) must come before feed()")
        if n == 0:
            raise InputError("feed() needs at least one token")
        if start + n > self.capacity:
            raise InputError(f"the decoder holds {self.capacity} positions: {start} + {n} tokens do not fit")
        picked = []
        for r in rows:
            if not -n <= int(r) < n:
                raise InputError(f"row {r} is outside the {n} tokens fed")
            picked.append(int(r) % n)
        return tokens, picked

    def _head_index(self, heads) -> list:
        """Per decoder block None or the int64 indices of its heads among the (layer, head) pairs."""
        key = tuple((int(layer), int(head)) for layer, head in heads)
        if key not in self._heads:
            n_layer, n_head = len(self.cross), self.cross[0][0].shape[1]
            if not key or not all(0 <= layer < n_layer and 0 <= head < n_head for layer, head in key):
                raise InputError(f"alignment heads must be (layer, head) pairs inside the decoder's {n_layer} "
                                 f"layers of {n_head} heads, got {list(key)}")
            layers = {}
            for layer, head in key:
                layers.setdefault(layer, []).append(head)
            self._heads[key] = [tensor(layers[i], dtype=int64, device=self.cache.device) if i in layers else None
                                for i in range(len(self.cross))]
        return self._heads[key]

    def attention(self, tokens, heads, rows=(-1,)) -> tuple[np.ndarray, np.ndarray]:
        """One forward pass of `tokens` from position 0 over the window's audio: the logits
        (len(rows), vocab) of the given rows and the cross-attention scores q k^T / sqrt(d)
        (len(heads), T, ctx) float32 of the (layer, head) pairs `heads`, in their order by layer.
        The session is left empty (rewind(0)): the next decoding feeds its prompt again."""
        tokens, picked = self._check(tokens, 0, rows)
        self.rewind(0)
        device = self.cache.device
        x = tensor([tokens], dtype=int64, device=device)                     # (1, T)
        positions = arange(0, len(tokens), device=device)                   # (T,)
        index = tensor(picked, dtype=int64, device=device)                  # (R,)
        logits, scores = self.model.decoder(x, positions, self.cache, self.cross, rows=index,
                                            window=self._window(len(tokens)), heads=self._head_index(heads))
        scores = [s.numpy()[0] for s in scores if s is not None]            # (h, T, ctx) per block
        return logits.numpy()[0], np.concatenate(scores)                    # (R, vocab), (H, T, ctx)

    # --- tokens chosen on the device (engine.sampler; engine.speech.decoding._sample_on_device) --------
    @property
    def device(self):
        return self.cache.device

    def selects_on_device(self) -> bool:
        """Whether decode steps choose their token on the device: a backend that keeps tensors
        there and has select_token, with steps captured."""
        return self.steps.enabled and selects(self.cache.device)

    def selector(self, vocab: int) -> TokenSelector:
        """The session's token selector (its state on the device, kept for the captured steps)."""
        if self._selector is None or self._selector.vocab != vocab:
            self._selector = TokenSelector(vocab, self.cache.device)
            self.steps.clear()                      # steps captured with another selector
        return self._selector

    def launch(self, selector: TokenSelector, token, position: int):
        """Submit the decode step at `position` that feeds `token` (None: the one the step before
        chose, already in the step's inputs) and chooses the next; returns what gives its answer
        [token, log-probability, 0, 0] (result())."""
        window = self._window(position + 1)

        def step(i, p):
            logits = self.model.decoder(i, p, self.cache, self.cross, window=window)   # (1, 1, V)
            return selector.select(logits[0, -1], i, p)                               # (4,)
        values = () if token is None else ([[token]], [position])
        return self.steps.launch(("select", window), step, values, self.cache.device)

    def follows(self, position: int, following: int) -> bool:
        """Whether the step at `following` replays the graph of the step at `position`, on the
        inputs that step wrote."""
        key = ("select", self._window(position + 1))
        return following < self.capacity and key == ("select", self._window(following + 1)) and key in self.steps.graphs

    def fed(self, token: int) -> None:
        """Count `token` as written at the next position (by a step launched for it)."""
        self.cache.append([token])

    def feed(self, tokens, rows=(-1,)) -> np.ndarray:
        """Write `tokens` at the next positions; the logits (len(rows), vocab) float32 of the
        given rows of this call (indices into `tokens`, negative from its end)."""
        start = self.length
        tokens, picked = self._check(tokens, start, rows)
        n = len(tokens)
        window = self._window(start + n)
        device = self.cache.device
        if n == 1 and self.steps.enabled:
            logits = self.steps.run(window, lambda i, p: self.model.decoder(i, p, self.cache, self.cross, window=window),
                                    ([tokens], [start]), device).numpy()[0]   # (1, vocab)
            logits = logits[[0] * len(picked)]
        else:
            x = tensor([tokens], dtype=int64, device=device)                 # (1, T)
            positions = arange(start, start + n, device=device)             # (T,)
            index = tensor(picked, dtype=int64, device=device)              # (R,)
            logits = self.model.decoder(x, positions, self.cache, self.cross, rows=index,
                                        window=window).numpy()[0]           # (R, vocab)
        self.cache.append(tokens)
        return logits
