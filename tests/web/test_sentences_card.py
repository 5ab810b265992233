"""The Sentences card in headless Chromium: typed like a person, ranked as natively, downloading
only the word vectors it needs, cached across reloads; the worker's embeddings on every backend."""
from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tests.helpers import need
from tests.web.conftest import ROOT

QUERY = "[data-testid=sentences-query]"
LIST = "[data-testid=sentences-list]"
RANK = "[data-testid=sentences-rank]"
RANKING = "[data-testid=sentences-ranking] li"
CELLS = "[data-testid=sentences-heatmap] td"
ERROR = "[data-testid=sentences-error]"
MODEL = "/models/all-MiniLM-L6-v2/"

# line 3 is blank (ignored): the card names sentences by their line, the heatmap by their position
LINES = ["The new movie is awesome.", "A woman is playing the violin.", "It is raining heavily in the city.", "",
         "A man is eating food.", "The stock market crashed on Monday.", "Python makes programming enjoyable.",
         "Two teams are playing football.", "A monkey is riding a bicycle."]
SENTENCES = [line for line in LINES if line]
LINE_OF = [i for i, line in enumerate(LINES) if line]         # sentence position -> line index
# words the card's rankings above never use, so the worker fetches new rows for them
FRESH = ["Quantum chromodynamics describes the strong interaction.", "Zebras graze on the savanna.",
         "I forgot my umbrella at the bakery."]


@pytest.fixture(scope="module")
def native(site):
    """The native pipeline on the built site's own float16 weights."""
    import engine
    return engine.pipeline("sentence-embedding", weights=str(site / "models" / "all-MiniLM-L6-v2"))


def ranking(page, count: int):
    """[(line index, score, text)] of the card's ranking, once it has `count` entries."""
    page.wait_for_function(f"document.querySelectorAll('{RANKING}').length === {count}", timeout=120_000)
    return page.eval_on_selector_all(RANKING, "els => els.map(e => [+e.dataset.index, +e.dataset.score, "
                                              "e.querySelector('.text').textContent])")


def heatmap(page) -> np.ndarray:
    cells = page.eval_on_selector_all(CELLS, "els => els.map(e => [+e.dataset.row, +e.dataset.col, "
                                             "+e.dataset.value])")
    n = int(round(len(cells) ** 0.5))
    matrix = np.full((n, n), np.nan)
    for row, col, value in cells:
        matrix[row, col] = value
    return matrix


def model_responses(session):
    return [r for r in session.responses if MODEL in r.url]


def test_rank_like_a_person_equals_native(dev_server, session_factory, native):
    s = session_factory(dev_server.url)
    page = s.open()
    assert not model_responses(s), "the model loads only when its card opens"
    s.open_card("sentences")
    # count the card's requests to the worker: never two at once
    page.evaluate("""() => { const client = window.engineClient, python = client.python.bind(client);
        window.calls = { now: 0, max: 0, total: 0 };
        client.python = async (cmd, ...args) => {
            if (cmd !== "embed_texts") return python(cmd, ...args);
            calls.now++; calls.total++; calls.max = Math.max(calls.max, calls.now);
            try { return await python(cmd, ...args); } finally { calls.now--; } }; }""")
    page.fill(LIST, "\n".join(LINES))
    page.fill(QUERY, "")
    page.locator(QUERY).press_sequentially("Who is eating?")
    page.wait_for_timeout(400)
    assert page.evaluate("calls.total") == 0, "typing before the first ranking ranks nothing"
    page.click(RANK)

    got = ranking(page, len(SENTENCES))
    want = native.rank("Who is eating?", SENTENCES)
    assert got[0][2] == "A man is eating food." and got[0][0] == 4, got       # line 4: after the blank line
    assert [g[0] for g in got] == [LINE_OF[w["index"]] for w in want]
    assert [g[2] for g in got] == [w["text"] for w in want]
    np.testing.assert_allclose([g[1] for g in got], [w["score"] for w in want], atol=1e-5)

    vectors = native(SENTENCES)
    matrix = heatmap(page)
    assert matrix.shape == (len(SENTENCES),) * 2
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-5)
    np.testing.assert_allclose(matrix, native.similarity(vectors, vectors), atol=1e-5)
    labels = page.eval_on_selector_all("[data-testid=sentences-heatmap] thead th[scope=col]",
                                       "els => els.map(e => [e.textContent, e.title])")
    assert labels == [[str(line + 1), LINES[line]] for line in LINE_OF]

    assert float(page.text_content("[data-testid=sentences-time-ms]")) > 0
    assert page.text_content("[data-testid=sentences-backend]") == "simd"
    rows = page.text_content("[data-testid=sentences-rows]")
    assert rows.endswith(" of 30,522 word vectors downloaded") and int(rows.split()[0].replace(",", "")) > 0, rows
    assert page.is_hidden("[data-testid=sentences-truncated]") and page.is_hidden(ERROR)
    assert page.is_hidden("#sentences-progress")

    # after the first ranking, editing the query re-ranks by itself (debounced, one request at a time);
    # a key every 300 ms (past the debounce) lands while earlier rankings still run
    page.fill(QUERY, "")
    page.locator(QUERY).press_sequentially("rain?", delay=300)
    want = native.rank("rain?", SENTENCES)
    page.wait_for_function(f"""() => {{ const top = document.querySelector('{RANKING}');
        return top && Math.abs(+top.dataset.score - {want[0]['score']}) < 1e-5 && calls.now === 0; }}""",
                           timeout=30_000)
    got = ranking(page, len(SENTENCES))
    assert [g[0] for g in got] == [LINE_OF[w["index"]] for w in want]
    np.testing.assert_allclose([g[1] for g in got], [w["score"] for w in want], atol=1e-5)
    calls = page.evaluate("calls")
    assert calls["max"] == 1 and calls["total"] >= 2, calls
    widths = page.eval_on_selector_all(f"{RANKING} .bar", "els => els.map(e => parseFloat(e.style.width))")
    assert min(g[1] for g in got) < 0 and widths == [round(max(g[1], 0) * 100, 1) for g in got], (widths, got)
    assert s.foreign_requests() == [] and s.console_errors == []


def test_only_the_rows_needed_are_downloaded(dev_server, session_factory, site):
    s = session_factory(dev_server.url, viewport={"width": 390, "height": 844})       # on a phone
    page = s.open("index.html#sentences")
    page.click(RANK)                                     # the card's own sentences
    ranking(page, 8)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    fetched = {}
    for r in model_responses(s):
        if r.request.method == "GET" and r.ok:
            name = r.url.split(MODEL, 1)[1]
            fetched[name] = fetched.get(name, 0) + int(r.headers.get("content-length") or len(r.body()))
    rows_file = "model-rows-00001.safetensors"
    size = (site / "models" / "all-MiniLM-L6-v2" / rows_file).stat().st_size
    total = sum(fetched.values())
    print(f"\nall-MiniLM-L6-v2: {total:,} bytes fetched for the first ranking; word vectors "
          f"{fetched.get(rows_file, 0):,} of {size:,} bytes ({fetched.get(rows_file, 0) / size:.1%})")
    assert 0 < fetched.get(rows_file, 0) < 0.05 * size, fetched
    assert total <= 25_000_000, fetched
    rows = page.text_content("[data-testid=sentences-rows]")
    assert int(rows.split()[0].replace(",", "")) * 384 * 2 <= fetched[rows_file], (rows, fetched)


def test_reload_downloads_no_weight_bytes(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open("index.html#sentences")
    page.click(RANK)
    first = ranking(page, 8)
    assert [r for r in model_responses(s) if r.url.endswith(".safetensors")], "the first visit fetches weights"
    after = []
    s.context.on("request", lambda request: after.append(request))
    s.responses.clear()
    page.reload()
    s.wait_ready()
    page.click(RANK)
    assert ranking(page, 8) == first
    weights = [r.url for r in s.responses if "/models/" in r.url and r.url.endswith(".safetensors")]
    ranged = [r.url for r in after if "/models/" in r.url and "range" in r.all_headers()]
    assert any(MODEL in r.url for r in after), "the page asked for the model (its index) again"
    assert weights == [] and ranged == [], (weights, ranged)          # all from the Cache API
    assert s.console_errors == []


WORKER_BACKENDS = """
import engine
from engine.web import worker
pipe = worker.pipeline("sentence-embedding")
texts = {texts!r}
out = {{}}
for device in engine.available_devices():
    out[device] = pipe.to(device)(texts).tolist()      # rows not fetched yet: fetched through JSPI
pipe.to(worker._state["device"])
out
"""


def test_every_backend_equals_native_and_a_lost_gpu_falls_back(dev_server, session_factory, native):
    s = session_factory(dev_server.url)
    page = s.open("index.html?backend=webgpu#sentences")    # webgpu on SwiftShader: asked for, never picked
    page.click(RANK)
    got = ranking(page, 8)
    default = [line for line in page.input_value(LIST).split("\n") if line.strip()]
    want = native.rank(page.input_value(QUERY), default)
    np.testing.assert_allclose([g[1] for g in got], [w["score"] for w in want], atol=1e-5)
    on_gpu = page.text_content("[data-testid=sentences-backend]") == "webgpu"

    got = s.run(WORKER_BACKENDS.format(texts=FRESH))
    want = native(FRESH)
    errors = {device: float(np.abs(np.array(vectors) - want).max()) for device, vectors in got.items()}
    print(f"\nworst |browser - native| per backend: {errors}")
    # the same float32 arithmetic in another order: ~1e-7 on every backend, webgpu (SwiftShader) too
    assert errors["numpy"] <= 1e-5 and errors["simd"] <= 1e-5, errors
    need("webgpu" in errors and on_gpu, "no WebGPU adapter in this Chromium (SwiftShader)")
    assert errors["webgpu"] <= 1e-5, errors

    # the GPU goes away (as in a driver reset): the next ranking says so and runs on simd
    s.run("from engine.backends import webgpu\nwebgpu.device().destroy()")
    page.fill(QUERY, "Is it going to rain?")
    page.press(QUERY, "Enter")
    page.wait_for_function("document.querySelector('[data-testid=sentences-backend]').textContent === 'simd'",
                           timeout=60_000)
    got = ranking(page, 8)
    want = native.rank("Is it going to rain?", default)
    np.testing.assert_allclose([g[1] for g in got], [w["score"] for w in want], atol=1e-5)
    assert "was lost" in page.text_content("#backend-note") and page.is_visible("#backend-note")
    assert page.input_value("[data-testid=backend-select]") == "simd"
    assert s.console_errors == []


PIPELINES_WITHOUT_WEIGHTS = """
import base64
import engine
texts = {texts!r}
digit = base64.b64decode({digit!r})
emb = engine.pipeline("sentence-embedding")
clf = engine.pipeline("digit-classification")
[emb(texts).tolist(), emb.rank(texts[0], texts[1:]), clf(digit, top_k=3)]
"""


def test_pipelines_without_weights_in_pyodide_equal_native(dev_server, session_factory, native):
    """engine.pipeline(task) takes the site's copy in the browser, as natively the built or bundled one."""
    import engine
    digit = (ROOT / "samples" / "digits" / "7.png").read_bytes()
    texts = ["Who is eating?", *SENTENCES]
    s = session_factory(dev_server.url)
    s.open()
    vectors, ranked, digits = s.run(PIPELINES_WITHOUT_WEIGHTS.format(
        texts=texts, digit=base64.b64encode(digit).decode()))
    np.testing.assert_allclose(vectors, native(texts), atol=1e-5)
    want = native.rank(texts[0], texts[1:])
    assert [r["index"] for r in ranked] == [w["index"] for w in want]
    np.testing.assert_allclose([r["score"] for r in ranked], [w["score"] for w in want], atol=1e-5)
    want = engine.pipeline("digit-classification")(digit, top_k=3)
    assert [d["label"] for d in digits] == [w["label"] for w in want] and digits[0]["label"] == "7"
    np.testing.assert_allclose([d["score"] for d in digits], [w["score"] for w in want], atol=1e-5)
    assert s.console_errors == []


def error_shown(page, start: str) -> str:
    """The card's error text, once it starts with `start` (the previous one may still be there)."""
    page.wait_for_function(f"""() => {{ const box = document.querySelector('{ERROR}');
        return !box.hidden && box.textContent.startsWith({json.dumps(start)}); }}""")
    return page.text_content(ERROR)


def test_bad_input_and_worker_errors_show_in_the_card(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open()
    # the model cannot load (its manifest is missing): opening the card says so, and so does Rank
    s.context.route(f"**{MODEL}manifest.json", lambda route: route.fulfill(status=404, body="gone"))
    s.open_card("sentences")
    text = error_shown(page, "The model could not be loaded: SourceNotFound: not found (HTTP 404)")
    assert "all-MiniLM-L6-v2/manifest.json" in text, text
    page.fill(QUERY, "   ")
    page.click(RANK)
    error_shown(page, "Type a query")
    page.fill(QUERY, "Who is eating?")
    page.fill(LIST, "\n   \n\n")
    page.click(RANK)
    error_shown(page, "Add at least one sentence")
    page.fill(LIST, "\n".join(f"Sentence number {i}." for i in range(65)))
    page.click(RANK)
    assert "at most 64" in error_shown(page, "65 sentences is too many")

    # Rank tries the model again: the same error; once the host serves it, the same card works
    page.fill(LIST, "\n".join(SENTENCES))
    page.click(RANK)
    text = error_shown(page, "The model could not be loaded: SourceNotFound: not found (HTTP 404)")
    assert "all-MiniLM-L6-v2/manifest.json" in text, text
    assert page.eval_on_selector_all(RANKING, "els => els.length") == 0
    s.context.unroute(f"**{MODEL}manifest.json")
    page.press(QUERY, "Enter")                           # Enter in the query ranks too
    ranking(page, len(SENTENCES))
    assert page.is_hidden(ERROR)
    assert page.text_content("[data-testid=engine-status]") == "ready"
    assert s.console_errors == []


def test_sixty_four_sentences_then_a_long_one(dev_server, session_factory, native):
    s = session_factory(dev_server.url)
    page = s.open("index.html#sentences")
    lines = [f"Sentence {i} is about topic number {i}." for i in range(64)]       # the most it takes
    page.fill(LIST, "\n".join(lines))
    page.click(RANK)
    got = ranking(page, 64)
    assert page.eval_on_selector_all(CELLS, "els => els.length") == 64 * 64
    assert page.evaluate("document.documentElement.scrollWidth") <= 1200        # the heatmap scrolls inside
    want = {w["index"]: w["score"] for w in native.rank(page.input_value(QUERY), lines)}
    scores = [g[1] for g in got]                         # near-ties may order either way: compare by line
    assert scores == sorted(scores, reverse=True) and sorted(g[0] for g in got) == list(range(64))
    np.testing.assert_allclose(scores, [want[g[0]] for g in got], atol=1e-5)
    assert page.is_hidden("[data-testid=sentences-truncated]")

    # an edit after a ranking re-ranks by itself; a text past 256 tokens is cut, and the card says so
    long = " ".join(["The quick brown fox jumps over the lazy dog."] * 30)      # ~300 tokens
    page.fill(LIST, "\n".join(["A man is eating food.", long, "It is raining."]))
    ranking(page, 3)
    page.wait_for_selector("[data-testid=sentences-truncated]:not([hidden])")
    note = page.text_content("[data-testid=sentences-truncated]")
    assert note == "sentence 2 is longer than 256 tokens; only its start was used", note
    with pytest.warns(UserWarning, match="truncated"):
        want = native.rank(page.input_value(QUERY), ["A man is eating food.", long, "It is raining."])
    got = ranking(page, 3)
    np.testing.assert_allclose([g[1] for g in got], [w["score"] for w in want], atol=1e-5)
    assert s.console_errors == []
