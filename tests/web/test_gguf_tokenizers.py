"""GGUF tokenizers in Pyodide: in our page's worker, the engine from the built site reads the
header of Qwen2.5-Coder-0.5B-Instruct's and gemma-3-270m's GGUF from the site (one Range request
for the header and metadata, as the engine fetches it; no tensor) and tokenizes
tests/text/corpus.py (sent into the page as it is) with Tokenizer.from_gguf: the same ids as
natively from the same build (which tests/text/test_gguf_parity.py holds equal to transformers').
The time to build each tokenizer in Pyodide is reported."""
from __future__ import annotations

from pathlib import Path

import pytest

import engine
from engine.text import Tokenizer
from tests.text.corpus import corpus

MODELS = ["Qwen2.5-Coder-0.5B-Instruct", "gemma-3-270m"]
CORPUS_SOURCE = (Path(__file__).resolve().parents[1] / "text" / "corpus.py").read_text()


@pytest.fixture(scope="module")
def page(page_session):
    return page_session


@pytest.mark.parametrize("name", MODELS)
def test_corpus_ids_in_pyodide_equal_native(page, dev_server, site, name, capsys):
    folder = f"{dev_server.url}models/{name}/"
    with engine.site.load_gguf(site / "models" / name) as weights:
        native = Tokenizer.from_gguf(weights.metadata)
    texts = corpus()
    expected = [native.encode(text).ids for text in texts]
    got = page.run(f"""
import time
from engine.site.urls import folder_gguf
from engine.text import Tokenizer
namespace = {{}}
exec({CORPUS_SOURCE!r}, namespace)
texts = namespace["corpus"]()
weights = await folder_gguf({folder!r}, names=())
start = time.perf_counter()
tok = Tokenizer.from_gguf(weights.metadata)
built = time.perf_counter() - start
start = time.perf_counter()
ids = [tok.encode(text).ids for text in texts]
encoded = time.perf_counter() - start
[texts == {texts!r}, ids, built, encoded, len(texts)]
""")
    same_texts, ids, built, encoded, count = got
    assert same_texts and count == len(texts), "the corpus must be the same in Pyodide"
    wrong = [texts[i] for i in range(len(texts)) if ids[i] != expected[i]]
    assert not wrong, f"{len(wrong)} texts tokenize otherwise in Pyodide: {wrong[:10]!r}"
    gguf_requests = [r for r in page.responses if r.url.startswith(folder) and ".gguf" in r.url]
    assert gguf_requests and all("range" in r.request.all_headers() for r in gguf_requests), \
        [r.url for r in gguf_requests]
    with capsys.disabled():
        print(f"\n  {name} in Pyodide: tokenizer built in {built:.2f} s from the metadata; "
              f"{len(texts)} texts encoded in {encoded:.2f} s")
    assert not page.console_errors
