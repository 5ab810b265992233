"""Precompressed copies of the runtime assets: `<file>.gz` beside `<file>`, made once at build time.

A static host sends the `.gz` with `Content-Encoding: gzip` to a browser that accepts it
(nginx: `gzip_static on`; the dev server does the same), so nothing is compressed per
request and the host needs no CPU for it. A host that ignores the `.gz` files serves the
originals: the site works, larger (pyodide.asm.wasm: 10.1 MB as stored, 3.1 MB gzipped).

Left alone: the models' folders (weights are read by byte Range, which addresses the body as
stored, so they must never be sent encoded), images, and files that gzip does not shrink by
at least 10% (wheels and python_stdlib.zip are zip archives, already deflated).
"""
from __future__ import annotations

import gzip
from pathlib import Path

SUFFIXES = (".js", ".mjs", ".wasm", ".json", ".css", ".html", ".py", ".txt", ".svg", ".md")
SKIP_FOLDERS = ("models/", "samples/")
MIN_BYTES = 1024                    # below this the header costs more than it saves
MAX_RATIO = 0.9                     # keep the .gz only when it saves at least 10%


def candidates(outputs: dict[str, dict]) -> list[str]:
    """The paths, of other steps' outputs ({dist-relative path: {"size", ...}}), worth a
    precompressed copy: the compress step's inputs, so a change elsewhere does not rerun it."""
    return sorted(rel for rel, record in outputs.items() if record["size"] >= MIN_BYTES
                  and rel.endswith(SUFFIXES) and not rel.startswith(SKIP_FOLDERS))


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (no file name, mtime 0): the same input gives the same output bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def write_compressed(out: Path, dist: Path, rels) -> None:
    """out/<rel>.gz for each rel of `rels` (read from dist/) that gzip shrinks enough."""
    for rel in rels:
        data = (dist / rel).read_bytes()
        packed = gzip_bytes(data)
        if len(packed) <= MAX_RATIO * len(data):
            target = out / (rel + ".gz")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(packed)
