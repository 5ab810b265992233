"""Command line: `python -m engine digit IMAGE...`, `classify IMAGE...`, `embed TEXT...`,
`similarity QUERY CANDIDATE...`, `generate PROMPT`, `chat`, `tokenize --model NAME TEXT...`, `tasks`,
`bench mnist|effnet|minilm|gemm|ops|qlinear|llm`, `inspect FILE`.

Exit status: 0 on success, 1 when `bench qlinear` saw a kernel fail, 2 on bad input or
arguments (one line on stderr, no traceback).
"""
from __future__ import annotations

import argparse
import json
import sys

from .errors import EngineError


class _Parser(argparse.ArgumentParser):
    def error(self, message):                     # one line instead of usage + message
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_device(p: argparse.ArgumentParser, default: str = "numpy") -> None:
    from .device import known                     # not available(): that would load (build) every backend
    p.add_argument("--device", default=None, help=f"backend to run on: {', '.join(known())} "
                                                  f"(default: {default})")


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", default=None, help="a sentence-transformers folder, or a safetensors file, index "
                                                   "or URL with its tokenizer.json and config.json beside it "
                                                   "(default: dist/models/all-MiniLM-L6-v2, built by build.py)")
    p.add_argument("--max-length", type=int, default=None, help="tokens per text (default: the model's, 256)")
    _add_device(p)


def _add_generation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N", help="at most N tokens (default 256)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 is greedy (default)")
    p.add_argument("--top-k", type=int, default=0, metavar="K", help="sample from the K most likely (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling (1: off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R", help="1: off")
    p.add_argument("--seed", type=int, default=None, help="repeatable sampling")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop at this text (repeatable)")
    p.add_argument("--system", default=None, help="a system message (default: the model's own)")
    p.add_argument("--capacity", type=int, default=1024, help="context length in tokens (default 1024)")
    p.add_argument("--weights", default=None, help="a GGUF file or URL (default: dist/models/SmolLM2-135M-Instruct, "
                                                   "built by build.py)")
    _add_device(p, default="simd where it is available, else numpy")


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
    e = sub.add_parser("embed", help="sentence embeddings (all-MiniLM-L6-v2): one unit vector per text",
                       description="Embed each text as a unit vector (sentence-embedding task). Texts longer "
                                   "than the model's limit are truncated, with a note on stderr.")
    e.add_argument("texts", nargs="*", metavar="TEXT")
    e.add_argument("--file", default=None, help="read the texts from this file, one per line ('-': stdin)")
    e.add_argument("--json", action="store_true", help='one JSON object per line: {"input", "embedding"}')
    _add_model_options(e)
    m = sub.add_parser("similarity", help="rank candidate texts by cosine similarity to a query",
                       description="Rank the candidates by the cosine similarity of their sentence embeddings "
                                   "to the query's, best first.")
    m.add_argument("query", metavar="QUERY")
    m.add_argument("candidates", nargs="+", metavar="CANDIDATE")
    m.add_argument("--json", action="store_true", help='one JSON object per line: {"index", "text", "score"}')
    _add_model_options(m)
    t = sub.add_parser("tokenize", help="the token ids and tokens of texts, as a model's tokenizer makes them",
                       description="Tokenize each text with the tokenizer.json of a registry model.")
    t.add_argument("texts", nargs="+", metavar="TEXT")
    t.add_argument("--model", default="all-MiniLM-L6-v2", help="a registry model with a tokenizer "
                                                              "(default all-MiniLM-L6-v2)")
    t.add_argument("--weights", default=None, help="the model's folder or weights, tokenizer.json beside them "
                                                   "(default: the built one)")
    t.add_argument("--json", action="store_true", help='one JSON object per line: {"input", "ids", "tokens"}')
    g = sub.add_parser("generate", help="continue a prompt, or answer it as a chat message (SmolLM2)",
                       description="Generate text with SmolLM2-135M-Instruct (text-generation task), streamed "
                                   "to stdout as it comes; the speeds go to stderr. With --chat the prompt is "
                                   "a user message in the model's chat template.")
    g.add_argument("prompt", metavar="PROMPT")
    g.add_argument("--chat", action="store_true", help="answer PROMPT as a chat message (else continue it)")
    g.add_argument("--json", action="store_true", help='one JSON object: {"input", "output", "tokens", '
                                                      '"prefill_tok_s", "decode_tok_s"}')
    _add_generation_options(g)
    h = sub.add_parser("chat", help="an interactive chat in the terminal (SmolLM2), streaming",
                       description="Chat with SmolLM2-135M-Instruct: type a message and Enter; the answer streams "
                                   "in. Ctrl-C stops an answer, /new starts a new conversation, /quit or "
                                   "Ctrl-D leaves. Later turns reuse the cached conversation.")
    _add_generation_options(h)
    sub.add_parser("tasks", help="the registry: every task and the model that serves it")
    i = sub.add_parser("inspect", help="list the tensors and metadata of a weights file",
                       description="List the tensors (name, type, shape, bytes) and the metadata of a "
                                   "safetensors file, index or folder, a GGUF file or a PyTorch .pth, "
                                   "from its header only; long metadata is abbreviated.")
    i.add_argument("file", metavar="FILE")
    i.add_argument("--json", action="store_true", help='one JSON object: {"file", "format", "tensors": '
                                                      '[{"name", "type", "shape", "bytes"}], "metadata", ...}')
    b = sub.add_parser("bench", help="time the engine against PyTorch",
                       description="Time a model on the engine and on PyTorch in the same run; prints ratios. "
                                   "`bench minilm` times sentence embeddings at 1x128, 8x128 and real "
                                   "sentences on every available backend (or --device); "
                                   "`bench gemm` times float32 matmul on --device (default: every available "
                                   "one) and on numpy, in GFLOP/s; `bench ops` times single ops the same way; "
                                   "`bench qlinear` times linear layers with GGML quantized weights (SmolLM2 "
                                   "shapes, 1 and 37 rows) in GB/s of weights and GFLOP/s, against float32 on "
                                   "the same backend; `bench llm` times SmolLM2 chat (prefill and decode "
                                   "tokens/s) on every available backend and on torch/transformers.")
    b.add_argument("model", choices=["mnist", "effnet", "minilm", "gemm", "ops", "qlinear", "llm"])
    b.add_argument("--new-tokens", type=int, default=128, help="llm: tokens generated per run (default 128)")
    b.add_argument("--repeat", type=int, default=None, help="timed runs per case, the median reported (default "
                                                          "20; llm: 1 after a warm-up run)")
    b.add_argument("--json", action="store_true", help="print the results as one JSON object")
    b.add_argument("--weights", default=None, help="the model's weights (default: the bundled or built ones)")
    b.add_argument("--profile", action="store_true", help="mnist, effnet, minilm: also the time per kernel of one pass")
    from .device import known
    b.add_argument("--device", action="append", default=None,
                   help=f"backend to run on: {', '.join(known())}; qlinear: repeat it for several, 'all' for "
                        "every available one (default: every one worth picking here)")
    q = b.add_argument_group("qlinear")
    q.add_argument("--types", default=None, help="GGML types, comma-separated (default q4_0,q4_1,q8_0,q4_k,q6_k)")
    q.add_argument("--shapes", default=None, help="INxOUT features, comma-separated (default "
                                                   "576x576,576x192,576x1536,1536x576,576x49152)")
    q.add_argument("--rows", default=None, help="rows of the input, comma-separated (default 1,37)")
    q.add_argument("--min-time", type=float, default=None, help="seconds of samples per case, at least 3 samples "
                                                               "(default 0.2; --quick 0.05)")
    q.add_argument("--quick", action="store_true", help="the layer shapes without the output head, short samples")
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
    from .bench.models import bench_effnet, bench_mnist, format_table
    from .bench.ops import bench_gemm, bench_ops, format_gemm, format_ops
    if args.model == "llm":
        return _bench_llm(args)
    args.repeat = args.repeat or 20
    if args.model == "qlinear":
        return _bench_qlinear(args)
    if any(v is not None for v in (args.types, args.shapes, args.rows, args.min_time)) or args.quick:
        raise EngineError(f"--types, --shapes, --rows, --min-time and --quick are options of bench qlinear, "
                          f"not of bench {args.model}")
    if args.device and len(args.device) > 1:
        raise EngineError(f"bench {args.model} takes one --device")
    args.device = args.device[0] if args.device else None
    if args.model in ("gemm", "ops"):
        if args.weights is not None:
            raise EngineError(f"bench {args.model} takes no --weights")
        result = {"gemm": bench_gemm, "ops": bench_ops}[args.model](repeat=args.repeat, device=args.device)
        format_table = {"gemm": format_gemm, "ops": format_ops}[args.model]
    elif args.model == "minilm":
        from .bench.text import bench_minilm, format_minilm
        result = bench_minilm(repeat=args.repeat, device=args.device, weights=args.weights,
                              with_profile=args.profile)
        print(json.dumps(result) if args.json else format_minilm(result))
        return 0
    else:
        bench = {"mnist": bench_mnist, "effnet": bench_effnet}[args.model]
        result = bench(repeat=args.repeat, device=args.device, weights=args.weights, with_profile=args.profile)
    print(json.dumps(result) if args.json else format_table(result))
    return 0


def _bench_llm(args) -> int:
    from .bench.llm import bench_llm, format_llm
    from .device import available
    if any(v is not None for v in (args.types, args.shapes, args.rows, args.min_time)) or args.quick or args.profile:
        raise EngineError("bench llm takes --device, --weights, --repeat, --new-tokens and --json")
    devices = available() if not args.device or args.device == ["all"] else args.device
    if args.new_tokens < 2 or (args.repeat is not None and args.repeat < 1):
        raise EngineError("bench llm needs --new-tokens >= 2 and --repeat >= 1")
    result = bench_llm(devices, weights=args.weights, new_tokens=args.new_tokens, repeat=args.repeat or 1)
    print(json.dumps(result) if args.json else format_llm(result))
    return 0


def _bench_qlinear(args) -> int:
    from .bench import quant as bench_quant
    if args.weights is not None or args.profile:
        raise EngineError("bench qlinear takes no --weights or --profile")
    options = dict(bench_quant.QUICK) if args.quick else {}

    def listed(text: str, name: str, parse):
        try:
            return tuple(parse(item.strip()) for item in text.split(",") if item.strip())
        except ValueError:
            raise EngineError(f"--{name}: cannot read {text!r}") from None
    if args.types is not None:
        options["types"] = listed(args.types, "types", str)
    if args.shapes is not None:
        options["shapes"] = listed(args.shapes, "shapes", lambda s: tuple(int(n) for n in s.lower().split("x", 1)))
        if any(len(s) != 2 or min(s) < 1 for s in options["shapes"]):
            raise EngineError(f"--shapes: each shape is INxOUT with positive sizes, got {args.shapes!r}")
    if args.rows is not None:
        options["rows"] = listed(args.rows, "rows", int)
        if any(r < 1 for r in options["rows"]):
            raise EngineError(f"--rows must be positive, got {args.rows!r}")
    if args.min_time is not None:
        options["min_time"] = args.min_time
    result = bench_quant.bench_qlinear(devices=args.device, repeat=args.repeat, **options)
    print(json.dumps(result) if args.json else bench_quant.format_qlinear(result))
    return 1 if result["failed"] else 0           # a kernel raised: listed in the output


def _texts(args) -> list[str]:
    texts = list(args.texts)
    if args.file is not None:
        try:
            source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
            with source:
                texts += [line.rstrip("\r\n") for line in source]
        except UnicodeDecodeError as e:
            raise EngineError(f"{args.file}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not texts:
        raise EngineError("no texts: give them as arguments or with --file")
    return texts


def _embedder(args):
    import warnings
    from .pipelines import pipeline
    pipe = pipeline("sentence-embedding", device=args.device, weights=args.weights, max_length=args.max_length)
    warnings.filterwarnings("ignore", message=".*were truncated")     # said once per text below instead
    return pipe


def _note_truncated(pipe, texts) -> None:
    for i in pipe.truncated:
        print(f"note: text {i + 1} is longer than {pipe.max_length} tokens; its embedding is of the first "
              f"{pipe.max_length} ({texts[i][:40]!r}...)", file=sys.stderr)


def _embed(args) -> int:
    texts = _texts(args)
    pipe = _embedder(args)
    vectors = pipe(texts)
    _note_truncated(pipe, texts)
    for text, vector in zip(texts, vectors):
        if args.json:
            print(json.dumps({"input": text, "embedding": [round(float(v), 7) for v in vector]},
                             ensure_ascii=False))
        else:
            print(f"{text[:60]!r}: [{', '.join(f'{v:.4f}' for v in vector[:6])}, ...] ({len(vector)} dims)")
    return 0


def _similarity(args) -> int:
    pipe = _embedder(args)
    ranked = pipe.rank(args.query, args.candidates)
    _note_truncated(pipe, [args.query, *args.candidates])
    for r in ranked:
        if args.json:
            print(json.dumps({"index": r["index"], "text": r["text"], "score": round(r["score"], 6)},
                             ensure_ascii=False))
        else:
            print(f"{r['score']:.4f}  {r['text']}")
    return 0


def _tokenize(args) -> int:
    from . import registry
    from .io.checkpoint import Checkpoint, location_of
    from .text import Tokenizer
    entry = registry.model(args.model)
    where = location_of(args.weights) or registry.default_location(entry)
    if entry.site_format == "gguf":               # the tokenizer is in the GGUF's metadata
        from .io.gguf import load_gguf
        with load_gguf(where) as weights:
            tokenizer = Tokenizer.from_gguf(weights.metadata)
    elif "tokenizer.json" not in entry.processor:
        raise EngineError(f"model {args.model} has no tokenizer")
    else:
        tokenizer = Tokenizer.from_buffer(Checkpoint(None, location=where).file("tokenizer.json"),
                                          file=f"{args.model}/tokenizer.json")
    tokenizer.no_padding()                        # the text's own tokens, not padded to the json's 128
    for text in args.texts:
        enc = tokenizer.encode(text)
        if args.json:
            print(json.dumps({"input": text, "ids": enc.ids, "tokens": enc.tokens}, ensure_ascii=False))
        else:
            print(f"{text[:60]!r}: " + " ".join(f"{t}({i})" for t, i in zip(enc.tokens, enc.ids)))
    return 0


def _generator(args):
    from . import pipeline
    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, repetition_penalty=args.repetition_penalty, seed=args.seed, stop=args.stop)
    return pipeline("text-generation", device=args.device, weights=args.weights, capacity=args.capacity, **options)


def _with_system(args, messages: list) -> list:
    return ([{"role": "system", "content": args.system}] if args.system is not None else []) + messages


def _speeds(stats: dict) -> str:
    return (f"[{stats['new_tokens']} tokens, prefill {stats['prefill_tok_s']:.1f} tok/s, "
            f"decode {stats['decode_tok_s']:.1f} tok/s, first token after {stats.get('ttft_s', 0):.2f} s]")


def _generate(args) -> int:
    chat = _generator(args)
    if args.chat:
        pieces = chat.stream(_with_system(args, [{"role": "user", "content": args.prompt}]))
    else:
        if args.system is not None:
            raise EngineError("--system needs --chat")
        pieces = chat.stream_text(args.prompt)
    out = []
    for piece in pieces:
        out.append(piece)
        if not args.json:
            print(piece, end="", flush=True)
    stats = chat.stats
    if args.json:
        print(json.dumps({"input": args.prompt, "output": "".join(out), "tokens": stats["new_tokens"],
                          "prefill_tok_s": round(stats["prefill_tok_s"], 2),
                          "decode_tok_s": round(stats["decode_tok_s"], 2)}, ensure_ascii=False))
    else:
        print()
        print(_speeds(stats), file=sys.stderr)
    return 0


def _chat(args) -> int:
    chat = _generator(args)
    messages: list = []
    tty = sys.stdin.isatty()
    while True:
        if tty:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line or line.strip() == "/quit":
            return 0
        text = line.strip()
        if text == "/new":
            messages = []
            chat.reset()
            print("(a new conversation)", file=sys.stderr)
            continue
        if not text:
            continue
        messages.append({"role": "user", "content": text})
        answer = []
        try:
            for piece in chat.stream(_with_system(args, messages)):
                answer.append(piece)
                print(piece, end="", flush=True)
        except KeyboardInterrupt:                # stops this answer only; what came is kept
            print(" [stopped]", end="", file=sys.stderr)
        print()
        messages.append({"role": "assistant", "content": "".join(answer)})
        if tty:
            print(_speeds(chat.stats), file=sys.stderr)


def _tasks(args) -> int:
    from . import registry
    for task, entry in registry.tasks().items():
        print(f"{task:<22} {entry.name:<20} {entry.title}")
    return 0


def _inspect(args) -> int:
    from .io.describe import format_text, inspect_file
    report = inspect_file(args.file)
    print(json.dumps(report, ensure_ascii=False) if args.json else format_text(report))
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"digit": _digit, "classify": _classify, "embed": _embed, "similarity": _similarity,
                "tokenize": _tokenize, "generate": _generate, "chat": _chat, "tasks": _tasks, "bench": _bench,
                "inspect": _inspect}[args.command](args)
    except (EngineError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
