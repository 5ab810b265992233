"""The bench page's entry points in the worker (web/bench.js calls them by name): the engine's
benchmarks (engine.bench) run in this browser on the loaded pipelines, as `python -m engine
bench ...` runs them natively. Each answers a JSON string.

They sit above both the tasks and the benchmarks (engine.tasks never imports engine.bench), so
the benchmarks of a model's pipeline live here rather than in its task module.
"""
from __future__ import annotations

import json

import numpy as np

from ..tasks import state


async def bench_digit(repeat: int = 20, batches=(1, 16)) -> str:
    """Median MNIST inference time per batch size on the current device."""
    rng = np.random.default_rng(0)
    return await _bench("digit-classification", {b: rng.random((b, 1, 28, 28), dtype=np.float32) for b in batches},
                        repeat, 3)


def image_inputs(batches=(1,)) -> dict[int, np.ndarray]:
    """batch size -> the images bench_image times (and the page's peer runs): seeded noise."""
    x = np.random.default_rng(0).standard_normal((max(batches), 3, 224, 224)).astype(np.float32)
    return {b: x[:b] for b in batches}


def text_inputs(shapes=((1, 128), (8, 128))) -> dict[tuple, dict]:
    """(batch, length) -> the token batch bench_text times (and the page's peer runs): seeded ids
    of ordinary vocabulary, no padding."""
    rng = np.random.default_rng(0)
    batches = {}
    for n, length in shapes:
        ids = rng.integers(1000, 2000, (n, length))
        batches[n, length] = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return batches


async def bench_image(repeat: int = 5, batches=(1,)) -> str:
    """Median EfficientNet inference time (forward only) on the current device."""
    return await _bench("image-classification", image_inputs(batches), repeat, 2)


async def _bench(task: str, inputs: dict, repeat: int, digits: int) -> str:
    """{"batchN_ms": median ms of pipe.logits} for each batch size N -> input in `inputs`."""
    from ..bench import median_ms
    async with state.lock:
        pipe = state.loaded(task)
        out = {f"batch{b}_ms": round(median_ms(lambda: pipe.logits(x), repeat), digits) for b, x in inputs.items()}
    return json.dumps({"device": state.current["device"], **out})


async def bench_text(repeat: int = 5, shapes=((1, 128), (8, 128)), task: str = "sentence-embedding") -> str:
    """Median encoder time (forward, pooling, normalisation) per (batch, length) on the current device,
    plus tokenizer throughput."""
    from ..bench import median_ms
    from ..bench.text import tokenizer_throughput
    async with state.lock:
        pipe = state.loaded(task)
        out = {}
        for (n, length), batch in text_inputs(shapes).items():
            await pipe.fetch_rows(batch["input_ids"])
            out[f"batch{n}x{length}_ms"] = round(median_ms(lambda: pipe.embed(batch), repeat), 2)
        out["tokenizer"] = tokenizer_throughput(pipe.tokenizer)
    return json.dumps({"device": state.current["device"], **out})


async def bench_gemm(repeat: int = 5, max_side: int | None = None) -> str:
    """GEMM GFLOP/s on every available backend (engine.bench.ops.bench_gemm), in this browser; with
    max_side, only the shapes of at most max_side**3 multiply-adds."""
    from ..bench.ops import GEMM_SHAPES, bench_gemm as run
    shapes = [s for s in GEMM_SHAPES if max_side is None or s[0] * s[1] * s[2] <= max_side ** 3]
    async with state.lock:
        return json.dumps(run(repeat=repeat, shapes=shapes))


async def bench_ops(repeat: int = 5) -> str:
    """Per-op times on every available backend (engine.bench.ops.bench_ops), in this browser."""
    from ..bench.ops import bench_ops as run
    async with state.lock:
        return json.dumps(run(repeat=repeat, inner=3))


async def bench_qlinear(repeat: int = 5, full: bool = False) -> str:
    """Quantized linear GB/s and GFLOP/s per GGML type against float32 on every available backend
    (engine.bench.quant.bench_qlinear, as `python -m engine bench qlinear` natively), in this
    browser: its quick set, or with `full` the CLI's default set; "table" is the CLI's table."""
    from ..bench.quant import QUICK, bench_qlinear as run, format_qlinear
    from ..device import available
    async with state.lock:
        result = run(devices=available(), repeat=repeat, **({} if full else QUICK))
    return json.dumps({**result, "table": format_qlinear(result)})


async def bench_llm(new_tokens: int = 128, repeat: int = 1) -> str:
    """Prefill and decode tokens/s of the chat model on the current device (the 37-token chat
    prompt, greedy, `new_tokens` new ones, EOS ignored), as `python -m engine bench llm`."""
    from ..bench.llm import bench_pipeline
    pipe = state.loaded("text-generation")
    async with state.lock:
        result = bench_pipeline(pipe, new_tokens=new_tokens, repeat=repeat)
    return json.dumps({**result, "heap_bytes": state.heap_bytes(), "device": state.current["device"]})


async def bench_llm_text(prompt: str = "", new_tokens: int = 128, repeat: int = 1, warmup: bool = True) -> str:
    """The plain-text case on the loaded text-generation model (any model, base or chat: `prompt`,
    "" for engine.bench.llm.TEXT_PROMPT, continued greedy, `new_tokens` new ones, EOS ignored) on
    the current device at the kernels' current thread count, as scripts/bench_llm.py runs it
    natively: prefill/decode tok/s (median of `repeat` after one untimed run when `warmup`), the
    ids and text of the answer (beside the peer's), the prompt's text and token count."""
    from ..bench.llm import TEXT_PROMPT, bench_text
    pipe = state.loaded("text-generation")
    prompt = str(prompt) if isinstance(prompt, str) and prompt else TEXT_PROMPT
    async with state.lock:
        result = bench_text(pipe, prompt, new_tokens=int(new_tokens), repeat=int(repeat), warmup=bool(warmup))
    threads = None
    try:
        from .. import threads as pool
        threads = int(pool.get_num_threads())
    except (ImportError, AttributeError):
        pass
    return json.dumps({**result, "prompt": prompt, "threads": threads, "heap_bytes": state.heap_bytes(),
                       "device": state.current["device"]})


async def bench_structured(new_tokens: int = 48, rounds: int = 2) -> str:
    """`python -m engine bench structured` on the loaded text-generation model (its current
    device): decoding with a JSON Schema against free decoding (engine.bench.structured)."""
    from ..bench.structured import bench_model
    pipe = state.loaded("text-generation")
    async with state.lock:
        result = bench_model(pipe, new_tokens=int(new_tokens), rounds=int(rounds))
    return json.dumps({**result, "heap_bytes": state.heap_bytes()})


async def bench_llm_profile(prompt: str = "") -> str:
    """Where the loaded text-generation model spends a prefill chunk and an eager decode step on the
    plain-text case, per kernel (engine.bench.llm.profile_text), at the current thread count:
    {"prefill": table lines, "decode": table lines}."""
    from ..bench.llm import TEXT_PROMPT, profile_text
    pipe = state.loaded("text-generation")
    prompt = str(prompt) if isinstance(prompt, str) and prompt else TEXT_PROMPT
    async with state.lock:
        return json.dumps(profile_text(pipe, pipe.tokenizer.encode(prompt).ids))


async def bench_speech(audio, repeat: int = 1, profile: bool = False, seconds: float = 0) -> str:
    """The speech model's real-time factor on the current device, with the encoder's and the
    decoder's shares, on a WAV file's bytes (the site's speech sample), as `python -m engine bench
    whisper`: one untimed run (it captures the decode graphs), then the median of `repeat`;
    `profile`: also the time per kernel of one encoder pass and one decode step; `seconds`: the
    sample repeated to that length (the memory a long recording takes)."""
    from ..audio import load_audio
    from ..bench.speech import run_pipeline
    pipe = state.loaded("speech-recognition")
    samples = load_audio(bytes(state.py(audio)), name="the speech sample")
    if seconds and seconds * 16000 > samples.size:
        samples = np.tile(samples, int(np.ceil(seconds * 16000 / samples.size)))[:int(seconds * 16000)]
    async with state.lock:
        before = state.heap_bytes()
        result = run_pipeline(pipe, samples, repeat=repeat)
        if profile:                                  # where one window's encoder and decode step spend it
            from ..bench.speech import profile_model
            result["profile"] = profile_model(pipe, samples)
    return json.dumps({**result, "model": pipe.entry.name, "heap_bytes": max(before, state.heap_bytes()),
                       "heap_before_bytes": before,
                       "device": state.current["device"]})


async def bench_threads(n: int) -> str:
    """Set the kernels' thread count for the bench calls that follow (engine.threads'
    set_num_threads): {"requested": n, "used": the count now in effect, "reason": why fewer, or None}."""
    n = int(n)
    try:
        from .. import threads
        setter, getter = threads.set_num_threads, threads.get_num_threads
    except (ImportError, AttributeError):
        return json.dumps({"requested": n, "used": 1, "reason": "this engine has no thread control (engine.threads)"})
    async with state.lock:
        setter(n)
        used = int(getter())
    reason = None
    if used < n:
        describe = getattr(threads, "describe", None)
        reason = describe() if describe else f"{used} thread{'s' * (used != 1)} available"
    return json.dumps({"requested": n, "used": used, "reason": reason})


def _onnx_feed(array: np.ndarray, kind: str) -> dict:
    """An input for ONNX Runtime Web in the page (web/bench-ort.js): {"type", "dims", "base64"},
    the array's little-endian bytes as `kind` ("float32" or "int64")."""
    import base64
    data = np.ascontiguousarray(array, dtype="<f4" if kind == "float32" else "<i8")
    return {"type": kind, "dims": list(array.shape), "base64": base64.b64encode(data.tobytes()).decode()}


async def bench_peer_cases() -> str:
    """The cases bench_image and bench_text time (EfficientNet batch 1, MiniLM 1x128 and 8x128),
    for a peer in the page (ONNX Runtime Web, web/bench-ort.js) to run on the same inputs: per case
    its inputs by the ONNX graphs' names ({"type", "dims", "base64"}: little-endian bytes) and our
    output on the current device (logits; unit embeddings), which the page checks the peer's against.
    Only the cases whose pipeline is loaded."""
    cases = {}
    async with state.lock:
        if "image-classification" in state.current["pipelines"]:
            pipe = state.loaded("image-classification")
            for b, x in image_inputs().items():
                cases[f"effnet_b{b}"] = {"feeds": {"pixel_values": _onnx_feed(x, "float32")},
                                         "output": pipe.logits(x).ravel().round(5).tolist()}
        if "sentence-embedding" in state.current["pipelines"]:
            pipe = state.loaded("sentence-embedding")
            for (n, length), batch in text_inputs().items():
                await pipe.fetch_rows(batch["input_ids"])
                cases[f"minilm_{n}x{length}"] = {"feeds": {k: _onnx_feed(v, "int64") for k, v in batch.items()},
                                                 "output": pipe.embed(batch).ravel().round(6).tolist()}
    return json.dumps({"device": state.current["device"], "cases": cases})


# --- YOLO (the bench page's YOLO section, web/bench-yolo.js) ---------------------------------
YOLO_TASKS = ("object-detection", "pose-estimation")
YOLO_CHECK_ANCHORS = 32             # the peer's output is checked at our best-scoring anchors


def yolo_input(image: np.ndarray, size: int) -> np.ndarray:
    """(1, 3, size, size) float32: `image` letterboxed to a square, the fixed shape of the peer's
    ONNX exports (ultralytics exports at imgsz x imgsz)."""
    from ..vision.detection import letterbox
    x, _ = letterbox(image, size=size, auto=False)
    return x[None]


def _yolo_cases(pixels, width, height, sizes):
    """(name, pipeline, input) per loaded YOLO model and size: name "<model>_<size>"."""
    image = np.ascontiguousarray(state.rgba(pixels, width, height)[..., :3])
    for task in YOLO_TASKS:
        if task in state.current["pipelines"]:
            pipe = state.loaded(task)
            for size in sizes:
                yield f"{pipe.entry.name}_{int(size)}", pipe, yolo_input(image, int(size))


def _yolo_forward(pipe, x: np.ndarray) -> np.ndarray:
    """The model's decoded head output (4 + nc + nk, anchors) on `x` (1, 3, h, w)."""
    return pipe.raw(x[0])


async def bench_yolo(pixels, width: int, height: int, sizes=(640, 320), repeat: int = 5) -> str:
    """Median network time (the model's forward, batch 1, no pre- or post-processing) of each
    loaded YOLO model at each square size, on an image from the page (RGBA pixels), on the
    current device: {"device", "cases": {"<model>_<size>": ms}}."""
    from ..bench import median_ms
    out = {}
    async with state.lock:
        for name, pipe, x in _yolo_cases(pixels, width, height, sizes):
            out[name] = round(median_ms(lambda pipe=pipe, x=x: _yolo_forward(pipe, x), int(repeat)), 2)
    return json.dumps({"device": state.current["device"], "cases": out})


async def bench_yolo_cases(pixels, width: int, height: int, sizes=(640, 320)) -> str:
    """The cases bench_yolo times, for the peer (ONNX Runtime Web, web/bench-ort.js) to run on the
    same inputs: per case its input as the ultralytics exports name it ("images": {"type", "dims",
    "base64"}) and, to check the peer's output, ours at our YOLO_CHECK_ANCHORS best anchors:
    {"anchors": [index...], "values": [[channel values of that anchor]...], "channels", "classes"}."""
    cases = {}
    async with state.lock:
        for name, pipe, x in _yolo_cases(pixels, width, height, sizes):
            raw = _yolo_forward(pipe, x)                         # (4 + nc + nk, anchors)
            classes = int(pipe.config["nc"])
            best = raw[4:4 + classes].max(0)
            anchors = np.argsort(-best, kind="stable")[:YOLO_CHECK_ANCHORS]
            cases[name] = {"feeds": {"images": _onnx_feed(x, "float32")},
                           "anchors": anchors.tolist(), "values": raw[:, anchors].T.round(4).tolist(),
                           "channels": int(raw.shape[0]), "classes": classes}
    return json.dumps({"device": state.current["device"], "cases": cases})


ENTRY_POINTS = (bench_digit, bench_image, bench_text, bench_threads, bench_peer_cases, bench_gemm, bench_ops, bench_qlinear, bench_llm,
                bench_structured,
                bench_llm_text, bench_llm_profile, bench_speech, bench_yolo, bench_yolo_cases)
