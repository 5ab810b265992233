"""engine.pipeline(task, site=URL) and engine.pipeline_async in Pyodide, in our page's worker,
with the model from a site on another origin (the same build served on a second port, as any
CORS-enabled static host serves it): the vectors natively computed from the same build; the
blocking form through JSPI; and where Python cannot block (a synchronous call from JavaScript),
NeedsAwait naming the awaitable form, before anything is fetched."""
from __future__ import annotations

import numpy as np
import pytest

import engine
from tests.web.conftest import start_dev_server

TEXTS = ["A man is eating food.", "Someone is eating.", "The cat sleeps on the sofa."]
MODEL = "models/all-MiniLM-L6-v2/"


@pytest.fixture(scope="module")
def native_vectors(site):
    """The vectors natively, from the same build (its folder as the site)."""
    return engine.pipeline("sentence-embedding", site=site, device="numpy")(TEXTS)


@pytest.fixture(scope="module")
def other(site):
    """The site on a second origin, without isolation headers, as a plain CORS-enabled host serves it."""
    served = start_dev_server(site, isolation=False)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def page(page_session):
    return page_session


def _model_requests(s, base: str) -> list[str]:
    """The model's weights asked of `base` (the page itself warms its cards' manifests and small files)."""
    return [u for u in s.requests if u.startswith(base + MODEL) and u.endswith(".safetensors")]


def test_pipeline_async_from_another_origin_gives_the_native_vectors(page, other, native_vectors):
    got = page.run(f"""
emb = await engine.pipeline_async("sentence-embedding", site={other.url!r})
batch = await emb.prepare({TEXTS!r})              # the word rows these texts use, awaited
[emb.entry.name, emb.embed(batch).tolist(), sorted(emb.checkpoint.files), engine.runtime.site_url()]
""")
    name, vectors, files, page_site = got
    assert name == "all-MiniLM-L6-v2" and "tokenizer.json" in files
    np.testing.assert_allclose(np.array(vectors, np.float32), native_vectors, atol=2e-5)
    assert page_site == page.base_url                # the page's own site stays its default
    assert f"{other.url}registry.json" in page.requests
    assert _model_requests(page, other.url) and not _model_requests(page, page.base_url)
    assert not page.console_errors


def test_the_blocking_form_waits_through_jspi_and_says_to_await_where_it_cannot(page, other, native_vectors):
    got = page.run(f"""
from pyodide.code import run_js
from pyodide.ffi import can_run_sync, create_proxy
emb = engine.pipeline("sentence-embedding", site={other.url!r})     # entered asynchronously: JSPI blocks
vectors = emb({TEXTS!r})                                           # rows fetched as the texts need them
inside = {{}}

def from_javascript():
    inside["can_run_sync"] = can_run_sync()
    try:
        engine.pipeline("image-classification", site={other.url!r})
    except engine.errors.NeedsAwait as e:
        return "NeedsAwait: " + str(e)
    return "loaded"

call = create_proxy(from_javascript)
try:
    answer = run_js("(f) => f()")(call)                            # a synchronous JavaScript -> Python call
finally:
    call.destroy()
[vectors.tolist(), can_run_sync(), inside["can_run_sync"], answer]
""")
    vectors, outside, inside, answer = got
    np.testing.assert_allclose(np.array(vectors, np.float32), native_vectors, atol=2e-5)
    assert outside is True and inside is False
    assert answer.startswith("NeedsAwait: ") and "use `await engine.pipeline_async(...)` instead" in answer
    assert not [u for u in page.requests if u.startswith(other.url + "models/efficientnet_lite0/")]


def test_errors_name_the_site(page, other):
    got = page.run(f"""
answers = []
for site, model in (({other.url!r} + "nowhere/", None), ({other.url!r}, "no-such-model")):
    try:
        await engine.pipeline_async("sentence-embedding", site=site, model=model)
        answers.append("loaded")
    except engine.EngineError as e:
        answers.append(type(e).__name__ + ": " + str(e))
answers
""")
    assert got[0].startswith(f"SourceNotFound: no built site at {other.url}nowhere/: it has no registry.json")
    assert got[1].startswith(f"InputError: the site {other.url} does not serve the model 'no-such-model'; "
                             f"it serves: mnist_cnn (digit-classification)")


def test_weights_url_awaited_and_blocking(page, other, native_vectors):
    """weights=URL in Pyodide: the tensors by the awaitable loader, the tokenizer and configs from
    beside them, awaited (pipeline_async) or waited for through JSPI (pipeline)."""
    index = f"{other.url}{MODEL}model.safetensors.index.json"
    got = page.run(f"""
awaited = await engine.pipeline_async("sentence-embedding", weights={index!r})
blocking = engine.pipeline("sentence-embedding", weights={index!r})
[awaited({TEXTS!r}).tolist(), blocking({TEXTS!r}).tolist(), awaited.checkpoint.complete, sorted(awaited.checkpoint.files)]
""")
    awaited, blocking, complete, files = got
    np.testing.assert_allclose(np.array(awaited, np.float32), native_vectors, atol=2e-5)
    np.testing.assert_array_equal(np.array(blocking, np.float32), np.array(awaited, np.float32))
    assert complete and files == ["1_Pooling/config.json", "config.json", "sentence_bert_config.json", "tokenizer.json"]
