"""Small GGUF files for the tests of a model named by URL (engine.tasks.model_urls, the chat
card's "Open"): a header that says what the test needs, and tensors that make the file as large
as it must be for a header-only read to be told from a download."""
from __future__ import annotations

from pathlib import Path

import numpy as np

# the keys Config.from_gguf (models/llama.py) reads for a tiny qwen2 decoder
QWEN2_KEYS = {"embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 2, "block_count": 1,
              "feed_forward_length": 96, "context_length": 64, "vocab_size": 160}


def write_gguf(path: Path, arch: str, *, keys: dict | None = None, weight_bytes: int = 4 << 20,
               raw: dict | None = None) -> Path:
    """A GGUF of `arch` (general.architecture) with `keys` under "<arch>." (ints), one float32
    tensor of `weight_bytes` bytes, and `raw`: {name: (GGMLQuantizationType, rows, their blocks' bytes)}."""
    import gguf
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny {arch}")
    for key, value in (keys or {}).items():
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_tensor("token_embd.weight", np.arange(weight_bytes // 4, dtype=np.float32).reshape(-1, 256))
    for name, (kind, rows, data) in (raw or {}).items():
        writer.add_tensor(name, np.frombuffer(data, np.uint8).reshape(rows, -1), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
