"""Tasks as plugins: one module per task, found rather than listed.

    clf = engine.pipeline("digit-classification")
    clf("seven.png")            # [{"label": "7", "score": 0.98}, ...]
    clf = engine.pipeline("image-classification")
    clf("cat.jpg", top_k=3)     # [{"label": "tabby cat", "index": 281, "score": 0.71}, ...]
    emb = engine.pipeline("sentence-embedding")
    emb(["A man is eating.", "Someone eats."])     # (2, 384) float32 unit vectors
    emb.rank("Who is eating?", ["A man is eating.", "A cat sleeps."])
    chat = engine.pipeline("text-generation")
    chat.chat("What is the capital of France?")     # "The capital of France is Paris."
    emb = engine.pipeline("sentence-embedding", site="https://example.org/engine/")   # any built site's model
    emb = await engine.pipeline_async("sentence-embedding", site=SITE)   # where Python cannot block (a notebook)

A task module is a module of this package (engine/tasks/<task>.py, the task's name with "_" for
"-") that defines any of:

- `PIPELINE`: the class that runs a registry entry whose `pipeline` field names this module
  (`PIPELINE(entry, device=, weights=, **options)`, a subclass of base.Pipeline);
- `COMMANDS`: {name: base.Command}, its subcommands of `python -m engine`;
- `WORKER`: the functions the page's worker exports under their own names (engine/web/worker.py),
  called with the page's message arguments and answering a JSON string; they find their loaded
  pipeline with state.loaded(task);
- `CARD`: where the task's card (web/cards/<task>.html) stands on the page, a number (smaller
  first); cards of tasks whose module says nothing come last, by name.

Which model serves a task, where its weights are and which module runs it is the registry's
business (engine/registry.py; each model file declares its entry). The command line, the
worker's exports and the site's start-up modules are all derived from the modules found here,
and so is the order of the page's cards (`card_order`): a new task is a new module, and nothing
lists the tasks by hand.

A task module imports only what every one of its uses needs at its top (NumPy, the engine's
core, base and state); tokenizers, generation and model code are imported where they are used.
The page's worker imports every task module at start, to know their entry points, so a task's
heavy parts still load only when its card opens.

$ENGINE_TASKS (comma-separated package names) adds packages whose modules are task modules too,
as $ENGINE_MODELS names the model package (a plugin outside the engine, or a test's).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from types import ModuleType

from ..errors import EngineError, InputError

PACKAGES = (__name__, *(name.strip() for name in os.environ.get("ENGINE_TASKS", "").split(",") if name.strip()))
ATTRIBUTES = ("PIPELINE", "COMMANDS", "WORKER")      # what makes a module of the packages a task module

_found: dict[str, ModuleType] | None = None


def modules() -> dict[str, ModuleType]:
    """Every task module by its name (image_classification, ...), the packages in order, each
    package's modules in the order of their names."""
    global _found
    if _found is None:
        found: dict[str, ModuleType] = {}
        for package_name in PACKAGES:
            package = importlib.import_module(package_name)
            for info in pkgutil.iter_modules(package.__path__):
                if info.name.startswith("_"):
                    continue
                module = importlib.import_module(f"{package_name}.{info.name}")
                if not any(hasattr(module, name) for name in ATTRIBUTES):
                    continue                      # a shared module (base, state)
                if info.name in found:
                    raise EngineError(f"two task modules are named {info.name!r}: {found[info.name].__name__} "
                                      f"and {module.__name__}")
                found[info.name] = module
        _found = found
    return _found


def card_order() -> list[str]:
    """The tasks whose modules place a card, in the order the page shows them (their `CARD`)."""
    placed = [(module.CARD, name) for name, module in modules().items() if hasattr(module, "CARD")]
    return [name.replace("_", "-") for _, name in sorted(placed)]


def page_listing() -> list[dict]:
    """The registry as the page sees it (engine.registry.describe): model files in the order of
    their first card (card_order, over the tasks of all their entries), each file's entries in its
    own order; models of files whose tasks have no card after them, as the registry lists them.
    Its first model's first task is what the page starts with."""
    from .. import registry
    position = {task: i for i, task in enumerate(card_order())}
    entries = registry.models()
    first: dict = {}                        # model file -> the position of its first card
    for entry in entries.values():
        at = min((position[t] for t in entry.tasks if t in position), default=len(position))
        first[_file(entry)] = min(first.get(_file(entry), at), at)
    return sorted(registry.describe(), key=lambda m: first[_file(entries[m["name"]])])


def _file(entry) -> str | None:
    return entry.load.__module__ if entry.load is not None else entry.name


def module_for(pipeline: str) -> ModuleType:
    """The task module named by a registry entry's `pipeline` field ("image-classification")."""
    name = pipeline.replace("-", "_")
    for package_name in PACKAGES:           # only the one module: a pipeline needs no other task's
        if importlib.util.find_spec(f"{package_name}.{name}") is not None:
            return importlib.import_module(f"{package_name}.{name}")
    raise EngineError(f"no task module {name!r} (engine/tasks/{name}.py) runs the pipeline {pipeline!r}")


def commands() -> dict:
    """Every task module's subcommands of `python -m engine`: name -> base.Command."""
    table: dict = {}
    for module in modules().values():
        for name, command in getattr(module, "COMMANDS", {}).items():
            if name in table:
                raise EngineError(f"two task modules define the command {name!r}")
            table[name] = command
    return table


def worker_entry_points() -> dict:
    """Every task module's worker entry points: exported name -> function."""
    table: dict = {}
    for module in modules().values():
        for fn in getattr(module, "WORKER", ()):
            if fn.__name__ in table:
                raise EngineError(f"two task modules export the worker entry point {fn.__name__!r}")
            table[fn.__name__] = fn
    return table


def pipeline(task: str, device: str | None = None, weights=None, model: str | None = None, site=None, **options):
    """A ready-to-call pipeline for `task` (see engine.registry.tasks()) on `device`, run by the
    first model registered for the task, or by the registry model named `model`; `options` go to
    the pipeline (image classification: labels=; sentence embedding: max_length=). `model` may
    also be a weights file or URL the registry does not list (a GGUF of a supported architecture,
    for text generation): it runs as the task's registered models do (engine.registry.for_file).

    weights: the checkpoint (a file, folder or URL, a mapping of tensors); default the model's
    copy on the site: natively the built dist/ (or the file bundled with the code), in our page
    the page's own site. site: the base URL of a built site (natively also its folder): its
    registry.json must serve the model (by default its first model for `task`), whose weights,
    row tables and processor files then come from <site>/models/<name>/ (in Pyodide, where any
    page may call this, that site also becomes the page's site if it has none: the SIMD kernels
    come from it).

    In Pyodide this waits for the browser's fetches through JavaScript Promise Integration; where
    Python cannot block (no JSPI, or a synchronous call from JavaScript) it raises
    engine.errors.NeedsAwait: `await engine.pipeline_async(...)` is the same call, awaited."""
    from .. import runtime
    from ..site.checkpoint import Checkpoint
    from .base import AWAITABLE, open_checkpoint_async
    weights = _model_file(model, weights)
    if site is None and (not runtime.in_browser() or isinstance(weights, Checkpoint)):
        entry = _entry(task, model)                 # nothing to fetch before the model is built
        return _build(entry, task, _device(entry, device), weights, options)
    # in a thread of its own natively where an event loop runs already (a notebook's)
    entry, root = runtime.wait(_site_model(task, model, site, device), AWAITABLE, thread=True)
    device = _device(entry, device)
    checkpoint = runtime.wait(open_checkpoint_async(entry, weights, root), AWAITABLE, thread=True)
    return _build(entry, task, device, checkpoint, options)


async def pipeline_async(task: str, device: str | None = None, weights=None, model: str | None = None, site=None,
                         **options):
    """engine.pipeline with every fetch awaited: the form for a Pyodide page that cannot block
    (a PyScript page's main thread, a JupyterLite notebook, a browser without JSPI). Natively it
    works too. The returned pipeline holds its model, so calling it waits for nothing (in the
    browser, a sentence embedding's word rows are fetched as texts need them: `await
    pipe.prepare(texts)` first where nothing may block)."""
    from .base import open_checkpoint_async
    weights = _model_file(model, weights)
    entry, root = await _site_model(task, model, site, device)
    device = _device(entry, device)
    checkpoint = await open_checkpoint_async(entry, weights, root)
    await load_packages(entry, checkpoint)
    return _build(entry, task, device, checkpoint, options)


def _entry(task: str, model: str | None):
    """The local registry's model for `task` (or the one named `model`, or one for the file
    `model` names), checked to serve it."""
    from .. import registry
    if model is not None and registry.names_a_file(model):
        return registry.for_file(task, model)
    entry = registry.for_task(task) if model is None else registry.model(model)
    _check_serves(entry, task)
    return entry


def _model_file(model, weights):
    """The weights to open: `model` when it names a file or URL rather than a registry model."""
    from .. import registry
    if model is None or not registry.names_a_file(model):
        return weights
    if weights is not None:
        raise InputError(f"model={model!r} names the weights already; weights= would name them twice")
    return model


def _check_serves(entry, task: str) -> None:
    if task not in entry.tasks:
        raise InputError(f"model {entry.name} does not serve the task {task!r}; it serves: {', '.join(entry.tasks)}")
    if entry.pipeline is None:
        raise InputError(f"no pipeline runs {entry.name} yet")


def _device(entry, device: str | None) -> str | None:
    from ..device import best_for_pipeline, get_backend
    if device is None:
        device = best_for_pipeline(entry.native_device)   # natively simd where measured faster, else the default
    get_backend(device)                       # a clear error for an unknown device, before loading
    return device


def _pipeline_class(entry):
    cls = getattr(module_for(entry.pipeline), "PIPELINE", None)
    if cls is None:
        raise EngineError(f"the task module of {entry.pipeline!r} has no PIPELINE")
    return cls


async def load_packages(entry, checkpoint) -> None:
    """The Pyodide packages the pipeline of `entry` imports beyond the engine's (its class's
    `packages(checkpoint)`: jinja2 for a chat model), loaded before it is built, where nothing
    needs to block for them; natively nothing."""
    from .. import runtime
    await runtime.load_packages(_pipeline_class(entry).packages(checkpoint))


def pipeline_for(entry, task: str, device: str | None = None, weights=None, **options):
    """The pipeline for `task` run by the registry entry `entry` itself (a model of the registry,
    or one engine.registry.for_file made for a file it does not list), on `device` (None: the
    best for it), from `weights` (a Checkpoint, a location, ...; None: the entry's default)."""
    _check_serves(entry, task)
    return _build(entry, task, _device(entry, device), weights, options)


def _build(entry, task: str, device: str | None, weights, options: dict):
    pipe = _pipeline_class(entry)(entry, device=device, weights=weights, **options)
    pipe.task = task
    return pipe


async def _site_model(task: str, model: str | None, site, device: str | None):
    """(registry entry, site root or None): the model the built site `site` serves for `task`
    (its registry.json read and checked), or with no site the local registry's. In Pyodide the
    site becomes the page's when it has none, and the SIMD kernels are fetched from the page's
    site where they are missing, before any backend is chosen."""
    from .. import registry, runtime
    if site is None:
        entry, root = _entry(task, model), None
    else:
        from ..site.folders import read_registry, served_model, site_root
        root = site_root(site, runtime.page_url())
        served = await read_registry(root, runtime.transport())
        entry = registry.model(served_model(served, root, task, model, registry.models()))
        _check_serves(entry, task)
        if runtime.in_browser() and runtime.known_site() is None:
            runtime.set_site(root)
    if runtime.in_browser() and device in (None, "simd"):
        await _ensure_kernels(root or runtime.known_site())
    return entry, root


async def _ensure_kernels(site: str | None) -> None:
    """The SIMD kernels in Pyodide's file system, fetched from `site` where the page has not put
    them there; when that cannot be done (no site known either) the device choice says why
    (engine.device) and falls back."""
    from ..backends.simd import library
    await library.ensure_kernels(site)
