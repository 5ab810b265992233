"""`python -m engine bench llm` and the bench page's chat benchmark: prefill and decode tokens/s
of SmolLM2-135M-Instruct per backend, against torch/transformers on the same GGUF natively.

The case is the one llama.cpp in WebAssembly (wllama) is measured on by the bench page: the
37-token chat prompt "What is the capital of France?", greedy, 128 new tokens (end-of-sequence
ignored). One untimed run first: it captures the decode graphs of every cache window the timed
runs use (engine.generation), as the peer's code is compiled before it is timed.

The plain-text case (bench_text, bench_torch_text, profile_text) runs any text-generation model,
base or chat: TEXT_PROMPT continued greedy. The bench page runs it beside wllama
(bench.html?llm=<model>&peer=1&threads=1,2), scripts/bench_llm.py natively beside transformers
and llama-cpp-python, and drives the page for the browser half.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from ..sampler import TRAFFIC
from . import machine

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]

# The plain-text case (any model, base or chat, no template): ~200 tokens of prose to continue,
# greedy, 128 new tokens, end-of-sequence ignored. The bench page runs it on ours and on llama.cpp
# in WebAssembly (wllama) on the same GGUF (bench.html?llm=<model>&peer=1); scripts/bench_llm.py
# natively, beside transformers and llama-cpp-python.
TEXT_PROMPT = (
    "The history of the printing press begins long before Johannes Gutenberg set up his workshop in Mainz. "
    "Craftsmen in China carved whole pages into wooden blocks as early as the seventh century, and by the "
    "eleventh century Bi Sheng had made movable characters out of baked clay. Korean printers later cast type "
    "in bronze, and in 1377 they produced a collection of Buddhist teachings that is still kept in Paris today. "
    "What Gutenberg added around 1450 was a system: a hand mould that cast letters quickly and to exact sizes, "
    "an alloy of lead, tin and antimony that cooled fast and wore slowly, an oil-based ink that stuck to metal, "
    "and a screw press adapted from the ones used to make wine and olive oil. Together these made it possible to "
    "print hundreds of identical copies of a book in the time a scribe needed for one. Within fifty years, "
    "presses were running in more than two hundred European cities, and millions of volumes had been printed. "
    "The consequences reached far beyond the workshop. Scholars could compare the same text across countries, "
    "merchants could spread prices and news, and"
)


def _runs(pipe, ids: list[int], new_tokens: int, repeat: int, warmup: bool = True) -> tuple[list[dict], list[int]]:
    """Greedy generation of `new_tokens` after `ids` (end-of-sequence ignored), one untimed run
    first when `warmup`, then `repeat` timed ones, each from an empty cache: (the timed runs'
    generator stats, the ids the last run generated)."""
    from ..generation import GenerationConfig
    generator = pipe.generator
    config = GenerationConfig(max_new_tokens=new_tokens)
    eos, generator.eos_ids = generator.eos_ids, set()
    runs, out = [], []
    try:
        for i in range(repeat + int(warmup)):
            generator.reset()
            started = time.perf_counter()
            out = list(generator.tokens(ids, config))
            runs.append({**generator.stats, "wall_s": time.perf_counter() - started, "tokens": len(out)})
    finally:
        generator.eos_ids = eos
        generator.reset()
    return runs, out


def replay_split(pipe, repeat: int = 50) -> dict | None:
    """Where a replayed decode step's time goes (the graph the last run captured, replayed
    `repeat` times on the cache's current contents): in the C kernels (the steps' programs, one
    crossing each: wasm_kernels/program.c, ctypes included) and outside them (everything else the
    replay runs: copying the inputs in, NumPy steps, the Python loop). None where nothing replays."""
    from ..backends.simd.program import Program
    from ..device import get_backend
    steps = pipe.generator.steps
    if not steps.captured or get_backend(pipe.device).storage != "numpy":   # a device: device_step says it
        return None
    graph = next(iter(steps.graphs.values()))
    calls, inside = list(graph.calls), [0.0]

    def timed(call):
        def run():
            started = time.perf_counter()
            call()
            inside[0] += time.perf_counter() - started
        return run
    values = [np.zeros(shape, np.int64) for shape in graph.shapes]
    graph.replay(*values)
    graph.calls = [timed(c) if isinstance(c, Program) else c for c in calls]
    try:
        started = time.perf_counter()
        for _ in range(repeat):
            graph.replay(*values)
        total = (time.perf_counter() - started) / repeat
    finally:
        graph.calls = calls
    kernels = inside[0] / repeat
    return {"step_ms": round(total * 1e3, 3), "kernels_ms": round(kernels * 1e3, 3),
            "outside_ms": round((total - kernels) * 1e3, 3), "outside_share": round(1 - kernels / total, 4),
            "ops": graph.ops, "calls": len(calls), "programs": sum(isinstance(c, Program) for c in calls)}


def bench_pipeline(pipe, new_tokens: int = 128, repeat: int = 1) -> dict:
    """Prefill/decode tok/s and time to first token of a text-generation pipeline (median of
    `repeat` runs after one untimed run), end-of-sequence ignored."""
    ids = pipe.prompt_ids(PROMPT)
    runs, _ = _runs(pipe, ids, new_tokens, repeat)
    generator, timed = pipe.generator, runs[1:]

    def median(key):
        return round(statistics.median(r[key] for r in timed), 3)
    return {"prompt": pipe.template.render(PROMPT, add_generation_prompt=True), "prompt_tokens": len(ids),
            "new_tokens": new_tokens, "prefill_tok_s": median("prefill_tok_s"),
            "decode_tok_s": median("decode_tok_s"), "ttft_s": median("ttft_s"),
            "first_run": {k: round(runs[0][k], 3) for k in ("prefill_tok_s", "decode_tok_s", "ttft_s")},
            "graphs": generator.captured, "replay": replay_split(pipe) if generator.captured else None,
            "device_step": device_step(generator.stats)}


def device_step(stats: dict) -> dict | None:
    """On a device (webgpu): a decode step's submissions, bytes read back and kernels recorded
    from Python, averaged over the last run's steps (engine.generation's stats); None elsewhere."""
    if "submits_per_step" not in stats:
        return None
    return {"selected_on_device": stats.get("selected_on_device", False),
            **{k: round(stats[f"{k}_per_step"], 3) for k in TRAFFIC}}


def format_device_step(name: str, step: dict | None) -> list[str]:
    """One line for a device's decode step traffic (device_step), or none."""
    if not step:
        return []
    where = "on the device" if step.get("selected_on_device", True) else "on the host"
    return [f"{name} per decode step: {step['submits']:g} submission(s), {step['read_bytes']:g} bytes read back, "
            f"{step['recorded']:g} kernels recorded from Python, {step['calls']:g} calls into WebGPU (in a page, "
            f"bridge crossings; token chosen {where})"]


def bench_text(pipe, prompt: str = TEXT_PROMPT, new_tokens: int = 128, repeat: int = 1, warmup: bool = True) -> dict:
    """The plain-text case on a text-generation pipeline (any model, no chat template): `prompt`
    tokenized as the file says (its BOS), greedy, `new_tokens` new ones (end-of-sequence ignored),
    median prefill/decode tok/s of `repeat` runs after one untimed run (`warmup`), and the last
    run's ids and text (to set beside a peer's greedy answer)."""
    ids = pipe.tokenizer.encode(prompt).ids
    runs, out = _runs(pipe, ids, new_tokens, repeat, warmup)
    timed = runs[int(warmup):]

    def median(key):
        return round(statistics.median(r[key] for r in timed), 3)
    return {"model": pipe.entry.name, "prompt_tokens": len(ids), "new_tokens": len(out),
            "prefill_tok_s": median("prefill_tok_s"), "decode_tok_s": median("decode_tok_s"),
            "ttft_s": median("ttft_s"), "runs": [{k: round(r[k], 3) for k in ("prefill_tok_s", "decode_tok_s")} for r in runs],
            "warmup": warmup, "ids": out, "text": pipe.tokenizer.decode(out, skip_special_tokens=True),
            "graphs": pipe.generator.captured}


def profile_text(pipe, ids: list[int], top: int = 12) -> dict:
    """Where ours spends a prefill chunk (the prompt's first 128 tokens) and one eager decode step
    after the whole prompt, per kernel (engine.bench.profile: a sync after each op; quantized
    products by GGML type and shape), at the kernels' current thread count: {"prefill": table
    lines, "decode": table lines}, the `top` rows of each."""
    from . import format_profile, profile
    gen = pipe.generator
    chunk = ids[:gen.prefill_chunk]
    out = {}
    enabled, gen.steps.enabled = gen.steps.enabled, False      # eager steps: the kernels show
    try:
        def prefill():
            gen.reset()
            gen._forward(chunk)
        out["prefill"] = format_profile(profile(pipe.model, None, pipe.device, repeat=1, forward=prefill),
                                        f"{len(chunk)}-token prefill chunk")[:top + 2]
        gen.reset()
        gen._prefill(ids)
        length = gen.cache.length

        def step():
            gen.cache.truncate(length)
            gen._forward([ids[-1]])
        out["decode"] = format_profile(profile(pipe.model, None, pipe.device, repeat=3, forward=step),
                                       "decode step (eager)")[:top + 2]
    finally:
        gen.steps.enabled = enabled
        gen.reset()
    return out


def bench_torch_text(path, prompt: str = TEXT_PROMPT, new_tokens: int = 128, repeat: int = 1) -> dict:
    """transformers on the same GGUF (dequantized to float32) on the plain-text case: our
    tokenizer's ids of `prompt` (the same ids ours runs), greedy with its KV cache; prefill = one
    forward over the prompt (the last position's logits only, as generate() and ours compute them:
    a 262k-token vocabulary's head over every position would cost more than the layers), decode =
    the rest of generate() over the tokens after the first."""
    from pathlib import Path

    import torch
    import transformers

    from ..site import load_gguf
    from ..text import Tokenizer
    transformers.utils.logging.disable_progress_bar()
    path = Path(path)
    with load_gguf(path) as weights:
        tokenizer = Tokenizer.from_gguf(weights.metadata)
    ids = torch.tensor([tokenizer.encode(prompt).ids])
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              local_files_only=True, dtype=torch.float32).eval()
    prefill, decode, out = [], [], None
    with torch.no_grad():
        for i in range(repeat + 1):
            start = time.perf_counter()
            model(ids, logits_to_keep=1)
            t_prefill = time.perf_counter() - start
            start = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False)
            total = time.perf_counter() - start
            if i:
                prefill.append(ids.shape[1] / t_prefill)
                decode.append((new_tokens - 1) / max(total - t_prefill, 1e-9))
    new = out[0, ids.shape[1]:].tolist()
    return {"prompt_tokens": int(ids.shape[1]), "new_tokens": new_tokens, "torch_threads": torch.get_num_threads(),
            "prefill_tok_s": round(statistics.median(prefill), 3), "decode_tok_s": round(statistics.median(decode), 3),
            "ids": new, "text": tokenizer.decode(new, skip_special_tokens=True)}


def bench_torch(path, new_tokens: int = 128, repeat: int = 1) -> dict:
    """transformers' LlamaForCausalLM on the same GGUF (dequantized to float32 by transformers),
    the same prompt, greedy with its KV cache; prefill = one forward over the prompt."""
    from pathlib import Path

    import torch
    import transformers

    from ..site import load_gguf
    from ..text import Tokenizer
    transformers.utils.logging.disable_progress_bar()
    path = Path(path)
    with load_gguf(path) as weights:
        tokenizer = Tokenizer.from_gguf(weights.metadata)
    text = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False).ids])
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              local_files_only=True, dtype=torch.float32).eval()
    prefill, decode = [], []
    with torch.no_grad():
        for i in range(repeat + 1):
            start = time.perf_counter()
            model(ids)
            t_prefill = time.perf_counter() - start
            start = time.perf_counter()
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            total = time.perf_counter() - start
            if i:
                prefill.append(ids.shape[1] / t_prefill)
                decode.append((new_tokens - 1) / max(total - t_prefill, 1e-9))
    return {"prompt_tokens": int(ids.shape[1]), "new_tokens": new_tokens, "torch_threads": torch.get_num_threads(),
            "prefill_tok_s": round(statistics.median(prefill), 3), "decode_tok_s": round(statistics.median(decode), 3)}


def bench_llm(devices, weights=None, new_tokens: int = 128, repeat: int = 1, torch: bool = True) -> dict:
    """{"engine": {device: bench_pipeline}, "torch": bench_torch | {"error"}} in one run."""
    from .. import registry
    from ..tasks import pipeline
    entry = registry.for_task("text-generation")
    path = weights or registry.default_location(entry)
    result = {"model": entry.name, "machine": machine(), "engine": {}}
    for device in devices:
        pipe = pipeline("text-generation", device=device, weights=path, capacity=512)
        result["engine"][device] = bench_pipeline(pipe, new_tokens, repeat)
    if torch:
        try:
            result["torch"] = bench_torch(path, new_tokens, repeat)
        except ImportError as e:
            result["torch"] = {"error": f"torch/transformers not installed ({e})"}
    return result


def format_llm(result: dict) -> str:
    lines = [f"{result['model']}: 37-token chat prompt, greedy, {next(iter(result['engine'].values()))['new_tokens']} "
             f"new tokens (tokens/s, median after a warm-up run; {result.get('machine', '')})",
             f"{'':14} {'prefill':>9} {'decode':>9} {'first token':>12}"]
    torch = result.get("torch", {})
    for device, r in result["engine"].items():
        ratio = f"  decode {r['decode_tok_s'] / torch['decode_tok_s']:.2f}x torch" if "decode_tok_s" in torch else ""
        lines.append(f"{device:14} {r['prefill_tok_s']:9.1f} {r['decode_tok_s']:9.1f} {r['ttft_s'] * 1e3:9.0f} ms"
                     + ratio)
    for device, r in result["engine"].items():
        lines += format_device_step(device, r.get("device_step"))
        split = r.get("replay")
        if split:
            lines.append(f"{device} decode step replayed: {split['step_ms']:.2f} ms, {split['ops']} kernels in "
                         f"{split['calls']} calls ({split['programs']} C programs); outside the kernels "
                         f"{split['outside_ms']:.2f} ms ({100 * split['outside_share']:.1f}%)")
    if "decode_tok_s" in torch:
        lines.append(f"{'torch (' + str(torch['torch_threads']) + ' thr)':14} {torch['prefill_tok_s']:9.1f} "
                     f"{torch['decode_tok_s']:9.1f}")
    elif torch:
        lines.append(f"torch: {torch['error']}")
    return "\n".join(lines)
