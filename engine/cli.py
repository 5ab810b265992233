"""Command line: `python -m engine digit IMAGE...`, `python -m engine classify IMAGE...`,
`python -m engine bench mnist|effnet|gemm`.

Exit status: 0 on success, 2 on bad input or arguments (one line on stderr,
no traceback).
"""
from __future__ import annotations

import argparse
import json
import sys

from .errors import EngineError


class _Parser(argparse.ArgumentParser):
    def error(self, message):                     # one line instead of usage + message
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_device(p: argparse.ArgumentParser) -> None:
    from .device import known                     # not available(): that would load (build) every backend
    p.add_argument("--device", default=None, help=f"backend to run on: {', '.join(known())} "
                                                  "(default: numpy)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m engine", description="A Python tensor engine that runs neural networks "
                 "natively and in the browser.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    d = sub.add_parser("digit", help="recognise handwritten digits in images",
                       description="Recognise a handwritten digit in each image (PNG or .npy; other formats "
                                   "need Pillow natively).")
    d.add_argument("images", nargs="+", metavar="IMAGE")
    d.add_argument("--top", type=int, default=3, metavar="K", help="how many classes to print (1-10, default 3)")
    d.add_argument("--json", action="store_true", help='one JSON object per line: {"input", "predictions"}')
    d.add_argument("--weights", default=None, help="a safetensors file, index or URL (default: the bundled one)")
    _add_device(d)
    c = sub.add_parser("classify", help="name what is in photos (ImageNet-1k, EfficientNet-Lite0)",
                       description="Classify each image into the 1000 ImageNet classes with EfficientNet-Lite0 "
                                   "(PNG or .npy; JPEG and other formats need Pillow natively).")
    c.add_argument("images", nargs="+", metavar="IMAGE")
    c.add_argument("--top", type=int, default=5, metavar="K", help="how many classes to print (default 5)")
    c.add_argument("--json", action="store_true",
                   help='one JSON object per line: {"input", "predictions": [{"label", "index", "score"}]}')
    c.add_argument("--weights", default=None, help="a safetensors file, index, folder or URL, or a .pth file "
                                                   "(default: dist/models/efficientnet_lite0, built by build.py)")
    _add_device(c)
    b = sub.add_parser("bench", help="time the engine against PyTorch",
                       description="Time a model on the engine and on PyTorch in the same run; prints ratios. "
                                   "`bench gemm` times float32 matmul on --device (default: every available "
                                   "one) and on numpy, in GFLOP/s; `bench ops` times single ops the same way.")
    b.add_argument("model", choices=["mnist", "effnet", "gemm", "ops"])
    b.add_argument("--repeat", type=int, default=20, help="timed runs per case (median is reported)")
    b.add_argument("--json", action="store_true", help="print the results as one JSON object")
    b.add_argument("--weights", default=None, help="the model's weights (default: the bundled or built ones)")
    b.add_argument("--profile", action="store_true", help="mnist, effnet: also the time per kernel of one pass")
    _add_device(b)
    return ap


def _classify_each(task: str, args) -> int:
    """Run the pipeline of `task` on each image in turn: a bad image is one line on stderr
    (its name and why) and exit status 2; the others are still classified."""
    from .pipelines import pipeline
    clf = pipeline(task, device=args.device, weights=args.weights)
    if not 1 <= args.top <= len(clf.labels):
        raise EngineError(f"--top must be between 1 and {len(clf.labels)}, got {args.top}")
    status = 0
    for path in args.images:
        try:
            preds = clf(path, top_k=args.top)
        except (EngineError, OSError, ValueError, MemoryError) as e:
            reason = str(e) if not isinstance(e, MemoryError) else "out of memory while decoding"
            print(f"error: {path}: {reason}" if path not in reason else f"error: {reason}", file=sys.stderr)
            status = 2
            continue
        if args.json:
            print(json.dumps({"input": path, "predictions": [{**p, "score": round(p["score"], 6)} for p in preds]}))
        else:
            print(f"{path}: " + "  ".join(f"{p['label']} ({p['score']:.1%})" for p in preds))
    return status


def _digit(args) -> int:
    if not 1 <= args.top <= 10:                   # checked before the model is loaded
        raise EngineError(f"--top must be between 1 and 10, got {args.top}")
    return _classify_each("digit-classification", args)


def _classify(args) -> int:
    if args.top < 1:
        raise EngineError(f"--top must be at least 1, got {args.top}")
    return _classify_each("image-classification", args)


def _bench(args) -> int:
    from .bench import bench_effnet, bench_gemm, bench_mnist, bench_ops, format_table
    if args.model in ("gemm", "ops"):
        if args.weights is not None:
            raise EngineError(f"bench {args.model} takes no --weights")
        result = {"gemm": bench_gemm, "ops": bench_ops}[args.model](repeat=args.repeat, device=args.device)
    else:
        bench = {"mnist": bench_mnist, "effnet": bench_effnet}[args.model]
        result = bench(repeat=args.repeat, device=args.device, weights=args.weights, with_profile=args.profile)
    print(json.dumps(result) if args.json else format_table(result))
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"digit": _digit, "classify": _classify, "bench": _bench}[args.command](args)
    except (EngineError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
