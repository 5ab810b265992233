"""examples/pyscript.html, a page on another origin that uses the engine as a library: PyScript
and Pyodide from the site, the engine's wheel installed with micropip from the site, the models'
weights fetched from the site. It gives the numbers the same calls give natively, and asks
nothing of any origin but its own and the site's."""
from __future__ import annotations

import json
from urllib.parse import urlsplit

import numpy as np
import pytest

from tests.web.conftest import Session

# as in examples/pyscript.html
QUERY = "Who is eating?"
SENTENCES = ["A man is eating food.", "A cat sleeps on the sofa.", "Someone is having lunch.",
             "The stock market fell."]
STATUS = "[data-testid=status]"
FINISHED = (f"document.querySelector('{STATUS}').textContent.startsWith('done') || "
            "document.querySelector('.py-error') !== null")


@pytest.fixture(scope="module")
def native(site):
    """The same calls natively, on the same built site (a folder here, a URL in the page)."""
    import engine
    return (engine.pipeline("sentence-embedding", site=str(site)),
            engine.pipeline("image-classification", site=str(site)))


def origin(url: str) -> str:
    return urlsplit(url).netloc


def results(page, testid: str):
    return json.loads(page.get_attribute(f"[data-testid={testid}]", "data-json"))


# A browser without JavaScript Promise Integration, where Python cannot block on a fetch: Pyodide
# looks for these two to use it. The page's awaitable calls work there too.
WITHOUT_JSPI = "delete WebAssembly.Suspending; delete WebAssembly.promising;"

# (static host of the site, ?device=, the backend the page then runs on, JSPI). With no device
# the simd kernels load in such a page too (fetched from the site); webgpu on SwiftShader is
# taken only when asked for (it emulates a GPU on the CPU).
CASES = {"dev": ("dev", "", "simd", True), "nginx": ("nginx", "", "simd", True),
         "dev-webgpu": ("dev", "webgpu", "webgpu", True), "dev-without-jspi": ("dev", "", "simd", False)}


@pytest.mark.parametrize("host,device,backend,jspi", CASES.values(), ids=CASES.keys())
def test_a_pyscript_page_on_another_origin_gives_the_native_numbers(host, device, backend, jspi, request,
                                                                    other_origin, browser, native, site):
    served = request.getfixturevalue(f"{host}_server")
    assert origin(served.url) != origin(other_origin.url)
    s = Session(browser, other_origin.url)
    try:
        if not jspi:
            s.context.add_init_script(WITHOUT_JSPI)
        page = s.open(f"pyscript.html?site={served.url}&device={device}", ready=False)
        page.wait_for_function(FINISHED, timeout=300_000)
        error = page.query_selector(".py-error")
        assert error is None, error.text_content()
        assert page.evaluate("self.crossOriginIsolated") is False        # a plain third-party page
        assert page.text_content(STATUS) == f"done (backend: {backend}, {backend})"

        embed, classify = native
        ranking = results(page, "ranking")
        vectors = embed([QUERY, *SENTENCES])
        np.testing.assert_allclose(ranking["vectors"], vectors, atol=1e-5)
        scores = embed.similarity(vectors[:1], vectors[1:])[0]
        np.testing.assert_allclose(ranking["scores"], scores, atol=1e-5)
        assert ranking["order"] == [r["index"] for r in embed.rank(QUERY, SENTENCES)]

        top5 = results(page, "top5")
        want = classify((site / "samples" / "coffee.png").read_bytes(), top_k=5)
        assert [p["label"] for p in top5] == [w["label"] for w in want]
        np.testing.assert_allclose([p["score"] for p in top5], [w["score"] for w in want], atol=1e-4)

        # everything but the page itself came from the site: PyScript, Pyodide, the wheel, weights
        assert {origin(u) for u in s.requests if not u.startswith(("data:", "blob:"))} == \
            {origin(other_origin.url), origin(served.url)}
        fetched = [u for u in s.requests if origin(u) == origin(served.url)]
        wanted = ["pyscript/core.js", "pyodide/pyodide.mjs", "pyodide/engine.json", "pyodide/engine-",
                  "models/all-MiniLM-L6-v2/", "models/efficientnet_lite0/", "samples/coffee.png"]
        for part in wanted + (["kernels/engine_kernels."] if backend == "simd" else []):
            assert any(urlsplit(u).path.startswith("/" + part) for u in fetched), part
        assert s.console_errors == []
    finally:
        s.close()


def test_a_site_without_cors_headers_is_named_in_the_page(site, serve_folder, other_origin, browser):
    """The first thing a page on another origin loads from the site is PyScript: from a host that
    sends no CORS headers the browser refuses it, and the page says where and what to check."""
    served = serve_folder(site, cors=False)
    s = Session(browser, other_origin.url)
    try:
        page = s.open(f"pyscript.html?site={served.url}", ready=False)
        page.wait_for_function(f"document.querySelector('{STATUS}').textContent.startsWith('error')")
        text = page.text_content(STATUS)
        assert text.startswith(f"error: no PyScript from {served.url} (") and "sending CORS headers?" in text
        assert any("blocked by CORS policy" in e for e in s.console_errors), s.console_errors
    finally:
        s.close()
