"""Mutations of valid files: generic byte edits and edits that know the format.

Every mutation is a function `(rng, data, context) -> bytes` (rng a `random.Random`), named so a
finding can say what made its input. Generic edits (bit flips, inserted, deleted, duplicated or
truncated bytes, boundary integers at any offset, splices with another seed) find what a reader
assumes about bytes; the format-aware ones reach past the first checks a random edit trips on:

- JSON (safetensors headers, shard indexes, manifests, tokenizer.json): a node of the parsed document
  replaced by a wrong type, a boundary or enormous number, a hostile path name ("..", NUL, absolute,
  very long, a directory), deep nesting, duplicate keys, thousands of copies of an entry;
- safetensors: the JSON header edited and the length field rewritten to match (or not);
- GGUF: any integer field of the header (counts, lengths, types, dims, offsets), found by walking it;
  and the file parsed, one metadata value, tokenizer key or tensor info changed, written again with
  its framing intact (gguf_edits.py: values of other types, strings that are not UTF-8, arrays
  nested 100 deep, vocabularies, merges, token types and special ids broken, chat templates the
  engine cannot render, dims, types, offsets and names of tensors);
- zip (.pth): method, flags, sizes, CRC, name lengths and offsets of the local and central records;
  the archive rebuilt with deflate/bzip2/lzma, a corrupt deflate stream, an entry that inflates to a
  gigabyte, or its pickle mutated;
- pickle (.pth): memo indices, integers (as small or as enormous as a pickle can write), strings
  and globals of the opcodes; structural opcodes swapped (NEWOBJ for REDUCE: a class called) and
  the globals a whole-module checkpoint names; hostile payloads in place of a value (payloads.py:
  code run through REDUCE, INST, OBJ, NEWOBJ, STACK_GLOBAL, EXT, copyreg and getattr chains; BUILD
  on the allowed globals; what the C unpickler hashes: deep, shared and colliding keys);
- PNG: IHDR fields, chunk lengths and order, PLTE/tRNS sizes, the inflated scanlines (filter bytes),
  zlib bombs that declare millions of pixels in a few kB; CRCs fixed so the decoder reads on;
- .npy: the header's descr/shape/fortran_order, text that breaks Python's tokenizer, the header
  length field, the version;
- tokenizer.json: nested Sequences, Split regexes (malformed and backtracking ones), ids and lengths;
- WAV: the RIFF and chunk sizes (streaming 0 and 0xFFFFFFFF too), chunk ids, the fmt fields (tag,
  channels, rate, bits, block align kept matching, the EXTENSIBLE sub-format).
"""
from __future__ import annotations

from .containers import CTRANSLATE2, GGUF, PICKLE, SAFETENSORS, ZIP
from .edits import GENERIC, JSON, TOKENIZER, mutate_bytes
from .images import IMAGE, NPY, PNG, PNG_SIGNATURE
from .sounds import WAV, is_wav

__all__ = ["mutate_bytes", "operators_for"]


def operators_for(name: str, data: bytes) -> tuple:
    """The operators that suit a file, judged by its name and first bytes; generic ones always."""
    if name.endswith("tokenizer.json") or (name.endswith(".json") and b'"model"' in data[:200_000]
                                           and b'"vocab"' in data):
        return TOKENIZER + GENERIC
    if name.endswith(".json"):
        return JSON + JSON + GENERIC
    if name.endswith(".safetensors"):
        return SAFETENSORS + GENERIC
    if data.startswith(b"GGUF"):
        return GGUF + GENERIC
    if name.endswith(".bin"):
        return CTRANSLATE2 + GENERIC
    if data.startswith(b"PK"):
        return ZIP + GENERIC
    if data.startswith(b"\x80"):
        return PICKLE + GENERIC
    if data.startswith(PNG_SIGNATURE):
        return PNG + GENERIC
    if data.startswith(b"\x93NUMPY"):
        return NPY + GENERIC
    if is_wav(data):                                # not WebP, also a RIFF file
        return WAV + GENERIC
    if data.startswith(b"\xff\xd8"):
        return IMAGE + GENERIC
    return GENERIC
