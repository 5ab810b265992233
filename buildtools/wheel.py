"""The engine as a pure-Python wheel for Pyodide, and the lock file that lists it.

The wheel is a zip written here directly (no network, no build backend) and is
deterministic: sorted entries, every timestamp 1980-01-01, fixed permissions.
It holds `engine/**.py` (and `**.wgsl`) and the model definitions (`models/*.py`); weights are
served separately.

The generated `pyodide-lock.json` is the official one plus an `engine` entry
shaped like the official pure-Python ones, so the page can call
`pyodide.loadPackage("engine")` and Pyodide checks the wheel's sha256 itself.

`pyodide/engine.json` beside the wheel names it for everyone else: micropip needs the real
file name (a version in it), which changes with each release, so a page on another origin
reads this small file first, then `await micropip.install(SITE + info["url"])`.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import tomllib
import zipfile
from pathlib import Path

from .steps import BuildError

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
PACKAGES = ("engine",)                  # shipped whole (every .py below them)
MODEL_FOLDER = "models"
IMPORTS = ["engine", "models"]
DEPENDS = ["numpy"]                     # Pyodide packages the engine imports (the lock's "depends")
DISCOVERY_NAME = "engine.json"          # beside the wheel: which wheel is current


def project(root: Path) -> dict:
    """name, version, summary, dependencies and requires-python from pyproject.toml."""
    try:
        meta = tomllib.loads((root / "pyproject.toml").read_text())["project"]
        return {"name": meta["name"], "version": meta["version"],
                "summary": meta.get("description", ""),
                "dependencies": list(meta.get("dependencies", [])),
                "requires_python": meta.get("requires-python", "")}
    except (OSError, tomllib.TOMLDecodeError, KeyError) as e:
        raise BuildError(f"cannot read the project's name and version from pyproject.toml: {e}") from None


def sources(root: Path) -> list[Path]:
    """The files the wheel ships (.py, and the .wgsl shaders the webgpu backend reads), sorted."""
    files = []
    for package in PACKAGES:
        files += [p for p in (root / package).rglob("*") if p.suffix in (".py", ".wgsl")
                  and "__pycache__" not in p.parts]
    files += list((root / MODEL_FOLDER).glob("*.py"))
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def wheel_name(meta: dict) -> str:
    escaped = re.sub(r"[-_.]+", "_", meta["name"])       # the wheel spec's name escaping
    return f"{escaped}-{meta['version']}-py3-none-any.whl"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(root: Path, out_dir: Path, stored: bool = True) -> Path:
    """Write out_dir/<name>-<version>-py3-none-any.whl; return its path."""
    meta = project(root)
    escaped = re.sub(r"[-_.]+", "_", meta["name"])
    dist_info = f"{escaped}-{meta['version']}.dist-info"
    entries: list[tuple[str, bytes]] = [(p.relative_to(root).as_posix(), p.read_bytes()) for p in sources(root)]
    metadata = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {meta['version']}"]
    if meta["summary"]:
        metadata.append(f"Summary: {meta['summary']}")
    if meta["requires_python"]:
        metadata.append(f"Requires-Python: {meta['requires_python']}")
    metadata += [f"Requires-Dist: {dep}" for dep in meta["dependencies"]]
    entries.append((f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()))
    entries.append((f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: engine build.py\n"
                                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"))
    entries.append((f"{dist_info}/top_level.txt", ("\n".join(IMPORTS) + "\n").encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / wheel_name(meta)
    # `stored` uncompressed: the host sends the whole wheel brotli- or gzip-encoded (the build's
    # .br/.gz), which shrinks it more than deflate per file (0.30 -> 0.23 MB with brotli)
    path.write_bytes(wheel_archive(entries, dist_info, stored))
    return path


def wheel_archive(entries: list[tuple[str, bytes]], dist_info: str, stored: bool = True) -> bytes:
    """A deterministic wheel: `entries` in their order (the package's files, then its dist-info
    files), then the RECORD of them all; every timestamp 1980-01-01, every file rw-r--r--."""
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    entries = [*entries, (f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode())]
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as z:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            info.compress_type = method
            info.external_attr = (0o100644 << 16)          # a regular file, rw-r--r--
            info.create_system = 3                          # Unix, so the mode above is read
            z.writestr(info, data, compresslevel=9)
    return buffer.getvalue()


def lock_with_package(official: dict, wheel: Path, meta: dict) -> dict:
    """The official lock plus an entry for our wheel, in the format of its pure-Python entries."""
    lock = json.loads(json.dumps(official))             # a deep copy
    name = meta["name"]
    if name in lock["packages"]:
        raise BuildError(f"the official pyodide-lock.json already has a package named {name!r}")
    lock["packages"][name] = {
        "name": name,
        "version": meta["version"],
        "file_name": wheel.name,
        "install_dir": "site",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "package_type": "package",
        "imports": list(IMPORTS),
        "depends": list(DEPENDS),
        "unvendored_tests": False,
    }
    return lock


def discovery(wheel: Path, meta: dict, pyodide_version: str, folder: str = "pyodide") -> dict:
    """What pyodide/engine.json says about the wheel: its file name, its URL relative to the
    site's root (`folder`/name), sha256 and size to check it by, the Pyodide packages it needs,
    and the Pyodide version the site ships (the one its kernels and NumPy wheel are built for)."""
    data = wheel.read_bytes()
    return {"name": meta["name"], "version": meta["version"], "wheel": wheel.name,
            "url": f"{folder}/{wheel.name}", "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
            "requires": list(DEPENDS), "pyodide": pyodide_version}
