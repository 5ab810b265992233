"""dist/lab/: JupyterLite on the site's Pyodide with the engine preinstalled (buildtools/lab.py). The
tour (notebooks/tour.ipynb) runs top to bottom from the menu, as a person would run it, with no
error in any cell, the answers the same calls give natively, and no request to another origin."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.web.conftest import Session

TOUR = "lab/lab/index.html?path=tour.ipynb"
CODE_CELLS = ".jp-Notebook .jp-CodeCell"
# every code cell has run: its prompt holds an execution count, and the kernel is idle
FINISHED = f"""() => {{
    const prompts = [...document.querySelectorAll("{CODE_CELLS} .jp-InputArea-prompt")];
    return prompts.length > 0 && prompts.every((p) => /\\[\\d+\\]/.test(p.textContent))
        && document.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']") !== null;
}}"""
# the tour's cells, in order (notebooks/tour.ipynb)
SETUP, DIGITS, PHOTO, SENTENCES, CHAT, SPEECH, DETECTION = range(7)
# as in the tour
QUERY = "Who is eating?"
CANDIDATES = ["A man is eating food.", "A cat sleeps on the sofa.", "Someone has a meal.", "The train leaves at noon."]


def tour_cells() -> list[str]:
    from tests.web.conftest import ROOT
    notebook = json.loads((ROOT / "notebooks" / "tour.ipynb").read_text())
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


def outputs_of(page) -> list[str]:
    return [cell.inner_text() for cell in page.locator(f"{CODE_CELLS} .jp-OutputArea").all()]


def run_all_cells(s: Session, timeout: float = 240_000) -> list[str]:
    """Run → Run All Cells, then each code cell's output text once every cell has run."""
    page = s.page
    # the notebook open, its kernel started (the toolbar's indicator), and the notebook the current
    # widget (a click in its first cell): before that the menu's Run All Cells does nothing
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    page.locator(f"{CODE_CELLS} .jp-InputArea-prompt").first.click()
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel:text-is('Run All Cells')")
    try:
        page.wait_for_function(FINISHED, timeout=timeout)
    except Exception as e:             # say where it stopped
        prompts = page.locator(f"{CODE_CELLS} .jp-InputArea-prompt").all_inner_texts()
        raise AssertionError(f"the cells did not all run: {prompts}, outputs {outputs_of(page)}, "
                             f"console errors {s.console_errors}") from e
    return outputs_of(page)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def native(site):
    """What the tour's calls give natively, on the same built site."""
    import engine
    digits = json.loads((site / "lab" / "files" / "mnist-digits.json").read_text())
    images = [np.array(image, np.uint8).reshape(28, 28) for image in digits["images"]]
    read = [top[0]["label"] for top in engine.pipeline("digit-classification", site=str(site))(images, top_k=1)]
    photo = engine.pipeline("image-classification", site=str(site))((site / "samples" / "coffee.png").read_bytes(),
                                                                     top_k=3)
    ranking = engine.pipeline("sentence-embedding", site=str(site)).rank(QUERY, CANDIDATES)
    return {"digits": list(zip(digits["labels"], read)), "photo": photo, "ranking": ranking}


# A browser without JavaScript Promise Integration (Safari, Firefox today), where the kernel cannot
# block on a fetch: Pyodide looks for these two, in the kernel's worker (its script, patched on the
# way). The tour's awaited calls need neither.
WITHOUT_JSPI = "delete WebAssembly.Suspending; delete WebAssembly.promising;\n"
KERNEL_WORKER = "**/pyodide-kernel-extension/static/620.*.js*"       # the worker of an isolated page


def without_jspi(route):
    response = route.fetch()
    route.fulfill(response=response, body=WITHOUT_JSPI + response.text())


@pytest.mark.parametrize("jspi", [True, False], ids=["jspi", "without-jspi"])
def test_the_tour_runs_top_to_bottom_with_the_native_answers(jspi, dev_server, browser, native):
    assert "site=SITE" in tour_cells()[PHOTO]             # the cells this test reads are the tour's
    s = Session(browser, dev_server.url)
    try:
        if jspi:
            # from the site's page first, as a visitor comes: its service worker then controls the site
            s.open()
            s.page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=120_000)
        else:
            patched = []
            s.context.route(KERNEL_WORKER, lambda route: (patched.append(route.request.url), without_jspi(route)))
        s.open(TOUR, ready=False)
        outputs = run_all_cells(s)
        errors = s.page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        assert errors.count() == 0, errors.all_inner_texts()
        assert len(outputs) == len(tour_cells()) == 7, outputs

        assert outputs[SETUP].startswith("engine ") and dev_server.url in outputs[SETUP]
        read = [re.fullmatch(r"digit (\d): read as (\d) \(.*\)", line).groups() for line in lines(outputs[DIGITS])]
        assert [(int(label), answer) for label, answer in read] == native["digits"]
        photo = [line.split(None, 1) for line in lines(outputs[PHOTO])]
        assert [label for _, label in photo] == [top["label"] for top in native["photo"]]
        np.testing.assert_allclose([float(score) for score, _ in photo], [top["score"] for top in native["photo"]],
                                   atol=1e-3)
        ranked = [line.split(None, 1) for line in lines(outputs[SENTENCES])[:len(CANDIDATES)]]
        assert [text for _, text in ranked] == [hit["text"] for hit in native["ranking"]]
        np.testing.assert_allclose([float(score) for score, _ in ranked], [hit["score"] for hit in native["ranking"]],
                                   atol=1e-3)
        assert lines(outputs[SENTENCES])[-1] == "vectors: (4, 384) float32"
        # greedy decoding: the answer transformers gives too (tests/models/test_llama_smollm2.py)
        assert lines(outputs[CHAT])[0] == "The capital of France is Paris."
        assert lines(outputs[SPEECH])[0].startswith("Four score and seven years ago")
        assert {line.split()[1] for line in lines(outputs[DETECTION])} >= {"bus", "person"}

        assert lines(outputs[SETUP])[-1].endswith(f"(JSPI): {jspi}")
        if not jspi:
            assert len(patched) == 1
        assert s.foreign_requests() == []
        assert not [r.url for r in s.responses if r.status >= 400], "failed requests"
    finally:
        s.close()
