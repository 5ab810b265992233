"""A 2-D weight read by rows, for the ids a model actually uses: word-embedding tables.

Half of a small text encoder is its word-embedding table (all-MiniLM-L6-v2: 30522 x 384),
and a sentence uses a few dozen of its rows. The site therefore serves such a table in
blocks of rows, each with its own sha256 in the manifest (buildtools/convert.py), and a
`RowTable` fetches the blocks holding the ids it is asked for, verifies and caches them
(engine.site.folders and engine.site.remote) and keeps them. `F.embedding` gathers from it like
from a tensor: a weight type of the core, as QuantizedTensor is, that nn reads and io fills.

Fetching is asynchronous (the browser's fetch and Cache API are): `await table.fetch(ids)`
before a forward pass takes no thread. A synchronous `gather` of rows not fetched yet waits
for them itself (engine.runtime.wait: through JSPI in the browser, `asyncio.run` natively).
Rows come out as float32 whatever the stored dtype.
"""
from __future__ import annotations

import numpy as np

from . import runtime
from .dtypes import DType, as_dtype, float32, to_numpy_compute
from .errors import FetchError, InputError


PREPARE = "await the pipeline's prepare(...)"     # what to await where a gather cannot wait


class RowTable:
    """A (rows, columns) weight whose rows arrive in blocks of `block_rows` on demand.

    fetch_blocks: async (block indices) -> {block: bytes of that block, verified}; the bytes
    hold `block_rows` rows (fewer in the last block) of `storage` dtype, little-endian.
    """

    def __init__(self, name: str, shape: tuple[int, int], storage: DType, block_rows: int, fetch_blocks,
                 device: str | None = None):
        self.name, self.shape, self.storage, self.block_rows = name, tuple(shape), storage, block_rows
        self._fetch_blocks = fetch_blocks
        self._blocks: dict[int, np.ndarray] = {}
        self.dtype = float32                      # what gathered rows come out as
        self.device = device

    # the Tensor-like surface Module and Weights use
    @property
    def ndim(self) -> int:
        return 2

    def numel(self) -> int:
        return self.shape[0] * self.shape[1]

    def to(self, *args, dtype=None, device=None) -> "RowTable":
        """Rows are gathered on the host and moved with the result: only the device is noted."""
        for a in args:
            if isinstance(a, str):
                device = a
        if dtype is not None and as_dtype(dtype) is not float32:
            raise InputError(f"{self.name}: a row table gives float32 rows, not {as_dtype(dtype).name}")
        twin = RowTable(self.name, self.shape, self.storage, self.block_rows, self._fetch_blocks, device)
        twin._blocks = self._blocks                 # one store of fetched rows
        return twin

    def __repr__(self) -> str:
        return (f"RowTable({self.name!r}, shape={self.shape}, storage={self.storage.name}, "
                f"{len(self._blocks)}/{self.num_blocks} blocks fetched)")

    @property
    def num_blocks(self) -> int:
        return -(-self.shape[0] // self.block_rows)

    @property
    def fetched_rows(self) -> int:
        return sum(len(b) for b in self._blocks.values())

    def _ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids).reshape(-1)
        if ids.size and (ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= self.shape[0]):
            bad = ids[(ids < 0) | (ids >= self.shape[0])] if ids.dtype.kind in "iu" else ids
            raise InputError(f"{self.name}: row ids must be integers in [0, {self.shape[0]}), "
                             f"got {bad[:5].tolist()}")
        return ids.astype(np.int64, copy=False)

    def missing(self, ids) -> list[int]:
        """The blocks holding `ids` that have not been fetched."""
        return sorted({int(b) for b in np.unique(self._ids(ids) // self.block_rows)} - set(self._blocks))

    async def fetch(self, ids) -> int:
        """Fetch the blocks holding `ids` that are not here yet; the number of blocks fetched."""
        blocks = self.missing(ids)
        if not blocks:
            return 0
        found = await self._fetch_blocks(blocks)
        for block in blocks:
            rows = min(self.block_rows, self.shape[0] - block * self.block_rows)
            data = found[block]
            want = rows * self.shape[1] * self.storage.itemsize
            if len(data) != want:
                raise FetchError(f"block {block} has {len(data)} bytes, expected {want}", tensor=self.name)
            array = np.frombuffer(data, self.storage.storage.newbyteorder("<")).reshape(rows, self.shape[1])
            self._blocks[block] = to_numpy_compute(array, self.storage).astype(np.float32)
        return len(blocks)

    def gather(self, ids) -> np.ndarray:
        """(len(ids), columns) float32: the rows `ids` (fetched first if needed)."""
        ids = self._ids(ids)
        if self.missing(ids):
            runtime.wait(self.fetch(ids), PREPARE)
        out = np.empty((ids.size, self.shape[1]), np.float32)
        blocks, within = np.divmod(ids, self.block_rows)
        for block in np.unique(blocks):
            at = blocks == block
            out[at] = self._blocks[int(block)][within[at]]
        return out
