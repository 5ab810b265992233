"""Layout: how a tensor's elements sit in its storage (shape, strides, offset).

Views (reshape, permute, expand, slicing) only make a new Layout; the storage is
shared. Strides count elements, not bytes, so backends with typed buffers
(WebGPU, wasm) use them as they are. A stride of 0 is a broadcast dimension.
"""
from __future__ import annotations

import functools
import math


def contiguous_strides(shape) -> tuple[int, ...]:
    return _contiguous_strides(tuple(shape))


@functools.lru_cache(maxsize=1024)          # a model's few shapes recur at every op: a hot path
def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def normalize_dim(dim: int, ndim: int) -> int:
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"dimension {dim} out of range for a tensor of {ndim} dimensions")
    return dim % max(ndim, 1)


class Layout:
    """Immutable once made (views make new ones), so is_contiguous is computed at most once."""
    __slots__ = ("shape", "strides", "offset", "_contiguous")

    def __init__(self, shape, strides=None, offset: int = 0):
        self.shape = tuple(map(int, shape))
        self.strides = _contiguous_strides(self.shape) if strides is None else tuple(strides)
        self.offset = offset
        self._contiguous = True if strides is None else None

    def __repr__(self) -> str:
        return f"Layout(shape={self.shape}, strides={self.strides}, offset={self.offset})"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        if self._contiguous is None:
            expected = contiguous_strides(self.shape)
            self._contiguous = all(n == 1 or s == e for n, s, e in zip(self.shape, self.strides, expected))
        return self._contiguous

    def span(self) -> tuple[int, int]:
        """(lowest, highest + 1) storage index this view touches."""
        if self.numel == 0:
            return self.offset, self.offset
        lo = hi = self.offset
        for n, s in zip(self.shape, self.strides):
            if s > 0:
                hi += (n - 1) * s
            else:
                lo += (n - 1) * s
        return lo, hi + 1

    # --- views ------------------------------------------------------------------
    def permute(self, dims) -> "Layout":
        dims = [normalize_dim(d, len(self.shape)) for d in dims]
        if sorted(dims) != list(range(len(self.shape))):
            raise ValueError(f"permute: {tuple(dims)} is not a permutation of {len(self.shape)} dims")
        return Layout([self.shape[d] for d in dims], [self.strides[d] for d in dims], self.offset)

    def expand(self, shape) -> "Layout":
        shape = tuple(shape)
        if len(shape) < len(self.shape):
            raise ValueError(f"expand: cannot expand shape {self.shape} to {shape}")
        lead = len(shape) - len(self.shape)
        old_shape = (1,) * lead + self.shape
        old_strides = (0,) * lead + self.strides
        new_shape, new_strides = [], []
        for want, have, stride in zip(shape, old_shape, old_strides):
            if want == -1:
                want = have
            if have == want:
                new_strides.append(stride)
            elif have == 1:
                new_strides.append(0)
            else:
                raise ValueError(f"expand: shape {self.shape} cannot broadcast to {shape}")
            new_shape.append(want)
        return Layout(new_shape, new_strides, self.offset)

    def slice(self, dim: int, start: int, stop: int, step: int) -> "Layout":
        """Python slice semantics on one dim (step > 0)."""
        if step <= 0:
            raise ValueError("slice step must be positive")
        start, stop, step = slice(start, stop, step).indices(self.shape[dim])
        n = max(0, (stop - start + step - 1) // step)
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = n, self.strides[dim] * step
        return Layout(shape, strides, self.offset + start * self.strides[dim] if n else self.offset)

    def select(self, dim: int, index: int) -> "Layout":
        n = self.shape[dim]
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of bounds for dimension {dim} with size {n}")
        index %= n
        return Layout(self.shape[:dim] + self.shape[dim + 1:], self.strides[:dim] + self.strides[dim + 1:],
                      self.offset + index * self.strides[dim])

    def unsqueeze(self, dim: int) -> "Layout":
        stride = self.strides[dim] * self.shape[dim] if dim < len(self.shape) else 1
        return Layout(self.shape[:dim] + (1,) + self.shape[dim:], self.strides[:dim] + (stride,) + self.strides[dim:],
                      self.offset)

    def view(self, shape) -> "Layout | None":
        """The same elements in a new shape without copying, or None if impossible.

        Walk the old dims from the innermost, cutting them into chunks that are
        contiguous among themselves; each chunk must be covered exactly by a run
        of new dims (torch's `view` rule).
        """
        shape = tuple(shape)
        if self.is_contiguous or self.numel == 0 or not self.shape:
            return Layout(shape, None, self.offset)
        new_strides = [0] * len(shape)
        v = len(shape) - 1
        base = self.strides[-1]
        old_count = new_count = 1
        for d in range(len(self.shape) - 1, -1, -1):
            old_count *= self.shape[d]
            chunk_ends = d == 0 or (self.shape[d - 1] != 1 and self.strides[d - 1] != old_count * base)
            if not chunk_ends:
                continue
            while v >= 0 and (new_count < old_count or shape[v] == 1):
                new_strides[v] = new_count * base
                new_count *= shape[v]
                v -= 1
            if new_count != old_count:
                return None
            if d > 0:
                base, old_count, new_count = self.strides[d - 1], 1, 1
        if v != -1:
            return None
        return Layout(shape, new_strides, self.offset)
