"""The photo card in headless Chromium: upload, drop, paste, samples; same answers as natively."""
from __future__ import annotations

import json

import pytest

TOP5 = "[data-testid=image-top5] li"


@pytest.fixture(scope="module")
def native(site):
    """The native pipeline on the site's own converted weights."""
    import engine
    folder = site / "models" / "efficientnet_lite0"
    return engine.pipeline("image-classification", weights=str(folder / "model.safetensors.index.json"))


def browser_top5(page):
    page.wait_for_function(f"document.querySelectorAll('{TOP5}').length === 5", timeout=180_000)
    return page.eval_on_selector_all(TOP5, "els => els.map(e => [e.dataset.label, +e.dataset.index, "
                                           "+e.dataset.score])")


def samples(site):
    return json.loads((site / "samples" / "samples.json").read_text())


def test_upload_samples_top5_equals_native(dev_server, session_factory, native, site):
    s = session_factory(dev_server.url)
    page = s.open()
    assert not [u for u in s.requests if "efficientnet" in u], "weights load only when the card opens"
    s.open_card("photo")
    for sample in samples(site):
        path = site / "samples" / sample["file"]
        page.set_input_files("[data-testid=image-input]", str(path))
        got = browser_top5(page)
        want = native(str(path), top_k=5)
        assert [g[1] for g in got] == [w["index"] for w in want], (sample["file"], got, want)
        assert [g[0] for g in got] == [w["label"] for w in want]
        for g, w in zip(got, want):
            assert abs(g[2] - w["score"]) < 0.02, (sample["file"], g, w)
        assert page.is_visible("[data-testid=image-preview]")
        assert float(page.text_content("[data-testid=image-time-ms]")) > 0
        page.evaluate(f"document.querySelector('[data-testid=image-top5]').innerHTML = ''")
    weights = [r for r in s.responses if "/models/efficientnet_lite0/" in r.url and r.url.endswith(".safetensors")]
    assert weights and all(r.status == 206 for r in weights)
    assert s.foreign_requests() == [] and s.console_errors == []


def test_cat_is_a_cat(dev_server, session_factory):
    page = session_factory(dev_server.url).open("index.html#photo")
    page.click("[data-sample='chelsea.png']")
    top = browser_top5(page)
    assert "cat" in top[0][0], top


def test_bad_file_shows_an_error_and_the_page_keeps_working(dev_server, session_factory, site, tmp_path):
    s = session_factory(dev_server.url)
    page = s.open("index.html#photo")
    bad = tmp_path / "notes.png"
    bad.write_bytes(b"this is not an image at all")
    page.set_input_files("[data-testid=image-input]", str(bad))
    page.wait_for_selector("[data-testid=image-error]:not([hidden])")
    assert "notes.png" in page.text_content("[data-testid=image-error]")
    page.set_input_files("[data-testid=image-input]", str(site / "samples" / "coffee.png"))
    browser_top5(page)
    assert page.is_hidden("[data-testid=image-error]")
    assert page.text_content("[data-testid=engine-status]") == "ready"


DROP = """async ([url, name, kind]) => {
    const blob = await (await fetch(url)).blob();
    const data = new DataTransfer();
    data.items.add(new File([blob], name, { type: blob.type }));
    const target = kind === "drop" ? document.getElementById("image-drop") : document;
    const event = kind === "drop" ? new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true })
                                  : new ClipboardEvent("paste", { clipboardData: data, bubbles: true });
    target.dispatchEvent(event);
}"""


@pytest.mark.parametrize("kind", ["drop", "paste"])
def test_drop_and_paste(dev_server, session_factory, native, site, kind):
    page = session_factory(dev_server.url).open("index.html#photo")
    page.evaluate(DROP, ["samples/coffee.png", "coffee.png", kind])
    got = browser_top5(page)
    want = native(str(site / "samples" / "coffee.png"), top_k=5)
    assert [g[1] for g in got] == [w["index"] for w in want]
