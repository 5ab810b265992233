"""The Read text card in headless Chromium: a sample, a chosen file, a dropped file and a pasted
screenshot each give the native pipeline's lines on the same image (the same text on every line,
boxes within 1 px); a line chosen in the list or over the image is highlighted in both; Copy all
puts the joined text on the clipboard, or selects it where the page may not write there; a file
that is no image, or one too large, says so in the card, which reads the next one."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers import need
from tests.web.conftest import ROOT

SAMPLES = ROOT / "samples" / "ocr"
LINES = "[data-testid=ocr-lines]"
ERROR = "[data-testid=ocr-error]"
MODELS = ("pp-ocrv4", "pp-ocrv5")          # the first: the one the card loads when it opens


@pytest.fixture(scope="module")
def natives(site):
    """name -> the native pipeline on the site's own converted weights (made when first asked)."""
    import engine
    made = {}

    def native(name: str = MODELS[0]):
        if name not in made:
            need((site / "models" / name).is_dir(), f"the site has no {name} (python build.py --models {name})")
            made[name] = engine.pipeline("ocr", model=name, site=str(site))
        return made[name]
    return native


def served(site) -> list[str]:
    """The site's models for the task, in the registry's order."""
    return [m["name"] for m in json.loads((site / "registry.json").read_text()) if "ocr" in m["tasks"]]


def expect_new(page):
    page.evaluate(f"document.querySelector('{LINES}').dataset.state = 'waiting'")


def result(page, timeout=300_000) -> list[dict]:
    """The card's lines once it says done (an error shown fails with its text)."""
    page.wait_for_function(f"(({{dataset: d}}) => ['done', 'error'].includes(d.state) && d.busy !== 'true')"
                           f"(document.querySelector('{LINES}'))", timeout=timeout)
    if page.get_attribute(LINES, "data-state") == "error":
        raise AssertionError(page.text_content(ERROR))
    return json.loads(page.get_attribute(LINES, "data-result"))


def error(page, timeout=60_000) -> str:
    page.wait_for_function(f"document.querySelector('{LINES}').dataset.state === 'error'", timeout=timeout)
    return page.text_content(ERROR)


def assert_same(got: list[dict], want: list[dict], where: str = ""):
    """The same lines in the same order: equal text, every corner within 1 px (the scores, means of
    the recognizer's probabilities, differ by a few hundredths between wasm SIMD and NumPy)."""
    assert [g["text"] for g in got] == [w["text"] for w in want], where
    for g, w in zip(got, want):
        assert np.abs(np.array(g["box"]) - np.array(w["box"])).max() <= 1.0, (where, g, w)


def assert_shown(page, lines: list[dict]):
    """What a person sees: each line's text in the list, and a box over the image for each."""
    texts = page.eval_on_selector_all(f"{LINES} li", "els => els.map((e) => e.textContent)")
    assert texts == [line["text"] for line in lines]
    shapes = page.eval_on_selector_all("[data-testid=ocr-boxes] polygon", "els => els.map((e) => Array.from("
                                       "{length: e.points.numberOfItems}, (_, i) => e.points.getItem(i))"
                                       ".map((p) => [p.x, p.y]))")
    assert len(shapes) == len(lines)
    for shape, line in zip(shapes, lines):
        assert np.abs(np.array(shape) - np.array(line["box"])).max() < 1e-3
    assert page.text_content("[data-testid=ocr-count]") == str(len(lines))


def take_sample(page, file: str) -> list[dict]:
    expect_new(page)
    page.click(f"[data-testid=ocr-sample][data-sample='{file}']")
    return result(page)


def test_a_sample_reads_as_natively(dev_server, session_factory, natives, site):
    s = session_factory(dev_server.url)
    page = s.open()
    assert not [u for u in s.requests if "/models/pp-ocr" in u], "weights load only when the card opens"
    s.open_card("ocr")
    for file in ("screenshot.png", "receipt.png"):
        got = take_sample(page, file)
        want = natives()(str(SAMPLES / file))["lines"]
        assert len(want) >= 8, (file, want)
        assert_same(got, want, where=file)
        assert_shown(page, got)
        times = {name: float(page.text_content(f"[data-testid=ocr-{name}]")) for name in ("det", "cls", "rec", "ms")}
        assert all(t > 0 for t in times.values()), times
        assert page.text_content("[data-testid=ocr-backend]") not in ("", "–")
        print(f"\n{file} in Chromium: {times} ms on {page.text_content('[data-testid=ocr-backend]')}, "
              f"{page.text_content('[data-testid=ocr-input-size]')}")
    # the boxes lie over the image as it is shown: the overlay has the image's box
    shown = page.evaluate("""() => ['image', 'boxes'].map((id) => {
        const r = document.querySelector(`[data-testid=ocr-${id}]`).getBoundingClientRect();
        return [r.left, r.top, r.width, r.height]; })""")
    assert np.allclose(shown[0], shown[1], atol=0.5) and abs(shown[0][2] / shown[0][3] - 760 / 900) < 0.01, shown
    # a line chosen in the list is highlighted over the image, and one clicked there in the list
    page.click(f"{LINES} li[data-index='2']")
    assert page.eval_on_selector_all(".selected", "els => els.map((e) => e.tagName.toLowerCase() + e.dataset.index)") \
        in (["polygon2", "li2"], ["li2", "polygon2"])
    page.click("[data-testid=ocr-boxes] polygon[data-index='4']")
    page.wait_for_function("document.activeElement.dataset.index === '4'")
    assert sorted(page.eval_on_selector_all(".selected", "els => els.map((e) => e.tagName.toLowerCase())")) == \
        ["li", "polygon"]
    # the other model, where the site serves it: the image shown is read again with it
    if MODELS[1] in served(site):
        assert page.is_visible("[data-testid=ocr-model]")
        expect_new(page)
        page.select_option("[data-testid=ocr-model]", MODELS[1])
        got = result(page)
        assert_same(got, natives(MODELS[1])(str(SAMPLES / "receipt.png"))["lines"], where=MODELS[1])
        assert [u for u in s.requests if f"/models/{MODELS[1]}/" in u]
    weights = [r for r in s.responses if "/models/pp-ocr" in r.url and r.url.endswith(".safetensors")]
    assert weights and all(r.status in (200, 206) for r in weights)
    assert s.foreign_requests() == [] and s.console_errors == []


DROP = """async ([url, name, kind]) => {
    const blob = await (await fetch(url)).blob();
    const data = new DataTransfer();
    data.items.add(new File([blob], name, { type: blob.type }));
    const target = kind === "drop" ? document.getElementById("ocr-drop") : document.body;
    const event = kind === "drop" ? new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true })
                                  : new ClipboardEvent("paste", { clipboardData: data, bubbles: true,
                                                                  cancelable: true });
    target.dispatchEvent(event);
    return event.defaultPrevented;
}"""


def test_a_chosen_and_a_dropped_file_read_as_natively(dev_server, session_factory, natives):
    page = session_factory(dev_server.url).open("index.html#ocr")
    expect_new(page)
    page.set_input_files("[data-testid=ocr-input]", str(SAMPLES / "receipt.png"))
    assert_same(result(page), natives()(str(SAMPLES / "receipt.png"))["lines"], where="chosen")
    expect_new(page)
    assert page.evaluate(DROP, ["samples/ocr/screenshot.png", "screenshot.png", "drop"])
    got = result(page)
    assert_same(got, natives()(str(SAMPLES / "screenshot.png"))["lines"], where="dropped")
    assert_shown(page, got)


def test_a_pasted_screenshot_is_read(dev_server, session_factory, natives):
    s = session_factory(dev_server.url)
    page = s.open("index.html#ocr")
    expect_new(page)
    assert page.evaluate(DROP, ["samples/ocr/screenshot.png", "image.png", "paste"]), "the card takes the paste"
    got = result(page)
    assert_same(got, natives()(str(SAMPLES / "screenshot.png"))["lines"], where="pasted")
    assert_shown(page, got)
    assert page.is_hidden(ERROR) and s.console_errors == []


def test_copy_all_puts_the_text_on_the_clipboard_or_selects_it(dev_server, session_factory, natives):
    s = session_factory(dev_server.url)
    s.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=dev_server.url.rstrip("/"))
    page = s.open("index.html#ocr")
    assert page.is_disabled("[data-testid=ocr-copy]")
    lines = take_sample(page, "screenshot.png")
    want = natives()(str(SAMPLES / "screenshot.png"))["text"]
    assert want == "\n".join(line["text"] for line in lines)
    page.click("[data-testid=ocr-copy]")
    page.wait_for_function("document.querySelector('[data-testid=ocr-copied]').textContent !== ''")
    assert page.text_content("[data-testid=ocr-copied]") == "copied"
    assert page.evaluate("navigator.clipboard.readText()") == want
    # a page that may not write to the clipboard: the lines are copied another way, or selected
    page.evaluate("() => { navigator.clipboard.writeText = () => Promise.reject(new DOMException('no', "
                  "'NotAllowedError')); }")
    page.evaluate("document.querySelector('[data-testid=ocr-copied]').textContent = ''")
    page.click("[data-testid=ocr-copy]")
    page.wait_for_function("document.querySelector('[data-testid=ocr-copied]').textContent !== ''")
    said = page.text_content("[data-testid=ocr-copied]")
    assert said in ("copied", "selected: press Ctrl+C to copy")
    selected = page.evaluate("window.getSelection().toString()")
    assert [line for line in selected.split("\n") if line.strip()] == want.split("\n"), selected
    if said == "copied":                                 # document.execCommand("copy") of the selection
        copied = page.evaluate("navigator.clipboard.readText()")
        assert [line for line in copied.split("\n") if line.strip()] == want.split("\n"), copied


def test_a_file_that_is_no_image_says_so_and_the_card_reads_on(dev_server, session_factory, natives, tmp_path):
    s = session_factory(dev_server.url)
    page = s.open("index.html#ocr")
    huge = bytes.fromhex("89504e470d0a1a0a") + (13).to_bytes(4, "big") + b"IHDR" + \
        (20000).to_bytes(4, "big") + (20000).to_bytes(4, "big") + bytes([8, 2, 0, 0, 0]) + b"\0" * 4
    for name, body, says in (("notes.txt", b"this is not an image at all", "cannot decode"),
                             ("huge.png", huge, "too large")):
        path = tmp_path / name
        path.write_bytes(body)
        expect_new(page)
        page.set_input_files("[data-testid=ocr-input]", str(path))
        text = error(page)
        assert name in text and says in text, (name, text)
        assert page.is_hidden("[data-testid=ocr-image]")
    # a paste with no image in it says so too
    page.evaluate("""() => { const data = new DataTransfer(); data.setData("text/plain", "words");
                             const paste = new ClipboardEvent("paste", { clipboardData: data, bubbles: true });
                             document.body.dispatchEvent(paste); }""")
    assert "no image" in page.text_content(ERROR)
    got = take_sample(page, "screenshot.png")
    assert_same(got, natives()(str(SAMPLES / "screenshot.png"))["lines"], where="after the errors")
    assert page.is_hidden(ERROR)
    assert page.text_content("[data-testid=engine-status]") == "ready"
