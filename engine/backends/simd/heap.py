"""The simd kernels on a pool of threads in the browser: a Library whose heavy calls run there.

In Pyodide the kernels are a side module in Pyodide's own memory, which no other worker can
reach. With more than one thread the worker also starts web/kernel-pool.js: the threaded build of
the same C code on a shared WebAssembly.Memory, instantiated in this worker and in helper workers.
`HeapLibrary` is then the Library the simd backend uses: the exports that split their work (GEMM,
convolutions, attention, quantized products), when a call is large enough for threads to pay, run
on the pool's instance, their operands copied into its heap and their outputs copied back; every
other call runs on the side module exactly as on one thread. Same C code, same results.

One bridge crossing per call: Python writes a descriptor (the export, its arguments with the
addresses moved into the heap, the copies in and out) into a small array in Pyodide's memory,
and web/kernel-bridge.js reads it, copies, calls and copies back. Words of a descriptor:

    calls, then per call: export, argument count, copies in, copies out, the arguments (32 bits
    each, floats as float32), (from, to, bytes) per copy in, then per copy out

Each pointer's extent comes from the call's own arguments (its dims and strides, per the ABI in
wasm_kernels/README.md), so a call recorded by engine.graph replays with the same copies, and
`prepared` turns it into a descriptor written once: a replay is one crossing, and consecutive
prepared calls join into one (`join`).

Weights: arrays handed to `library.resident()` (linear and convolution weights, quantized
blocks) are copied into the heap on first use and stay there while their array lives; a weight
changed in place afterwards is not seen (parameters are constants to the engine). Everything
else goes in a scratch arena per call. Heap memory is never handed back while a prepared call
may still name it (old arenas and scratch buffers are kept when larger ones replace them).

Failures: a heap that cannot grow (the memory at its maximum) raises PoolMemoryFull inside, and
the call, or a captured step's program, runs on the side module instead, with the same bits
(`memory_full` says which and why); a kernel that traps on the pool (web/kernel-pool.js throws,
never hangs) is a KernelFault, and the kernels run on the side module from then on.
"""
from __future__ import annotations

import bisect
import ctypes
import functools
import json
import struct
import weakref

import numpy as np
from numpy.lib.array_utils import byte_bounds

from ...errors import KernelFault, PoolMemoryFull
from . import library
from .kernels import call_with_scratch
from .spans import IN, OUT, SPANS

ALIGN = 64
# the calls that split across the pool, and the work (multiply-adds) below which one stays on
# the side module: crossing to JS, copying and waking the helpers cost ~10-30 us, and a helper
# that shares its core with another process makes the caller wait for its part (a decode step's
# 576 x 576 products, ~40 us each, stay; its 576 x 3072 ones and the output head go)
POOL = ("gemm_f32", "gemm_f16w_f32", "conv2d_f32", "depthwise_conv2d_f32", "attention_f32", "linear_q_f32")
MIN_WORK = 1 << 20
# and the multiply-adds per byte copied below which it stays too: at ~10-20 G multiply-adds/s on
# one thread against ~12 GB/s of copies, half the work saved must outweigh the bytes moved
WORK_PER_BYTE = 4
_FORMAT = {library.POINTER: "I", library.FLOAT: "f"}


class Heap:
    """First-fit allocator over the pool's memory, from its heap base up; grows the memory."""

    def __init__(self, base: int, end: int, grow):
        base = -(-base // ALIGN) * ALIGN
        self.free, self.used, self.end, self._grow = [[base, end - base]] if end > base else [], {}, end, grow

    def alloc(self, size: int) -> int:
        size = -(-max(size, 1) // ALIGN) * ALIGN
        for i, block in enumerate(self.free):
            if block[1] >= size:
                start = block[0]
                if block[1] == size:
                    del self.free[i]
                else:
                    block[0], block[1] = start + size, block[1] - size
                self.used[start] = size
                return start
        old = self.end
        try:
            self.end = int(self._grow(max(size, old // 4)))
        except Exception as e:              # the bridge's RangeError: past the memory's maximum
            raise PoolMemoryFull(f"the kernel pool's memory ({old} bytes) cannot grow for {size} more: {e}") from e
        if self.free and self.free[-1][0] + self.free[-1][1] == old:
            self.free[-1][1] += self.end - old
        else:
            self.free.append([old, self.end - old])
        return self.alloc(size)

    def release(self, start: int) -> None:
        size = self.used.pop(start)
        i = bisect.bisect(self.free, [start, 0])
        self.free.insert(i, [start, size])
        if i + 1 < len(self.free) and start + size == self.free[i + 1][0]:
            self.free[i][1] += self.free.pop(i + 1)[1]
        if i and self.free[i - 1][0] + self.free[i - 1][1] == start:
            self.free[i - 1][1] += self.free.pop(i)[1]


class _Resident:
    """An array's bytes [lo, hi) in Pyodide's memory, and their copy in the heap (0: not yet); for a
    mirror (heap_program.py), the range [lo, hi) written since it was copied (`dirty`, or None)."""
    __slots__ = ("address", "dirty", "hi", "key", "lo", "pending", "ref")

    def __init__(self, lo: int, hi: int, key: int):
        self.lo, self.hi, self.key, self.address, self.pending, self.ref, self.dirty = lo, hi, key, 0, 0, None, None


class Prepared:
    """A pool call with fixed arguments: its descriptor written once (`words`), run in one crossing;
    on the side module instead (`local`: the calls with their own arguments) while the library is
    set to one thread, as a call made then would run."""

    def __init__(self, library, words: np.ndarray, name: str, local: list):
        self.library, self.run, self.words, self.name, self.local = library, library._run, words, name, local
        self.address = words.ctypes.data

    def __call__(self):
        if self.library.threads < 2:
            for fn, args in self.local:
                fn(*args)
        elif self.run(self.address):
            raise RuntimeError(f"{self.name}: the pool's kernel reported an error")


def join(prepared: list[Prepared]) -> Prepared:
    """Several prepared calls as one descriptor: one crossing runs them in order."""
    words = np.concatenate([np.array([sum(int(p.words[0]) for p in prepared)], np.uint32)] +
                           [p.words[1:] for p in prepared])
    return Prepared(prepared[0].library, words, "+".join(p.name for p in prepared),
                    [call for p in prepared for call in p.local])


class HeapLibrary:
    """library.Library's exports: the side module's, except POOL's, which run on the pool when the
    pool has more than one thread and the call has MIN_WORK or more. `bridge` is the JS object of
    web/kernel-bridge.js (run(address), grow(bytes), info(), setThreads(n))."""

    def __init__(self, local, bridge):
        self.local, self.bridge, self.path, self.features = local, bridge, local.path, local.features
        self.min_work, self.work_per_byte = MIN_WORK, WORK_PER_BYTE
        self.pool_calls = 0                 # calls run on the pool (replays of prepared ones not counted)
        info = json.loads(bridge.info())
        if info["abi"] != library.ABI:
            raise OSError(f"the pool's kernels implement ABI {info['abi']}, this engine needs {library.ABI}")
        self.threads, self.reason = int(info["threads"]), info.get("reason")
        self.heap = Heap(info["heap_base"], info["heap_end"], bridge.grow)
        self._arena, self._arena_size = 0, 0
        self._scratch, self._scratch_floats = 0, 0
        self._starts: list[int] = []       # the residents, by their first byte
        self._entries: list[_Resident] = []
        self._roots: dict[int, _Resident] = {}
        self._words = np.zeros(256, np.uint32)
        self._words_address, self._words_bytes = self._words.ctypes.data, self._words.nbytes
        self._formats: dict = {}
        self._mirrors: dict[int, _Resident] = {}   # arrays a PoolProgram keeps a heap copy of, by id
        self.epoch = 0                             # counts heap copies released (a program re-checks its own)
        self.marks = 0                             # counts eager writes marked in mirrors
        self.unplaced = None
        self.memory_full = None             # the last call that ran on one thread for want of heap
        for name in library.SIGNATURES:
            setattr(self, name, getattr(local, name))
        bridge.define(json.dumps(POOL + ("engine_run_program",)))
        self.run_program = len(POOL)               # the descriptor's export index of engine_run_program
        for index, name in enumerate(POOL):
            setattr(self, name, self._export(index, name))

    def _run(self, address: int) -> int:
        """bridge.run(address); a kernel that traps on the pool (web/kernel-pool.js throws, never
        hangs) is a KernelFault, and the kernels run on the side module from then on."""
        try:
            return self.bridge.run(address)
        except Exception as e:              # the bridge's JS error, as Pyodide raises it
            self.threads = 1
            raise KernelFault(f"the kernel pool failed: {e}") from e

    @property
    def flavour(self) -> str:
        return self.local.flavour

    def __repr__(self) -> str:
        return f"<engine kernels {self.flavour} from {self.path}, {self.threads} threads on the pool>"

    # --- engine.threads' provider: the count in effect, asked of the pool (a helper lost after
    # the start leaves it fewer) ---------------------------------------------------------------------
    def get_num_threads(self) -> int:
        self.threads = int(self.bridge.threads())
        return self.threads

    def set_num_threads(self, n: int) -> int:
        self.threads = int(self.bridge.setThreads(int(n)))
        return self.threads

    def describe(self) -> str:
        n = self.get_num_threads()
        reason = self.bridge.reason()
        return f"{n} thread{'s' if n != 1 else ''}" + (f" ({reason})" if reason and n == 1 else "")

    # --- weights ----------------------------------------------------------------------------------
    def resident(self, array) -> None:
        """Keep `array`'s memory in the heap (copied on first use) for as long as it lives."""
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        if id(root) in self._roots or not root.size:
            return
        lo, hi = byte_bounds(root)
        entry = _Resident(lo, hi, id(root))
        entry.ref = weakref.ref(root, lambda _: self._evict(entry))
        self._roots[entry.key] = entry
        i = bisect.bisect(self._starts, lo)
        self._starts.insert(i, lo)
        self._entries.insert(i, entry)

    def _evict(self, entry) -> None:
        self._roots.pop(entry.key, None)
        i = self._entries.index(entry)
        del self._entries[i], self._starts[i]
        if entry.address:
            self.heap.release(entry.address)
            self.epoch += 1

    def resident_entry(self, root):
        """The resident entry of a weight `root` (an array registered by resident()), or None."""
        return self._roots.get(id(root))

    def mirror(self, root) -> _Resident:
        """The heap copy of `root` (an array that is not a weight: a KV cache, a constant) that
        programs read, kept in step with what is written to it: eager writes mark the range they
        wrote (`written`), copied again before the next program runs."""
        entry = self._mirrors.get(id(root))
        if entry is None:
            lo, hi = byte_bounds(root)
            entry = self._mirrors[id(root)] = _Resident(lo, hi, id(root))
            entry.ref = weakref.ref(root, lambda _: self._drop_mirror(entry))
        return entry

    def _drop_mirror(self, entry) -> None:
        self._mirrors.pop(entry.key, None)
        if entry.address:
            self.heap.release(entry.address)
            self.epoch += 1

    def written(self, view) -> None:
        """An eager write to `view` (in place, outside any program): mirrors it overlaps copy that
        range again before their next use."""
        if self._mirrors:
            self._mark(*byte_bounds(view))

    def _mark(self, lo: int, hi: int) -> None:
        self.marks += 1
        for entry in self._mirrors.values():
            if entry.lo < hi and lo < entry.hi:
                lo2, hi2 = max(lo, entry.lo), min(hi, entry.hi)
                entry.dirty = (lo2, hi2) if entry.dirty is None else \
                    (min(lo2, entry.dirty[0]), max(hi2, entry.dirty[1]))

    def flush(self, entries) -> None:
        """Copy the ranges written to these mirrors since their heap copy was made."""
        copies = []
        for entry in entries:
            if entry.dirty is not None and entry.address:
                lo, hi = entry.dirty
                copies.append((lo, entry.address + lo - entry.lo, hi - lo))
            entry.dirty = None
        if copies:
            self.copy_in(copies)

    def copy_in(self, copies) -> None:
        """Copy (from Pyodide's memory, to the heap, bytes) triples, in one crossing."""
        words = np.array([len(copies)] + [v for c in copies for v in c], np.uint32)
        self.bridge.copyIn(words.ctypes.data)

    def scratch(self) -> tuple[int, int]:
        """The pool calls' scratch: (its heap address, its size in floats)."""
        if not self._scratch:
            self._grow_scratch(1 << 18)
        return self._scratch, self._scratch_floats

    def grow_scratch(self) -> None:
        """Twice the scratch (the old one stays: a prepared call or program may name it)."""
        self._grow_scratch(2 * self._scratch_floats)

    def _grow_scratch(self, floats: int) -> None:
        self._scratch = self.heap.alloc(4 * floats)
        self._scratch_floats = floats

    def _resident_for(self, lo: int, hi: int):
        i = bisect.bisect(self._starts, lo) - 1
        if i >= 0:
            entry = self._entries[i]
            if entry.lo <= lo and hi <= entry.hi:
                return entry
        return None

    # --- calls --------------------------------------------------------------------------------------
    def _export(self, index: int, name: str):
        local_fn = getattr(self.local, name)
        spans_of, work_of = SPANS[name]
        types = library.SIGNATURES[name][1]
        formats = "".join(_FORMAT.get(t, "I" if t is ctypes.c_size_t else "i") for t in types)

        def call(*args):
            spans = self._pays(args, work_of, spans_of) if self.threads > 1 else None
            if spans is None:
                return local_fn(*args)
            try:
                return self._call(index, name, args, spans, formats)
            except PoolMemoryFull as e:      # nothing ran: this call on one thread instead
                self.memory_full = f"{name}: {e}"
                return local_fn(*args)

        def prepared(*args):
            """This call with these arguments as a Prepared pool call (it runs once here), or None
            where it runs on the side module."""
            spans = self._pays(args, work_of, spans_of) if self.threads > 1 else None
            if spans is None:
                return None
            try:
                self._call(index, name, args, spans, formats)
                size, _ = self._describe(index, name, args, spans, formats)
            except PoolMemoryFull as e:      # it runs on the side module then
                self.memory_full = f"{name}: {e}"
                return None
            local = (functools.partial(call_with_scratch, local_fn), args[:-2]) if name in library.SCRATCH \
                else (local_fn, args)                  # the side module's scratch, as an eager call's
            return Prepared(self, self._words[:size // 4].copy(), name, [local])

        call.__name__, call.prepared = name, prepared
        return call

    def _pays(self, args, work_of, spans_of):
        """Whether threads gain more than the copies cost: MIN_WORK multiply-adds or more, and
        WORK_PER_BYTE of them per byte copied in or out (a decode step's attention over its cache
        window, or a depthwise convolution, moves about as many bytes as it multiplies: it stays).
        The spans of its pointers when it does, else None."""
        work = work_of(args)
        if work < self.min_work:
            return None
        copied = 0
        spans = spans_of(args)
        for _, (_, lo, hi, direction) in spans:
            if direction != IN or self._resident_for(lo, hi) is None:
                copied += hi - lo
        return spans if work >= self.work_per_byte * copied else None

    def _call(self, index, name, args, spans, formats):
        self.pool_calls += 1
        while True:
            _, uploads = self._describe(index, name, args, spans, formats)
            need = None
            try:
                need = self._run(self._words_address)
            finally:
                for entry in uploads:                  # its heap copy is in place from now on, or not at all
                    if need == 0:
                        entry.address = entry.pending
                    else:
                        self.heap.release(entry.pending)
                    entry.pending = 0
            if not need:
                return 0
            if self._scratch_floats >= need:
                raise RuntimeError(f"{name} asked for more scratch twice")
            self._grow_scratch(max(need, 2 * self._scratch_floats))

    def _unpend(self, uploads) -> None:
        """Weights placed for a call that will not run: not there after all."""
        for entry in uploads:
            self.heap.release(entry.pending)
            entry.pending = 0

    def _describe(self, index, name, args, spans, formats):
        """Writes the descriptor of one call into self._words: (its size in bytes, the resident
        entries it uploads)."""
        args = list(args)
        if None in args:
            args = [0 if v is None else v for v in args]
        copies_in, uploads, temporaries = [], [], []
        need = 0
        for position, (address, lo, hi, direction) in spans:
            if hi <= lo:
                continue
            if direction == IN:
                entry = self._resident_for(lo, hi)
                if entry is not None:
                    if not entry.address and not entry.pending:
                        try:
                            entry.pending = self.heap.alloc(entry.hi - entry.lo)
                        except PoolMemoryFull:
                            self._unpend(uploads)
                            raise
                        uploads.append(entry)
                        copies_in += (entry.lo, entry.pending, entry.hi - entry.lo)
                    args[position] = (entry.address or entry.pending) + (address - entry.lo)
                    continue
            else:
                self._stale(lo, hi)
            temporaries.append((lo, hi, direction, position, address))
            need += hi - lo + ALIGN
        if need > self._arena_size:
            size = max(need, 2 * self._arena_size)
            try:
                self._arena = self.heap.alloc(size)                      # the old one stays (prepared calls)
            except PoolMemoryFull:
                self._unpend(uploads)
                raise
            self._arena_size = size
        temporaries.sort()
        copies_out = []
        at, end, group_lo, group_direction = self._arena, 0, 0, 0     # the group of overlapping spans being placed
        for lo, hi, direction, position, address in temporaries:
            if lo >= end:                                               # a new group: one copy each way
                if end:
                    _copies(copies_in, copies_out, group_lo, at, end, group_direction)
                    at = -(-(at + end - group_lo) // ALIGN) * ALIGN
                group_lo, end, group_direction = lo, hi, direction
            else:
                end, group_direction = max(end, hi), group_direction | direction
            args[position] = at + (address - group_lo)
        if end:
            _copies(copies_in, copies_out, group_lo, at, end, group_direction)
        if name in library.SCRATCH:
            args[-2], args[-1] = self.scratch()
        key = (index, len(copies_in), len(copies_out))
        fmt = self._formats.get(key)
        if fmt is None:
            fmt = self._formats[key] = struct.Struct("<5I" + formats + "I" * (len(copies_in) + len(copies_out)))
            if fmt.size > self._words_bytes:
                self._words = np.zeros(2 * fmt.size // 4, np.uint32)
                self._words_address, self._words_bytes = self._words.ctypes.data, self._words.nbytes
        fmt.pack_into(self._words, 0, 1, index, len(args), len(copies_in) // 3, len(copies_out) // 3, *args,
                      *copies_in, *copies_out)
        return fmt.size, uploads

    def _stale(self, lo: int, hi: int) -> None:
        """An output written over a resident range: its heap copy is made again on next use."""
        starts = self._starts
        for entry in self._entries[max(bisect.bisect(starts, lo) - 1, 0):bisect.bisect(starts, hi)]:
            if entry.lo < hi and lo < entry.hi and entry.address:
                self.heap.release(entry.address)
                entry.address = 0
                self.epoch += 1
        if self._mirrors:
            self._mark(lo, hi)


def _copies(copies_in, copies_out, lo, at, hi, direction):
    if direction & IN:
        copies_in += (lo, at, hi - lo)
    if direction & OUT:
        copies_out += (at, lo, hi - lo)


class NoPool:
    """engine.threads' provider in a worker whose pool did not start: 1 thread, and why."""

    def __init__(self, reason: str | None):
        self.reason = reason

    def get_num_threads(self) -> int:
        return 1

    def set_num_threads(self, n: int) -> int:
        return 1

    def describe(self) -> str:
        return f"1 thread ({self.reason})" if self.reason else "1 thread"


def start(bridge) -> HeapLibrary:
    """Make the pool behind `bridge` (web/kernel-bridge.js) run the simd backend's heavy calls."""
    loaded = HeapLibrary(library.load(), bridge)          # the simd backend, chosen here
    library.use(loaded)
    return loaded
