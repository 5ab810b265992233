"""Command line: `python -m engine COMMAND ...`.

The task modules (engine/tasks/) bring their own subcommands: `digit IMAGE...`, `classify
IMAGE...`, `embed TEXT...`, `similarity QUERY CANDIDATE...`, `generate PROMPT`, `chat`, and
whatever a new task module adds. This module adds the commands that are no task's: `tokenize
--model NAME TEXT...`, `tasks`, `bench mnist|effnet|minilm|gemm|ops|qlinear|llm|whisper|yolo|ocr|structured`, `inspect FILE`.

`python -m engine --threads N COMMAND ...` runs the C kernels on N threads (engine.set_num_threads).

Exit status: 0 on success, 1 when `bench qlinear` saw a kernel fail, 2 on bad input or
arguments (one line on stderr, no traceback).
"""
from __future__ import annotations

import argparse
import json
import sys

from .errors import EngineError
from .tasks.base import Command


class _Parser(argparse.ArgumentParser):
    def error(self, message):                     # one line instead of usage + message
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m engine", description="A Python tensor engine that runs neural networks "
                 "natively and in the browser.")
    ap.add_argument("--threads", dest="kernel_threads", type=int, default=None, metavar="N",
                    help="threads the C kernels (the simd device) run on, before the command (default "
                         "$ENGINE_THREADS, else the physical cores)")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, command in commands().items():
        command.add_arguments(sub.add_parser(name, help=command.help, description=command.description))
    return ap


def commands() -> dict[str, Command]:
    """Every subcommand: the task modules' (engine.tasks.commands()), then the general ones."""
    from . import tasks
    table = tasks.commands()
    for name, command in GENERAL.items():
        if name in table:
            raise EngineError(f"a task module defines the command {name!r}, which is the engine's own")
        table[name] = command
    return table


def _add_tokenize_arguments(t: argparse.ArgumentParser) -> None:
    t.add_argument("texts", nargs="+", metavar="TEXT")
    t.add_argument("--model", default="all-MiniLM-L6-v2", help="a registry model with a tokenizer "
                                                              "(default all-MiniLM-L6-v2)")
    t.add_argument("--weights", default=None, help="the model's folder or weights, tokenizer.json beside them "
                                                   "(default: the built one)")
    t.add_argument("--json", action="store_true", help='one JSON object per line: {"input", "ids", "tokens"}')


def _add_inspect_arguments(i: argparse.ArgumentParser) -> None:
    i.add_argument("file", metavar="FILE")
    i.add_argument("--json", action="store_true", help='one JSON object: {"file", "format", "tensors": '
                                                      '[{"name", "type", "shape", "bytes"}], "metadata", ...}')


def _add_bench_arguments(b: argparse.ArgumentParser) -> None:
    from .device import known
    b.add_argument("model", choices=["mnist", "effnet", "minilm", "gemm", "ops", "qlinear", "llm", "whisper", "yolo",
                                    "ocr", "structured"])
    b.add_argument("--new-tokens", type=int, default=None, help="llm: tokens generated per run (default 128); "
                                                                "structured: at most, per answer (default 48)")
    b.add_argument("--repeat", type=int, default=None, help="timed runs per case, the median reported (default "
                                                          "20; llm: 1 after a warm-up run)")
    b.add_argument("--json", action="store_true", help="print the results as one JSON object (with --threads: one "
                                                       "per count, a line each)")
    b.add_argument("--threads", default=None, help="thread counts, comma-separated (e.g. 1,2: a scaling curve): the "
                                                   "engine's kernels and torch run at each in turn (default: as set, "
                                                   "$ENGINE_THREADS or the physical cores; torch's own default)")
    b.add_argument("--weights", default=None, help="the model's weights (default: the bundled or built ones)")
    b.add_argument("--profile", action="store_true", help="mnist, effnet, minilm: also the time per kernel of one pass")
    b.add_argument("--device", action="append", default=None,
                   help=f"backend to run on: {', '.join(known())}; qlinear: repeat it for several, 'all' for "
                        "every available one (default: every one worth picking here)")
    w = b.add_argument_group("whisper")
    w.add_argument("--audio", default=None, help="the audio file to transcribe (default: samples/speech/gettysburg-en.wav)")
    w.add_argument("--models", default=None, help="speech models, comma-separated (default whisper-tiny.en,whisper-base)")
    w.add_argument("--no-reference", action="store_true", help="skip openai-whisper on torch")
    w.add_argument("--vad", action="store_true", help="a 5-minute recording with 45%% pauses (the sample's sentences), "
                                                      "transcribed with and without vad=True: speed and word error rates")
    y = b.add_argument_group("yolo")
    y.add_argument("--sizes", default=None, help="input sizes, comma-separated (default 640,320)")
    y.add_argument("--rounds", type=int, default=None, help="interleaved rounds, the median reported (default 3)")
    y.add_argument("--reference-python", default=None, metavar="PYTHON",
                   help="a Python with ultralytics and torch: also time ultralytics there (scripts/yolo_reference.py)")
    o = b.add_argument_group("ocr")
    o.add_argument("--model", dest="ocr_model", default=None, metavar="NAME", help="pp-ocrv4 (default) or pp-ocrv5")
    o.add_argument("--image", default=None, help="the image to read (default: samples/ocr/screenshot.png)")
    o.add_argument("--onnx", default=None, metavar="DIR", help="a folder with the peers' ONNX files (ppocrv4-det.onnx, "
                                                              "...; default: rapidocr's, the built peers' or the cache's)")
    q = b.add_argument_group("qlinear")
    q.add_argument("--types", default=None, help="GGML types, comma-separated (default q4_0,q4_1,q8_0,q4_k,q6_k)")
    q.add_argument("--shapes", default=None, help="INxOUT features, comma-separated (default "
                                                   "576x576,576x192,576x1536,1536x576,576x49152)")
    q.add_argument("--rows", default=None, help="rows of the input, comma-separated (default 1,37)")
    q.add_argument("--min-time", type=float, default=None, help="seconds of samples per case, at least 3 samples "
                                                               "(default 0.2; --quick 0.05)")
    q.add_argument("--quick", action="store_true", help="the layer shapes without the output head, short samples")


def _bench(args) -> int:
    """bench once, or (--threads) once per thread count, engine and torch at the same count."""
    if args.threads is None:
        return _bench_once(args)
    try:
        counts = [int(item) for item in args.threads.split(",") if item.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise EngineError(f"--threads: positive thread counts, comma-separated (e.g. 1,2), got {args.threads!r}")
    import copy

    from .bench import threads
    status = 0
    for count in counts:
        with threads(count) as what:
            if not args.json:
                print(f"== {what}")
            status = max(status, _bench_once(copy.copy(args)))
    return status


def _bench_once(args) -> int:
    from .bench.models import bench_effnet, bench_mnist, format_table
    from .bench.ops import bench_gemm, bench_ops, format_gemm, format_ops
    if args.model == "llm":
        return _bench_llm(args)
    if args.model == "whisper":
        return _bench_whisper(args)
    if args.model == "yolo":
        return _bench_yolo(args)
    if args.model == "structured":
        return _bench_structured(args)
    if args.model == "ocr":
        return _bench_ocr(args)
    if args.ocr_model is not None or args.image is not None or args.onnx is not None:
        raise EngineError(f"--model, --image and --onnx are options of bench ocr, not of bench {args.model}")
    if args.sizes is not None or args.rounds is not None or args.reference_python is not None:
        raise EngineError(f"--sizes, --rounds and --reference-python are options of bench yolo, not of bench {args.model}")
    if args.audio is not None or args.models is not None or args.no_reference or args.vad:
        raise EngineError(f"--audio, --models, --no-reference and --vad are options of bench whisper, "
                          f"not of bench {args.model}")
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
    args.new_tokens = 128 if args.new_tokens is None else args.new_tokens
    if args.new_tokens < 2 or (args.repeat is not None and args.repeat < 1):
        raise EngineError("bench llm needs --new-tokens >= 2 and --repeat >= 1")
    result = bench_llm(devices, weights=args.weights, new_tokens=args.new_tokens, repeat=args.repeat or 1)
    print(json.dumps(result) if args.json else format_llm(result))
    return 0


def _bench_structured(args) -> int:
    from .bench.structured import MODELS, bench_structured, format_structured
    if any(v is not None for v in (args.types, args.shapes, args.rows, args.min_time, args.weights, args.audio,
                                   args.sizes)) or args.quick or args.profile or (args.device and len(args.device) > 1):
        raise EngineError("bench structured takes --models, one --device, --new-tokens, --repeat (rounds) and --json")
    models = tuple(args.models.split(",")) if args.models else MODELS
    result = bench_structured(models, args.device[0] if args.device else None,
                              new_tokens=args.new_tokens or 48, rounds=args.repeat or 2)
    print(json.dumps(result) if args.json else format_structured(result))
    return 0


def _bench_whisper(args) -> int:
    from .bench.speech import MODELS, bench_whisper, format_whisper
    from .device import available
    if any(v is not None for v in (args.types, args.shapes, args.rows, args.min_time, args.weights)) or \
            args.quick or args.profile:
        raise EngineError("bench whisper takes --device, --models, --audio, --repeat, --no-reference, --vad and --json")
    devices = [d for d in available() if d != "numpy"] if not args.device else \
        available() if args.device == ["all"] else args.device
    models = tuple(args.models.split(",")) if args.models else MODELS
    if args.vad:
        from .bench.speech import bench_vad, format_vad
        if args.audio is not None:
            raise EngineError("bench whisper --vad makes its recording from the sample: no --audio")
        result = bench_vad(devices, models, repeat=args.repeat or 1)
        print(json.dumps(result) if args.json else format_vad(result))
        return 0
    result = bench_whisper(devices, models, args.audio, repeat=args.repeat or 1, reference=not args.no_reference)
    print(json.dumps(result) if args.json else format_whisper(result))
    return 0


def _bench_yolo(args) -> int:
    from .bench.detection import SIZES, bench_yolo, format_yolo, main_args_check
    from .device import available
    if any(v is not None for v in (args.types, args.shapes, args.rows, args.min_time, args.weights, args.audio,
                                   args.models)) or args.quick or args.profile or args.no_reference:
        raise EngineError("bench yolo takes --device, --sizes, --repeat, --rounds, --reference-python and --json")
    devices = [d for d in available() if d != "webgpu"] if not args.device else \
        available() if args.device == ["all"] else args.device
    try:
        sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else SIZES
    except ValueError:
        sizes = ()
    if not sizes or any(s < 32 or s % 32 for s in sizes):
        raise EngineError(f"--sizes: multiples of 32, comma-separated (e.g. 640,320), got {args.sizes!r}")
    if (args.repeat is not None and args.repeat < 1) or (args.rounds is not None and args.rounds < 1):
        raise EngineError("bench yolo needs --repeat >= 1 and --rounds >= 1")
    main_args_check(args.reference_python)
    result = bench_yolo(devices, sizes=sizes, repeat=args.repeat or 10, rounds=args.rounds or 3,
                        reference_python=args.reference_python)
    print(json.dumps(result) if args.json else format_yolo(result))
    return 0


def _bench_ocr(args) -> int:
    from .bench.ocr import MODELS, bench_ocr, format_ocr
    if any(v is not None for v in (args.types, args.shapes, args.rows, args.min_time, args.audio, args.models,
                                   args.sizes, args.reference_python, args.new_tokens)) or args.quick or args.profile \
            or args.vad:
        raise EngineError("bench ocr takes --model, --image, --onnx, --device, --weights, --repeat, --rounds, "
                          "--no-reference, --threads and --json")
    model = args.ocr_model or MODELS[0]
    if model not in MODELS:
        raise EngineError(f"--model: one of {', '.join(MODELS)}, got {model!r}")
    if (args.repeat is not None and args.repeat < 1) or (args.rounds is not None and args.rounds < 1):
        raise EngineError("bench ocr needs --repeat >= 1 and --rounds >= 1")
    result = bench_ocr(tuple(args.device) if args.device else (None,), model=model, image=args.image,
                       repeat=args.repeat or 5, rounds=args.rounds or 3, onnx=args.onnx,
                       reference=not args.no_reference, weights=args.weights)
    print(json.dumps(result) if args.json else format_ocr(result))
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


def _tokenize(args) -> int:
    from . import registry
    from .site.checkpoint import Checkpoint, location_of
    from .text import Tokenizer
    entry = registry.model(args.model)
    where = location_of(args.weights) or registry.default_location(entry)
    if entry.site_format == "gguf":               # the tokenizer is in the GGUF's metadata
        from .site import load_gguf
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


def _tasks(args) -> int:
    from . import registry
    for task, entry in registry.tasks().items():
        print(f"{task:<22} {entry.name:<20} {entry.title}")
    return 0


def _inspect(args) -> int:
    from .formats.describe import format_text, inspect_file
    report = inspect_file(args.file)
    print(json.dumps(report, ensure_ascii=False) if args.json else format_text(report))
    return 0


def _add_serve_arguments(s: argparse.ArgumentParser) -> None:
    from .device import known
    s.add_argument("--model", action="append", default=None, metavar="NAME",
                   help="a registry model or a GGUF file to serve; repeat it for several (default: the first "
                        "text-generation model)")
    s.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8080, help="the port (default 8080)")
    s.add_argument("--device", default=None, help=f"the backend: {', '.join(known())} (default: the best here)")
    s.add_argument("--queue", type=int, default=8, help="requests that may wait per model while one runs; "
                                                      "past that 429 (default 8)")


def _serve(args) -> int:
    from . import registry
    from .serve import run
    if args.queue < 0:
        raise EngineError(f"--queue must be >= 0, got {args.queue}")
    run(args.model or [registry.for_task("text-generation").name], args.host, args.port, args.device, args.queue)
    return 0


GENERAL = {
    "tokenize": Command(
        help="the token ids and tokens of texts, as a model's tokenizer makes them",
        description="Tokenize each text with the tokenizer.json of a registry model.",
        add_arguments=_add_tokenize_arguments, run=_tokenize),
    "tasks": Command(
        help="the registry: every task and the model that serves it",
        description="Every task of the registry and the model that serves it.",
        add_arguments=lambda p: None, run=_tasks),
    "inspect": Command(
        help="list the tensors and metadata of a weights file",
        description="List the tensors (name, type, shape, bytes) and the metadata of a safetensors file, index "
                    "or folder, a GGUF file or a PyTorch .pth, from its header only; long metadata is abbreviated.",
        add_arguments=_add_inspect_arguments, run=_inspect),
    "serve": Command(
        help="serve the OpenAI-compatible API over HTTP (/v1/chat/completions, /v1/embeddings, /v1/models)",
        description="Load the models and serve OpenAI's chat completions (streamed as server-sent events), "
                    "embeddings and model list for any OpenAI client (docs/api.md). Needs the serve extra "
                    "(Starlette, uvicorn).",
        add_arguments=_add_serve_arguments, run=_serve),
    "bench": Command(
        help="time the engine against PyTorch",
        description="Time a model on the engine and on PyTorch in the same run; prints ratios. `bench minilm` "
                    "times sentence embeddings at 1x128, 8x128 and real sentences on every available backend (or "
                    "--device); `bench gemm` times float32 matmul on --device (default: every available one) and "
                    "on numpy, in GFLOP/s; `bench ops` times single ops the same way; `bench qlinear` times "
                    "linear layers with GGML quantized weights (SmolLM2 shapes, 1 and 37 rows) in GB/s of weights "
                    "and GFLOP/s, against float32 on the same backend; `bench llm` times SmolLM2 chat (prefill "
                    "and decode tokens/s) on every available backend and on torch/transformers; `bench whisper` times speech "
                    "recognition (real-time factor, encoder and decoder) per backend against openai-whisper on torch; "
                    "`bench yolo` times YOLO11n-pose and YOLOv10n (network and whole pipeline, 640 and 320) per "
                    "backend, against ultralytics on torch with --reference-python; `bench ocr` times PP-OCR on "
                    "samples/ocr/screenshot.png (each stage and the whole pipeline, and the networks alone on the "
                    "batches it fed them) against rapidocr-onnxruntime and onnxruntime at the same thread count.",
        add_arguments=_add_bench_arguments, run=_bench),
}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.kernel_threads is not None:
            from .threads import set_num_threads
            set_num_threads(args.kernel_threads)
        return commands()[args.command].run(args)
    except (EngineError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
