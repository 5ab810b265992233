"""KVCache: the keys and values a decoder has seen, preallocated and written in place.

Autoregressive decoding attends each new token to every earlier one. The cache holds, per
layer, keys and values of shape (batch, kv_heads, capacity, head_dim) allocated once; a step
writes its tokens' rows at their positions with `index_copy_` (engine.ops INDEX_COPY), so
nothing is concatenated per token and nothing moves. Positions are data (an int64 tensor), not
Python ints, so one decode step has the same shapes and kernel calls at every position and can
be captured once and replayed (engine.graph). Attention reads the whole capacity with a mask
(`mask(positions)`: key position <= query position); grouped-query attention reads KV head
h // (H // Hkv) itself (F.scaled_dot_product_attention(enable_gqa=True)), so keys are never
repeated per query head.

The bookkeeping is the caller's: a model's forward only writes rows; the generator records
what it fed with `append(tokens)`, and reuses a shared prefix with `truncate(n)` (rows past
`length` are stale and masked out by position, never read).

Rows may be allocated as the conversation needs them: `allocate=` rows at first (all of
`capacity` by default), and `reserve(n)` before a forward that writes up to position n - 1
grows the tensors (doubling, up to the capacity; the rows held are copied, once per growth).
SmolLM2's cache is 46 KB a position: a 1,024-position chat that has used 165 takes 12 MB,
not 47. A growth replaces the tensors, so graphs captured over the old ones must be dropped
(engine.generation does).
"""
from __future__ import annotations

from .. import dtypes
from ..errors import InputError
from ..functions import arange, gt, le, logical_and, sub, zeros


class KVCache:
    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, capacity: int, *, batch: int = 1,
                 device: str | None = None, dtype=dtypes.float32, allocate: int | None = None):
        allocate = capacity if allocate is None else allocate
        if min(num_layers, kv_heads, head_dim, capacity, batch, allocate) <= 0 or allocate > capacity:
            raise InputError(f"KVCache needs positive sizes (allocate <= capacity), got layers={num_layers} "
                             f"kv_heads={kv_heads} head_dim={head_dim} capacity={capacity} batch={batch} "
                             f"allocate={allocate}")
        shape = (batch, kv_heads, allocate, head_dim)
        self.key = [zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]     # (B, Hkv, A, D)
        self.value = [zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]   # (B, Hkv, A, D)
        self.positions = arange(capacity, device=device)            # (C,) int64: each row's position
        self.capacity = capacity
        self.tokens: list[int] = []                                 # the ids whose rows are held, in order

    @property
    def length(self) -> int:
        """How many positions hold valid rows (0 .. length-1)."""
        return len(self.tokens)

    @property
    def allocated(self) -> int:
        """How many positions the tensors hold now (<= capacity)."""
        return self.key[0].shape[2]

    def reserve(self, n: int) -> bool:
        """Make room for positions 0 .. n-1 (n <= capacity); True when the tensors were replaced."""
        if n <= self.allocated:
            return False
        if n > self.capacity:
            raise InputError(f"the KV cache holds at most {self.capacity} positions, {n} asked for")
        size = self.allocated
        while size < n:
            size *= 2
        size = min(size, self.capacity)
        held = self.positions[:self.allocated]                      # (A,) the rows copied over
        for tensors in (self.key, self.value):
            for i, old in enumerate(tensors):
                b, h, _, d = old.shape
                grown = zeros((b, h, size, d), dtype=old.dtype, device=old.device)   # (B, Hkv, A', D)
                grown.index_copy_(2, held, old)
                tensors[i] = grown
        return True

    @property
    def device(self) -> str:
        return self.key[0].device

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.key + self.value)

    def update(self, layer: int, positions, key, value):
        """Write key/value (B, Hkv, T, D) at `positions` (T,) int64 of `layer`; returns the
        layer's whole (B, Hkv, C, D) key and value tensors to attend over."""
        self.key[layer].index_copy_(2, positions, key)
        self.value[layer].index_copy_(2, positions, value)
        return self.key[layer], self.value[layer]

    def mask(self, positions, window: int | None = None, sliding_window: int | None = None):
        """(T, A) bool over the allocated rows, or (T, window) for the first `window` rows: True
        where row j's position is <= query t's position (causal over the cache), and, with a
        sliding window W, > query t's position - W (see causal_mask)."""
        rows = self.positions[:self.allocated if window is None else window]
        return causal_mask(rows, positions, sliding_window)

    def room(self, n: int) -> None:
        """Raise InputError unless n more tokens fit."""
        if self.length + n > self.capacity:
            raise InputError(f"the KV cache holds {self.length} of {self.capacity} positions: {n} more "
                             f"do not fit (start a new conversation, or make a larger cache)")

    def append(self, tokens) -> None:
        """Record that the rows of `tokens` were written at positions length, length+1, ..."""
        tokens = [int(t) for t in tokens]
        self.room(len(tokens))
        self.tokens.extend(tokens)

    def truncate(self, n: int) -> None:
        """Keep the first n positions (a shared prompt prefix); later rows become stale."""
        del self.tokens[max(0, n):]

    def reset(self) -> None:
        self.truncate(0)

    def to(self, device: str) -> "KVCache":
        self.key = [t.to(device) for t in self.key]
        self.value = [t.to(device) for t in self.value]
        self.positions = self.positions.to(device)
        return self

    def __repr__(self) -> str:
        b, h, a, d = self.key[0].shape
        return (f"KVCache(layers={len(self.key)}, batch={b}, kv_heads={h}, capacity={self.capacity}, "
                f"allocated={a}, head_dim={d}, length={self.length}, device={self.device!r})")



def causal_mask(key_positions, query_positions, sliding_window: int | None = None):
    """(T, S) bool from key positions (S,) and query positions (T,), int64 tensors: True where
    key j may be attended from query t, j <= t; with a sliding window W also j > t - W (the W
    latest positions, the query's own included: transformers' sliding_window_overlay, llama.cpp's
    standard SWA). Tensor ops only, so the mask's shape is fixed by the tensors' and a captured
    decode step computes it again at each position."""
    keys, queries = key_positions.reshape(1, -1), query_positions.reshape(-1, 1)
    mask = le(keys, queries)                                        # (T, S)
    if sliding_window is not None:
        mask = logical_and(mask, gt(keys, sub(queries, sliding_window)))
    return mask
