"""A captured step's C calls as one program (wasm_kernels/program.c): one crossing runs them all.

engine.graph prepares each step of a captured function as the cheapest call its backend allows;
for the simd backend that is the step's recorded C calls with their recorded arguments. A
`Program` holds such calls, encoded once as the words `engine_run_program` reads (the export's
id, then one 64-bit word per argument), and the graph joins consecutive programs into one
(`join`): a decode step replays as a few ctypes calls instead of one per kernel, natively and in
Pyodide, where each crossing costs several microseconds.
"""
from __future__ import annotations

import itertools
import struct

import numpy as np

from . import library

_IDS = {name: i for i, name in enumerate(library.PROGRAM)}
_MASK = (1 << 64) - 1


def _word(value, kind) -> int:
    if value is None:
        return 0
    if kind is library.FLOAT:
        return struct.unpack("<I", struct.pack("<f", value))[0]
    return int(value) & _MASK


class Program:
    """Calls [name, function, arguments, its scratch array or None] run in order by one call of
    the library's engine_run_program. A scratch export that asks for more (more threads than when
    it was captured: more parts, each with its own scratch) gets it, and the program goes on from
    that call; an index export that reports an index out of range raises IndexError, as its eager
    call does."""

    def __init__(self, loaded, calls: list):
        self.library, self.calls = loaded, [list(call) for call in calls]
        # where it runs: the loaded library, or in a page with the kernel pool (heap.HeapLibrary)
        # the side module, whose memory the arguments point into
        self.local = getattr(loaded, "local", loaded)
        self._encode()

    def _encode(self) -> None:
        words, self.offsets = [], {}
        for k, (name, _, args, _) in enumerate(self.calls):
            self.offsets[len(words)] = k
            words.append(_IDS[name])
            words.extend(_word(a, kind) for a, kind in zip(args, library.SIGNATURES[name][1]))
        self.words = np.array(words, np.uint64)
        self.address = self.words.ctypes.data

    @property
    def names(self) -> list[str]:
        return [name for name, *_ in self.calls]

    def __call__(self) -> None:
        start, grown = 0, None
        run = self.local.engine_run_program
        while True:
            stopped = run(self.address + 8 * start, self.words.size - start)
            if not stopped:
                return
            offset = start + stopped - 1
            k = self.offsets.get(offset)
            if k is None:
                raise RuntimeError(f"engine_run_program stopped at word {offset}, where no call begins")
            name, _, args, _ = self.calls[k]
            if name not in library.SCRATCH or grown == k:
                raise IndexError(f"{name}: an index is out of range")
            own = np.empty(max(getattr(self.local, name)(*args[:-2], None, 0), 1), np.float32)
            args[-2:] = own.ctypes.data, own.size
            self.calls[k][3] = own
            self._encode()
            start, grown = offset, k


def join(calls: list) -> list:
    """The prepared calls of a graph, each run of consecutive Programs (on one library) joined into one."""
    out = []
    for loaded, run in itertools.groupby(calls, key=lambda c: c.library if isinstance(c, Program) else None):
        run = list(run)
        if loaded is None or len(run) == 1:
            out.extend(run)
        else:
            out.append(Program(loaded, [call for program in run for call in program.calls]))
    return out
