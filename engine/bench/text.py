"""Text benchmarks: all-MiniLM-L6-v2 on the engine against torch + transformers in one run, and
the tokenizer's throughput. Times and ratios (engine / torch: below 1 the engine is faster),
never test assertions.
"""
from __future__ import annotations

import time

import numpy as np

from . import format_profile, machine, median_ms, profile

SHAPES = ((1, 128), (8, 128))           # (batch, tokens): the bench page's shapes
# real sentences of mixed length for the "sentences" case and the tokenizer's throughput
SENTENCES = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome, and the soundtrack by the orchestra is even better than the first one.",
    "Le chat dort sur le canapé près de la fenêtre pendant que la pluie tombe doucement.",
    "Der schnelle braune Fuchs springt über den faulen Hund, der in der Sonne schläft.",
    "Machine learning models that run in the browser keep the user's data on their own device.",
    "How do I bake bread at home without a bread machine, and how long should the dough rise?",
    "Quantum computers use qubits, which can be in a superposition of states, to solve problems.",
    "The stock market fell sharply today after the central bank raised interest rates again.",
]


def tokenizer_throughput(tokenizer, texts=SENTENCES, repeat: int = 5, max_length: int = 256) -> dict:
    """Throughput of the pipeline's tokenization (encode_batch_arrays: ids, masks, padding) on
    `texts`, warm: texts/s and tokens/s (padding not counted), median run."""
    texts = list(texts) * max(1, 256 // len(texts))
    tokens = int(tokenizer.encode_batch_arrays(texts, max_length=max_length)["attention_mask"].sum())
    ms = median_ms(lambda: tokenizer.encode_batch_arrays(texts, max_length=max_length), repeat)
    return {"texts": len(texts), "tokens": tokens, "texts_per_s": round(len(texts) / ms * 1e3),
            "tokens_per_s": round(tokens / ms * 1e3)}


def _torch_minilm(pipe):
    """transformers' BertModel with the pipeline's own weights (widened to float32), or None."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    c = pipe.config
    config = transformers.BertConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size,
                                     num_hidden_layers=c.num_hidden_layers,
                                     num_attention_heads=c.num_attention_heads,
                                     intermediate_size=c.intermediate_size,
                                     max_position_embeddings=c.max_position_embeddings,
                                     type_vocab_size=c.type_vocab_size, layer_norm_eps=c.layer_norm_eps)
    net = transformers.BertModel(config, add_pooling_layer=False).eval()
    state = {name: torch.from_numpy(np.ascontiguousarray(t.numpy()))
             for name, t in pipe.model.state_dict().items()}
    net.load_state_dict(state, strict=False)
    return torch, net


def _torch_embed(torch, net, batch):
    with torch.no_grad():
        ids = {k: torch.from_numpy(v) for k, v in batch.items()}
        hidden = net(**ids).last_hidden_state
        mask = ids["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def bench_minilm(repeat: int = 10, device: str | None = None, weights=None, shapes=SHAPES,
                 with_profile: bool = False) -> dict:
    """Sentence embeddings (encoder, mean pooling, normalisation) at (batch, tokens) = `shapes` and on
    SENTENCES, on `device` (None: every available backend) and on torch, same token ids, one run."""
    from ..device import auto_selectable, describe, known
    from ..tasks import pipeline

    # every backend worth using here (not a CPU emulation of a GPU, unless asked for by name)
    devices = [device] if device else [d for d in known() if auto_selectable(d)]
    pipe = pipeline("sentence-embedding", device=devices[0], weights=weights)
    reference = _torch_minilm(pipe)
    rng = np.random.default_rng(0)
    inputs = {}
    for n, length in shapes:
        ids = rng.integers(1000, pipe.config.vocab_size, (n, length))
        ids[:, 0], ids[:, -1] = 101, 102                       # [CLS] ... [SEP]
        inputs[f"{n}x{length}"] = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                                   "token_type_ids": np.zeros_like(ids)}
    inputs[f"{len(SENTENCES)} sentences"] = pipe.tokenize(SENTENCES)
    cases = []
    for name, batch in inputs.items():
        torch_ms = None
        if reference is not None:
            torch_ms = median_ms(lambda: _torch_embed(*reference, batch), repeat)
        for dev in devices:
            pipe.to(dev)
            engine_ms = median_ms(lambda: pipe.embed(batch), repeat)
            case = {"input": name, "device": dev, "engine_ms": round(engine_ms, 2)}
            if torch_ms is not None:
                case.update(torch_ms=round(torch_ms, 2), ratio=round(engine_ms / torch_ms, 2))
            cases.append(case)
    if with_profile:                                   # the first shape on the first device
        pipe.to(devices[0])
        batch = next(iter(inputs.values()))
        info_profile = profile(None, None, devices[0], forward=lambda: pipe.embed(batch))
    t0 = time.perf_counter()
    tokenizer = tokenizer_throughput(pipe.tokenizer)
    info = {"model": "all-MiniLM-L6-v2", "devices": devices, "adapters": {d: describe(d) for d in devices},
            "repeat": repeat, "machine": machine(), "numpy": np.__version__, "cases": cases,
            "tokenizer": tokenizer, "tokenizer_s": round(time.perf_counter() - t0, 2)}
    if reference is not None:
        info["torch"] = f"{reference[0].__version__} ({reference[0].get_num_threads()} threads)"
    else:
        info["torch"] = "not installed: engine times only"
    if with_profile:
        info["profile"] = info_profile
    return info


def format_minilm(result: dict) -> str:
    lines = [f"{result['model']} ({result['machine']}, NumPy {result['numpy']}); torch {result['torch']}; "
             f"median of {result['repeat']} runs",
             f"{'input':>14} {'device':>8} {'engine ms':>10} {'torch ms':>10} {'engine/torch':>13}"]
    for c in result["cases"]:
        lines.append(f"{c['input']:>14} {c['device']:>8} {c['engine_ms']:>10.2f} "
                     f"{c.get('torch_ms', float('nan')):>10.2f} {c.get('ratio', float('nan')):>12.2f}x")
    t = result["tokenizer"]
    lines.append(f"tokenizer: {t['tokens_per_s']:,} tokens/s, {t['texts_per_s']:,} texts/s "
                 f"({t['texts']} texts, {t['tokens']} tokens)")
    if "profile" in result:
        lines += format_profile(result["profile"], f"{result['cases'][0]['input']} ({result['devices'][0]})")
    return "\n".join(lines)
