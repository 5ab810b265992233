"""engine.pipeline(task, model=FILE or URL): weights the registry does not list run as the task's
registered models do (engine.registry.for_file), named after the file; a registry name still
means the registry's model, and naming the weights twice is an error."""
from __future__ import annotations

import shutil

import pytest

import engine
from engine import registry
from engine.errors import InputError
from tests.io.conftest import http_server  # noqa: F401  (a fixture: the Range server)


def test_names_a_file_tells_files_and_urls_from_registry_names(tmp_path):
    assert not registry.names_a_file("SmolLM2-135M-Instruct")
    assert not registry.names_a_file("Qwen2.5-Coder-0.5B-Instruct")     # dots, yet a registry name
    assert registry.names_a_file("https://example.org/models/qwen2.5-0.5b-instruct-q4_k_m.gguf")
    assert registry.names_a_file("model.gguf") and registry.names_a_file("some/folder/model")
    (tmp_path / "plain").write_bytes(b"")
    assert registry.names_a_file(str(tmp_path / "plain"))


def test_for_file_runs_as_the_tasks_model_under_the_files_name():
    entry = registry.for_file("text-generation", "https://example.org/a/b/My%20Model-Q4_K_M.gguf?download=1")
    base = registry.for_task("text-generation")
    assert entry.name == "My Model-Q4_K_M.gguf" and entry.filename == entry.name
    assert entry.load is base.load and entry.pipeline == base.pipeline and entry.tasks == base.tasks
    assert entry.site_format == "gguf" and entry.license == "" and entry.sha256 == ""
    assert entry.source("weights").files["weights"].startswith("https://example.org/")
    assert entry.title.endswith("· My Model-Q4_K_M.gguf")


def test_a_gguf_file_named_as_the_model(smollm2_gguf, tmp_path):
    copy = tmp_path / "my-chat-model.gguf"
    shutil.copy(smollm2_gguf, copy)
    chat = engine.pipeline("text-generation", model=str(copy), capacity=64)
    assert chat.entry.name == "my-chat-model.gguf"
    reference = engine.pipeline("text-generation", weights=str(smollm2_gguf), capacity=64)
    prompt = "The capital of France is"
    assert chat(prompt, max_new_tokens=6) == reference(prompt, max_new_tokens=6)
    with pytest.raises(InputError, match="names the weights already"):
        engine.pipeline("text-generation", model=str(copy), weights=str(copy))


def test_a_gguf_url_named_as_the_model(smollm2_gguf, http_server):
    shutil.copy(smollm2_gguf, http_server.root / "chat.gguf")
    chat = engine.pipeline("text-generation", model=http_server.url("chat.gguf"), capacity=64)
    assert chat.entry.name == "chat.gguf"
    assert chat("Hello", max_new_tokens=3)
