"""What every task module shares: the pipeline base class, the opening of a model's checkpoint,
and the shape of a command-line subcommand.

A pipeline is a registry entry's model on a backend, with its pre- and post-processing. The
base class here owns the model's life: it builds it from the checkpoint, moves it between
backends, and rebuilds it on the next best backend when the GPU goes away. The task modules
(engine/tasks/<task>.py) add what their inputs and outputs are.
"""
from __future__ import annotations

import sys
import urllib.parse
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import registry, runtime
from ..errors import DeviceLost, EngineError, WeightsError
from . import contracts
from ..site.checkpoint import Checkpoint, location_of
from ..formats.sources import is_url

if TYPE_CHECKING:                               # the page's worker imports this module, and needs no argparse
    import argparse


AWAITABLE = "await engine.pipeline_async(...)"    # what to use where a pipeline cannot wait for the browser


def open_checkpoint(entry: registry.Model, weights, site: str | None = None) -> Checkpoint:
    """What `weights=` names, as a Checkpoint: None (the registry's default: in the browser the
    site's copy, fetched by Range), a location (file, index, folder, URL), a mapping of tensors,
    or a Checkpoint as is. `site` (engine.site.folders.site_root): the built site whose copy of the
    model holds the processor files (labels, tokenizer) that `weights` lacks."""
    if isinstance(weights, Checkpoint):
        return weights
    if weights is None:
        if runtime.in_browser():                   # the site's copy, by Range (engine.site.browser)
            from ..site.browser import load_checkpoint
            return runtime.wait(load_checkpoint(entry, site=site), AWAITABLE)
        default = registry.default_location(entry) if site is None else registry.built_location(entry, site)
        return Checkpoint(default, location=default)
    location = location_of(weights)
    if site is not None:
        fallback = site_location(entry, site)
    elif location is None or location.endswith((".pth", ".pt")):
        try:
            fallback = registry.default_location(entry)
        except WeightsError:                                       # not built: a missing file says so
            fallback = None
    else:
        fallback = None
    if location is None or location.endswith((".pth", ".pt")):     # no processor files beside those
        return Checkpoint(weights, fallback=fallback)
    return Checkpoint(weights, location=location, fallback=fallback)


def site_location(entry: registry.Model, site: str) -> str:
    """Where `entry`'s weights open in the built site `site` (a base URL ending in "/", or a folder)."""
    if is_url(site):
        return f"{site}models/{entry.name}/{entry.site_file}"
    return str(Path(site) / "models" / entry.name / entry.site_file)


async def open_checkpoint_async(entry: registry.Model, weights, site: str | None = None) -> Checkpoint:
    """open_checkpoint with every fetch awaited: with no `weights`, the model's folder on the
    built site `site` (None: in the browser the page's own site, natively dist/), its tensors
    and processor files fetched here, so that building the model waits for nothing. Natively a
    site's row tables are fetched whole (as dist/'s are read whole): no call waits later."""
    location = location_of(weights)
    if location is not None and is_url(location):
        return await _open_url(entry, location, site)
    if isinstance(weights, Checkpoint) or weights is not None or (site is None and not runtime.in_browser()):
        return open_checkpoint(entry, weights, site)
    if runtime.in_browser():
        from ..site.browser import load_checkpoint
        return await load_checkpoint(entry, site=site)
    if not is_url(site):
        return open_checkpoint(entry, None, site)
    from ..site.folders import fetch_model
    checkpoint = await fetch_model(f"{site}models/{entry.name}/", transport=runtime.transport())
    for table in getattr(checkpoint.tensors, "tables", {}).values():
        await table.fetch(np.arange(table.shape[0]))
    return checkpoint


async def _open_url(entry: registry.Model, url: str, site: str | None) -> Checkpoint:
    """weights=URL with every fetch awaited: its tensors (engine.load_*_async by the file's type)
    and the model's processor files, from beside it or else from the site's copy of the model."""
    from ..site import load_gguf_async, load_pth_async, load_safetensors_async
    from ..site.remote import Loader
    path = urllib.parse.urlsplit(url).path.lower()
    torch_file = path.endswith((".pth", ".pt"))
    load = load_gguf_async if path.endswith(".gguf") else load_pth_async if torch_file else load_safetensors_async
    checkpoint = open_checkpoint(entry, await load(url), site)
    if not torch_file:                              # no processor files beside a torch checkpoint
        checkpoint.location = url
    loader = Loader(runtime.transport())

    async def get(url: str) -> bytes:
        return (await loader.request(url))[0]
    await checkpoint.fetch([*entry.processor, *entry.generate], get)
    return checkpoint


class Pipeline:
    """Shared by every pipeline: the model on a backend, rebuilt from its checkpoint on the next
    best backend when the GPU goes away (`notice` says so). `MODEL`: what the task needs of its
    model (engine/tasks/contracts.py), checked each time the model is built."""

    notice: str | None = None                   # set when the pipeline had to change backend
    MODEL: type = contracts.Model

    def __init__(self, entry: registry.Model, device: str | None, weights):
        self.entry, self.task = entry, entry.tasks[0]
        self.checkpoint = open_checkpoint(entry, weights)
        self.device = device

    @classmethod
    def packages(cls, checkpoint: Checkpoint) -> tuple[str, ...]:
        """The Pyodide packages it imports beyond the engine's and NumPy (jinja2 for a chat
        template), which engine.tasks.load_packages loads before it is built in the browser."""
        return ()

    def load_model(self, device: str | None):
        """The model on `device`, from this pipeline's checkpoint, as its entry's `load` gives it."""
        return self.entry.load(self.checkpoint.tensors, device)

    def build(self, device: str | None):
        """The model on `device`, checked against the task's contract (a ContractError naming what
        it lacks)."""
        model = self.load_model(device)
        contracts.check(model, self.MODEL, self.entry.name, self.task)
        return model

    def run(self, fn):
        """fn(model) -> NumPy result; on a lost GPU, once more on the next best backend."""
        try:
            return fn(self.model)
        except DeviceLost as e:
            self._fall_back(e)
            return fn(self.model)

    def forward(self, *arrays) -> np.ndarray:
        """The model's output on NumPy `arrays`, as NumPy: through a graph captured per input
        shape where the backend replays a whole pass faster (engine.graph.Passes), else eagerly."""
        from ..graph import Passes
        passes = self.__dict__.setdefault("_passes", Passes())
        return self.run(lambda model: passes.run(id(model), model, arrays, self.device).numpy())

    def _fall_back(self, error: DeviceLost) -> None:
        from ..device import best_available
        device = best_available()               # a lost device is no longer available
        self.notice = f"{error}; continuing on {device}"
        self.__dict__.pop("_passes", None)      # captured over the lost model
        warnings.warn(self.notice, RuntimeWarning, stacklevel=3)
        self.model, self.device = self.build(device), device

    def to(self, device: str):
        """Move the model to another backend (weights are not downloaded again)."""
        self.__dict__.pop("_passes", None)      # captured over the tensors being replaced
        try:
            self.model.to(device)
        except DeviceLost:                      # its tensors are gone: build it again
            self.model = self.build(device)
        self.device = device
        return self


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    """(N, classes) logits -> probabilities."""
    shifted = np.exp(logits - logits.max(1, keepdims=True))
    return shifted / shifted.sum(1, keepdims=True)


# --- the command line -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """A subcommand of `python -m engine` that a task module brings (its COMMANDS, by name).

    engine/cli.py adds a subparser with `help` and `description`, lets `add_arguments` fill it,
    and calls `run(args)` for the exit status. An EngineError or OSError raised by `run` becomes
    one line on stderr and exit status 2."""
    help: str                                                   # its line in `python -m engine --help`
    description: str                                            # the top of `python -m engine NAME --help`
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]                    # -> exit status


# What a command that reads several inputs catches for one of them: the bad one is reported by
# bad_input() and the others still run (exit status 2 at the end).
INPUT_ERRORS = (EngineError, OSError, ValueError, MemoryError)


def bad_input(path, error: BaseException) -> None:
    """One line on stderr naming the input and what is wrong with it."""
    reason = str(error) if not isinstance(error, MemoryError) else "out of memory while decoding"
    print(f"error: {path}: {reason}" if str(path) not in reason else f"error: {reason}", file=sys.stderr)


def add_device_argument(parser: argparse.ArgumentParser, default: str = "numpy") -> None:
    """--device, naming the backends this engine knows (not only the available ones: asking
    which are available would load, and build, every backend)."""
    from ..device import known
    parser.add_argument("--device", default=None, help=f"backend to run on: {', '.join(known())} "
                                                       f"(default: {default})")
