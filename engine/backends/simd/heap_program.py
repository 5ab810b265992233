"""A captured step on the kernel pool, whole: its program in the pool's heap, run in one crossing.

In a page with the kernel pool (heap.py), a captured step whose every kernel is a C call
(engine.graph: a decode step, a Whisper decoder step) runs as one program on the pool's instance.
Every array its calls read or write has a place in the pool's heap, the program's words name
those places, and one bridge crossing copies the step's inputs in, runs engine_run_program there
(each kernel splitting over the pool's threads as it does natively: matrix-vector products,
attention, norms and all) and copies its outputs back. Activations stay in the heap from kernel
to kernel; only the step's inputs and outputs cross.

Where each array lives in the heap:
- the graph's inputs and its own buffers: a block of this program's own, where buffers whose
  lives do not overlap share bytes (every buffer a step makes is written whole before it is
  read: the kernels' outputs are uninitialised memory); the inputs are copied in at every run,
  the outputs back after it;
- weights (arrays registered with HeapLibrary.resident): their resident copy, which eager pool
  calls share;
- any other array that existed before the capture (a KV cache, cross-attention keys, constant
  tables): its mirror (HeapLibrary.mirror), shared by every program that reads it. An eager write
  into one (a prefill's rows through INDEX_COPY, HeapLibrary.written) marks the range written,
  and the next run copies that range in first.

Steps that are not C calls (a NumPy gather of RoPE's rows at the position, the causal mask's
comparison) run in Python between the programs, as they would anyway: the own buffers they read
are copied out by the program before them, the ones they write copied in by the one after.

Rows the program itself writes into such an array (a decode step's keys and values) must reach
Pyodide's copy too, which eager code (the next prefill) reads there: the run copies back those
rows' sources and indices, and the same index_copy calls then run on the side module (one more
crossing). With the library set to one thread the program runs on the side module as recorded
(program.Program) and marks the rows it wrote as the mirrors' to copy again.
"""
from __future__ import annotations

import bisect
import itertools
import struct
import weakref

import numpy as np
from numpy.lib.array_utils import byte_bounds

from ...errors import PoolMemoryFull
from . import library
from .heap import ALIGN
from .spans import IN, extent
from .program import _IDS, Program, _word

# (dest, ...) argument positions of index_copy_f32: outer, n, inner, dest, d_outer, d_row, index,
# count, source, s_outer, s_row
_INDEX_COPY = "index_copy_f32"
_MAX_GROWTHS = 8


class Unplaceable(Exception):
    """The arrays a program names overlap without one holding the other: no heap layout of them."""


def _root(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _groups(roots):
    """(lo, hi, roots) of the arrays' byte ranges merged where they overlap (views of one file's
    bytes made separately share them), in address order."""
    groups = []
    for lo, hi, r in sorted(((*byte_bounds(r), r) for r in roots), key=lambda p: (p[0], -p[1])):
        if groups and lo < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], hi)
            groups[-1][2].append(r)
        else:
            groups.append([lo, hi, [r]])
    return groups


def _rows(args):
    """The byte extents (destination, source, index) of an index_copy_f32 call's arguments."""
    outer, n, inner, dest, d_outer, d_row, index, count, source, s_outer, s_row = args
    return (extent(dest, 4, ((outer, d_outer), (n, d_row), (inner, 1)), IN)[1:3],
            extent(source, 4, ((outer, s_outer), (count, s_row), (inner, 1)), IN)[1:3],
            (index, index + 8 * count))


class _Segment:
    """A run of C calls (`steps`) as one program, or NumPy steps (`host`: prepared calls) run in
    Python: a program copies `ins` (Pyodide byte ranges) into the heap before it and `outs` back
    after it; its words are [first, end) of the program's."""

    def __init__(self, steps=None, host=None):
        self.steps, self.host = steps, host
        self.ins, self.outs = set(), set()
        self.first = self.end = 0
        self.descriptor = None


class PoolProgram:
    """A captured graph's prepared calls (`calls`: C calls, with `.native` = (steps, the arrays
    their pointers lie in), or NumPy steps, with `.host` = (arrays read, arrays written)) run on
    the pool, each run of C calls as one program (see the module's docstring). `inputs` and
    `outputs` are the graph's, `slots` its own buffers."""

    def __init__(self, loaded, calls, inputs, outputs, slots):
        if not all(hasattr(c, "native") or hasattr(c, "host") for c in calls):
            raise Unplaceable("a step that is neither C calls nor a NumPy step")
        self.library = loaded
        self.local = list(calls)                                # the calls as prepared, on the side module
        self._place(calls, inputs, outputs, slots)
        self.steps = [step for c in calls if hasattr(c, "native") for step in c.native[0]]
        self._synced = [step for step in self.steps if step[0] == _INDEX_COPY and self._owner(step[2][3]) is not None]
        self._split(calls, inputs, outputs)
        self.sync = Program(loaded, [list(step) for step in self._synced]) if self._synced else None
        self._own = self._words_at = self._words_bytes = 0
        self.epoch, self.marks = -1, -1

    # --- where things are ---------------------------------------------------------------------------
    def _place(self, calls, inputs, outputs, slots) -> None:
        """self._places: (lo, hi, entry, offset) per array the C calls name, in address order: a
        weight's resident entry or another array's mirror, or (entry None) one of the graph's own
        at `offset` in the program's block (set by _plan)."""
        arrays = list(inputs) + list(outputs) + list(slots)
        for c in calls:                                         # what the C calls name (NumPy steps read in place)
            arrays += c.native[1] if hasattr(c, "native") else []
        roots = {}
        for a in arrays:
            if isinstance(a, np.ndarray) and a.nbytes:
                roots.setdefault(id(_root(a)), _root(a))
        own = {id(_root(a)) for a in list(inputs) + list(slots) if isinstance(a, np.ndarray)}
        self._keep = list(roots.values())                       # alive while the program names them
        self._places = []
        for lo, hi, group in _groups(roots.values()):
            whole = [r for r in group if byte_bounds(r) == (lo, hi)]
            if not whole or len(group) > 1 and any(id(r) in own for r in group):
                raise Unplaceable("arrays overlap without one holding the others")
            if id(whole[0]) in own:
                self._places.append((lo, hi, None, 0))
                continue
            entry = next((e for e in map(self.library.resident_entry, whole) if e is not None), None)
            self._places.append((lo, hi, entry if entry is not None else self.library.mirror(whole[0]), 0))
        self._los = [lo for lo, _, _, _ in self._places]
        self._mirrors = [e for _, _, e, _ in self._places if e is not None and e.key in self.library._mirrors]

    def _split(self, calls, inputs, outputs) -> None:
        """The segments, what each program copies in and out, and the own block's plan."""
        written = {self._index(step[2][3]) for step in self._synced}
        self._segments, self._life = [], {}
        ins, produced, t = {self._index(byte_bounds(a)[0]) for a in inputs if a.nbytes}, set(), 0
        pinned = set(ins)
        for host, run in itertools.groupby(calls, key=lambda c: hasattr(c, "host")):
            run = list(run)
            if not host:
                seg = _Segment(steps=[s for c in run for s in c.native[0]])
                seg.ins, ins = ins, set()
                self._segments.append(seg)
                for step in seg.steps:
                    t += 1
                    for i in self._pointed(step):
                        self._touch(i, t)
                for i in seg.ins:
                    self._touch(i, t - len(seg.steps) + 1)
                continue
            for c in run:
                t += 1
                reads, writes = c.host
                for a in reads:
                    i = self._find(byte_bounds(a)[0]) if a.nbytes else None
                    if i in written:
                        raise Unplaceable("a NumPy step reads rows the program writes")
                    if i is not None and self._places[i][2] is None:
                        self._touch(i, t)
                        if self._segments and self._segments[-1].host is None:
                            self._segments[-1].outs.add(i)
                for a in writes:
                    i = self._find(byte_bounds(a)[0])
                    if i is None or self._places[i][2] is not None:
                        raise Unplaceable("a NumPy step writes an array that is not the graph's own")
                    self._touch(i, t)
                    produced.add(i)
                    ins.add(i)
            self._segments.append(_Segment(host=run))
        pools = [seg for seg in self._segments if seg.host is None]
        if not pools:
            raise Unplaceable("no C calls")
        outs = {self._index(byte_bounds(a)[0]) for a in outputs if a.nbytes} - produced
        for _, _, args, _ in self._synced:                    # what the side module's copies read
            outs |= {i for i in map(self._index, (span[0] for span in _rows(args)[1:])) if self._places[i][2] is None}
        pools[-1].outs |= outs
        self._plan(pinned | outs, t)

    def _pointed(self, step):
        """The own places a C call's pointers lie in."""
        name, _, args, _ = step
        last = len(args) - 2 if name in library.SCRATCH else len(args)
        for value, kind in zip(args[:last], library.SIGNATURES[name][1]):
            if kind is library.POINTER and value:
                i = self._index(value)
                if self._places[i][2] is None:
                    yield i

    def _touch(self, i: int, t: int) -> None:
        first, last = self._life.get(i, (t, t))
        self._life[i] = min(first, t), max(last, t)

    def _plan(self, pinned, end: int) -> None:
        """Offsets in the own block: a buffer takes the lowest gap among those alive at its first
        use; the graph's inputs and outputs stay alive throughout."""
        for i in pinned:
            self._life[i] = (0, end)
        alive, self._own_size = [], 0                            # (offset, size, last use)
        for i in sorted(self._life, key=lambda i: self._life[i]):
            first, last = self._life[i]
            alive = sorted(block for block in alive if block[2] >= first)
            size, at = _align(self._places[i][1] - self._places[i][0]), 0
            for offset, used, _ in alive:
                if offset - at >= size:
                    break
                at = max(at, offset + used)
            alive.append((at, size, last))
            lo, hi, _, _ = self._places[i]
            self._places[i] = (lo, hi, None, at)
            self._own_size = max(self._own_size, at + size)

    def _find(self, address: int) -> int | None:
        """The place holding `address`, or None."""
        i = bisect.bisect(self._los, address) - 1
        return i if i >= 0 and self._places[i][0] <= address < self._places[i][1] else None

    def _index(self, address: int) -> int:
        i = self._find(address)
        if i is None:
            raise Unplaceable(f"address {address:#x} lies in none of the program's arrays")
        return i

    def _owner(self, address: int):
        """The mirror entry holding `address`, or None (the program's own block, or a weight)."""
        entry = self._places[self._index(address)][2]
        return entry if entry is not None and entry.key in self.library._mirrors else None

    def _heap(self, address: int) -> int:
        lo, _, entry, offset = self._places[self._index(address)]
        if entry is None:
            return self._own + offset + address - lo
        return (entry.address or entry.pending) + address - lo

    # --- laying out -----------------------------------------------------------------------------
    def _build(self) -> None:
        """Place every array in the heap (copying the weights and mirrors not there yet) and write
        the programs' words there, translated to heap addresses."""
        lib, heap = self.library, self.library.heap
        copies = []
        try:
            if not self._own:
                self._own = heap.alloc(self._own_size)
                weakref.finalize(self, heap.release, self._own)
            for lo, hi, entry, _ in self._places:
                if entry is not None and not entry.address and not entry.pending:
                    entry.pending = heap.alloc(hi - lo)
                    copies.append((lo, entry.pending, hi - lo))
            scratch = lib.scratch()
        except PoolMemoryFull:
            for lo, hi, entry, _ in self._places:               # placed for nothing: not there after all
                if entry is not None and entry.pending:
                    heap.release(entry.pending)
                    entry.pending = 0
            raise
        words, self.offsets = [], {}
        for seg in self._segments:
            if seg.host is not None:
                continue
            seg.first = len(words)
            for name, _, args, _ in seg.steps:
                self.offsets[len(words)] = name
                words.append(_IDS[name])
                last = len(args) - 2 if name in library.SCRATCH else len(args)
                for i, (value, kind) in enumerate(zip(args, library.SIGNATURES[name][1])):
                    if i >= last:
                        value = scratch[i - last]
                    elif kind is library.POINTER and value:
                        value = self._heap(value)
                    words.append(_word(value, kind))
            seg.end = len(words)
        self.words = np.array(words, np.uint64)
        if self.words.nbytes > self._words_bytes:
            self._words_at, self._words_bytes = heap.alloc(self.words.nbytes), self.words.nbytes
            weakref.finalize(self, heap.release, self._words_at)
        copies.append((self.words.ctypes.data, self._words_at, self.words.nbytes))
        lib.copy_in(copies)
        for _, _, entry, _ in self._places:
            if entry is not None and entry.pending:
                entry.address, entry.pending, entry.dirty = entry.pending, 0, None
        self.epoch = lib.epoch
        for seg in self._segments:
            if seg.host is None:
                seg.descriptor = self._describe(seg, seg.first)

    def _describe(self, seg, start: int) -> np.ndarray:
        """A program's bridge descriptor: copy in, run its words from `start`, copy out."""
        spans = [self._places[i][:2] for i in sorted(seg.ins)] + [self._places[i][:2] for i in sorted(seg.outs)]
        copies = [(lo, self._heap(lo), hi - lo) for lo, hi in spans[:len(seg.ins)]] + \
            [(self._heap(lo), lo, hi - lo) for lo, hi in spans[len(seg.ins):]]
        fmt = struct.Struct(f"<5I2I{3 * len(copies)}I")
        words = np.zeros(fmt.size // 4, np.uint32)
        fmt.pack_into(words, 0, 1, self.library.run_program, 2, len(seg.ins), len(seg.outs),
                      self._words_at + 8 * start, seg.end - start, *(v for c in copies for v in c))
        return words

    # --- running ------------------------------------------------------------------------------------
    def __call__(self) -> None:
        lib = self.library
        if lib.threads < 2:
            return self._run_locally()
        if self.epoch != lib.epoch:
            try:
                self._build()
            except PoolMemoryFull as e:                         # the calls as prepared, this time
                lib.memory_full = f"a captured step's program: {e}"
                return self._run_locally()
        if self.marks != lib.marks:                             # eager writes since: copy those ranges in
            lib.flush(self._mirrors)
            self.marks = lib.marks
        for seg in self._segments:
            if seg.host is not None:
                for call in seg.host:
                    call()
            else:
                self._run(seg)
        if self.sync is not None:
            self.sync()

    def _run_locally(self) -> None:
        lib = self.library
        for call in self.local:
            call()
        for _, _, args, _ in self._synced:                      # rows the mirrors must copy again
            lib._mark(*_rows(args)[0])

    def _run(self, seg) -> None:
        lib, descriptor, start, growths = self.library, seg.descriptor, seg.first, 0
        while True:
            stopped = lib._run(descriptor.ctypes.data)
            if not stopped:
                return
            offset = start + stopped - 1
            name = self.offsets.get(offset, "engine_run_program")
            if name not in library.SCRATCH or growths == _MAX_GROWTHS:
                raise IndexError(f"{name}: an index is out of range")
            lib.grow_scratch()
            growths += 1
            self._build()
            start, descriptor = offset, self._describe(seg, offset)
