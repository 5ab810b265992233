"""Precompressed copies of the runtime assets: `<file>.gz` and `<file>.br` beside `<file>`, made
once at build time.

A static host sends the `.br` (`Content-Encoding: br`) or the `.gz` (`gzip`) to a browser that
accepts it (nginx: `brotli_static` and `gzip_static`; the dev server does the same), so nothing
is compressed per request. A host that ignores them serves the originals: the site works,
larger (pyodide.asm.wasm: 10.1 MB as stored, 3.1 MB gzipped, 2.6 MB as brotli).

The `.br` files need the `brotli` command (Debian package `brotli`; scripts/serve.sh and
scripts/test.sh install it); without it the build writes the `.gz` files only. Quality 9, not
11: 11 saves 0.2 MB more on the wasm but takes ~40 s of CPU on these machines. Each copy is kept
in the download cache (`.cache/compressed/`, by the input's sha256 and the encoder), so a fresh
build compresses only what changed.

Left alone: the models' folders (weights are read by byte Range, which addresses the body as
stored, so they must never be sent encoded), images, and files that gzip does not shrink by
at least 10% (micropip's and packaging's wheels, deflated zip archives). The archives a start
fetches (NumPy's and the engine's wheels, python_stdlib.zip, bytecode.zip) are stored
uncompressed for these copies: brotli over a whole archive beats deflate per member (bytecode.py).
A build for a host that sends no encoding (`--plain-host`) keeps them deflated and makes none.
"""
from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
from pathlib import Path

SUFFIXES = (".js", ".mjs", ".wasm", ".json", ".css", ".html", ".py", ".txt", ".svg", ".md", ".zip", ".whl")
SKIP_FOLDERS = ("models/", "samples/")
MIN_BYTES = 1024                    # below this the header costs more than it saves
MAX_RATIO = 0.9                     # keep a copy only when it saves at least 10%
BROTLI_QUALITY = 9
# the largest window (16 MiB): python_stdlib.zip (12.6 MB stored) repeats each start-up module's
# source in its .pyc, further apart than the default 4 MiB window reaches
BROTLI_WINDOW = 24


def brotli_version() -> str | None:
    """The `brotli` command's version (part of the step's inputs), or None when it is missing."""
    if shutil.which("brotli") is None:
        return None
    r = subprocess.run(["brotli", "--version"], capture_output=True, text=True)
    return (r.stdout or r.stderr).strip() or "unknown"


def brotli_bytes(data: bytes) -> bytes:
    return subprocess.run(["brotli", "-c", "-q", str(BROTLI_QUALITY), "-w", str(BROTLI_WINDOW)], input=data,
                          capture_output=True, check=True).stdout


def candidates(outputs: dict[str, dict]) -> list[str]:
    """The paths, of other steps' outputs ({dist-relative path: {"size", ...}}), worth a
    precompressed copy: the compress step's inputs, so a change elsewhere does not rerun it."""
    return sorted(rel for rel, record in outputs.items() if record["size"] >= MIN_BYTES
                  and rel.endswith(SUFFIXES) and not rel.startswith(SKIP_FOLDERS))


def gzip_bytes(data: bytes) -> bytes:
    """Deterministic gzip (no file name, mtime 0): the same input gives the same output bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def write_compressed(out: Path, dist: Path, rels, brotli: str | None = None, store: Path | None = None) -> None:
    """out/<rel>.gz (and with `brotli`, the brotli command's version, out/<rel>.br) for each rel of
    `rels` (read from dist/) that the encoding shrinks enough. `store` (the download cache's
    compressed/ folder) keeps each result by the input's sha256 and the encoder, so a fresh build
    (a new dist/, each test's site) does not compress again what an earlier one did: brotli takes
    ~6 s on these files."""
    encoders = [("gz", "gzip9", gzip_bytes)]
    if brotli:
        encoders.append(("br", f"brotli{BROTLI_QUALITY}w{BROTLI_WINDOW}-" + hashlib.sha256(brotli.encode()).hexdigest()[:12],
                         brotli_bytes))
    for rel in rels:
        data = (dist / rel).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        for suffix, encoder, encode in encoders:
            kept = store / f"{digest}.{encoder}" if store is not None else None
            if kept is not None and kept.is_file():
                packed = kept.read_bytes()
            else:
                packed = encode(data)
                if kept is not None:
                    kept.parent.mkdir(parents=True, exist_ok=True)
                    partial = kept.with_name(kept.name + ".partial")
                    partial.write_bytes(packed)
                    partial.replace(kept)             # whole or absent, whatever stops the build
            if len(packed) <= MAX_RATIO * len(data):
                target = out / f"{rel}.{suffix}"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(packed)
