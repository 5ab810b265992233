"""`python -m engine bench llm` and the bench page's chat benchmark: prefill and decode tokens/s
of SmolLM2-135M-Instruct per backend, against torch/transformers on the same GGUF natively.

The case is the one llama.cpp in WebAssembly (wllama) is measured on by the bench page: the
37-token chat prompt "What is the capital of France?", greedy, 128 new tokens (end-of-sequence
ignored). One untimed run first: it captures the decode graphs of every cache window the timed
runs use (engine.generation), as the peer's code is compiled before it is timed.
"""
from __future__ import annotations

import statistics
import time

from . import machine

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


def bench_pipeline(pipe, new_tokens: int = 128, repeat: int = 1) -> dict:
    """Prefill/decode tok/s and time to first token of a text-generation pipeline (median of
    `repeat` runs after one untimed run), end-of-sequence ignored."""
    from ..generation import GenerationConfig
    generator, ids = pipe.generator, pipe.prompt_ids(PROMPT)
    config = GenerationConfig(max_new_tokens=new_tokens)
    eos, generator.eos_ids = generator.eos_ids, set()
    runs = []
    try:
        for i in range(repeat + 1):
            generator.reset()
            started = time.perf_counter()
            count = sum(1 for _ in generator.tokens(ids, config))
            runs.append({**generator.stats, "wall_s": time.perf_counter() - started, "tokens": count})
    finally:
        generator.eos_ids = eos
        generator.reset()
    timed = runs[1:]

    def median(key):
        return round(statistics.median(r[key] for r in timed), 3)
    return {"prompt": pipe.template.render(PROMPT, add_generation_prompt=True), "prompt_tokens": len(ids),
            "new_tokens": new_tokens, "prefill_tok_s": median("prefill_tok_s"),
            "decode_tok_s": median("decode_tok_s"), "ttft_s": median("ttft_s"),
            "first_run": {k: round(runs[0][k], 3) for k in ("prefill_tok_s", "decode_tok_s", "ttft_s")},
            "graphs": generator.captured}


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
    if "decode_tok_s" in torch:
        lines.append(f"{'torch (' + str(torch['torch_threads']) + ' thr)':14} {torch['prefill_tok_s']:9.1f} "
                     f"{torch['decode_tok_s']:9.1f}")
    elif torch:
        lines.append(f"torch: {torch['error']}")
    return "\n".join(lines)
