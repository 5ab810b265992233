"""A GGUF named by URL for the page (engine.tasks.model_urls): its header alone says its size,
architecture and tensor types, and refuses what the model code cannot run (an architecture not
in FAMILIES, a tensor type the engine does not compute with) before any weight is requested; a
file it accepts then loads from the header it kept, only its tensors fetched, with progress."""
from __future__ import annotations

import asyncio
import re
import shutil

import gguf
import pytest

from engine.errors import InputError, InvalidHeader, UnknownDtype
from engine.tasks import model_urls
from tests.io.conftest import http_server  # noqa: F401  (a fixture: the Range server)
from tests.tiny_gguf import QWEN2_KEYS, write_gguf

TASK = "text-generation"


def ranges(server) -> list[tuple[int, int]]:
    return [tuple(map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", r).groups())) for r in server.requests if r]


def test_an_unsupported_architecture_is_refused_from_its_header(http_server):
    path = write_gguf(http_server.root / "tiny-bert.gguf", "bert")            # 4 MiB of weights
    info = asyncio.run(model_urls.inspect(TASK, http_server.url("tiny-bert.gguf"), cache=False))
    assert info["architecture"] == "bert" and info["size"] == path.stat().st_size
    assert info["tensor_types"] == {"f32": 1} and info["chat_template"] is False
    assert "general.architecture is 'bert'; supported: llama, qwen2" in info["refused"]
    assert "tiny-bert.gguf" in info["refused"]
    assert max(end for _, end in ranges(http_server)) < 128 * 1024          # the header only
    with pytest.raises(InvalidHeader, match="general.architecture is 'bert'"):
        asyncio.run(model_urls.checkpoint(model_urls.entry_for(TASK, http_server.url("tiny-bert.gguf")),
                                          http_server.url("tiny-bert.gguf"), cache=False))
    assert max(end for _, end in ranges(http_server)) < 128 * 1024


def test_a_tensor_type_the_engine_cannot_compute_is_refused(http_server):
    write_gguf(http_server.root / "iq.gguf", "qwen2", keys=QWEN2_KEYS,
               raw={"blk.0.attn_q.weight": (gguf.GGMLQuantizationType.IQ2_XXS, 1, bytes(66))})
    info = asyncio.run(model_urls.inspect(TASK, http_server.url("iq.gguf"), cache=False))
    assert info["architecture"] == "qwen2" and info["tensor_types"] == {"f32": 1, "iq2_xxs": 1}
    assert "tensor type iq2_xxs is not supported" in info["refused"] and "blk.0.attn_q.weight" in info["refused"]
    entry = model_urls.entry_for(TASK, http_server.url("iq.gguf"))
    with pytest.raises(UnknownDtype, match="iq2_xxs"):
        asyncio.run(model_urls.checkpoint(entry, http_server.url("iq.gguf"), cache=False))


def test_weights_that_do_not_fit_the_heap_are_refused(tmp_path):
    import engine
    from engine.errors import ModelTooLarge
    path = write_gguf(tmp_path / "big.gguf", "qwen2", keys=QWEN2_KEYS)
    file = engine.load_gguf(path)
    entry = model_urls.entry_for(TASK, "https://example.org/big.gguf")
    model_urls.check(entry, file, path.stat().st_size, heap=(1 << 30, 100 << 20))
    with pytest.raises(ModelTooLarge, match="nothing was downloaded"):
        model_urls.check(entry, file, path.stat().st_size, heap=(16 << 20, 10 << 20))


def test_only_http_urls_name_a_model():
    with pytest.raises(InputError, match="http:// or https://"):
        model_urls.entry_for(TASK, "file:///etc/passwd")


@pytest.mark.slow
def test_a_supported_file_loads_from_the_header_it_kept(smollm2_gguf, http_server):
    shutil.copy(smollm2_gguf, http_server.root / "chat.gguf")
    url = http_server.url("chat.gguf")
    info = asyncio.run(model_urls.inspect(TASK, url, cache=False))
    assert info["refused"] is None and info["architecture"] == "llama" and info["chat_template"] is True
    assert info["tensor_types"]["q4_1"] > 0 and info["header_bytes"] < info["size"]
    header_requests = len(http_server.requests)
    seen = []
    checkpoint = asyncio.run(model_urls.checkpoint(model_urls.entry_for(TASK, url), url,
                                                   lambda loaded, total: seen.append((loaded, total)), cache=False))
    later = ranges(http_server)[header_requests:]
    assert later and all(start >= info["header_bytes"] for start, _ in later)      # tensors only, no header again
    assert seen[0] == (0, seen[-1][1]) and seen[-1][0] == seen[-1][1] > 0
    assert checkpoint.tensors.metadata["general.architecture"] == "llama" and checkpoint.complete
