"""The page's cards and their tabs in headless Chromium: the URL's hash opens a card, back and
forward move between the opened ones, a model loads only when its card opens, and a card whose
task the site does not serve is not shown."""
from __future__ import annotations

from tests.web.test_page import PREDICTION, draw

CARDS = {"digit": "digit-classification", "photo": "image-classification", "sentences": "sentence-embedding",
         "chat": "text-generation"}
MODELS = {"digit": "/models/mnist_cnn/", "photo": "/models/efficientnet_lite0/",
          "sentences": "/models/all-MiniLM-L6-v2/", "chat": "/models/SmolLM2-135M-Instruct/"}
SHOWN = "() => [...document.querySelectorAll('main > section[data-tab]')].filter((s) => !s.hidden).map((s) => s.dataset.tab)"
SELECTED = "() => [...document.querySelectorAll('[role=tab][aria-selected=true]')].map((t) => t.dataset.tab)"


def shown(page) -> list[str]:
    """The cards on screen (their ids), as a person sees them: displayed, not only not hidden."""
    return [tab for tab in page.evaluate(SHOWN) if page.is_visible(f"main > section[data-tab={tab}]")]


def watched(session_factory, url: str, **kw):
    """A session that also records the requests of the page and its workers apart from the service
    worker's: that one keeps every model's JSON files (manifests, tokenizers) for offline use."""
    s = session_factory(url, **kw)
    s.own = []
    s.context.on("request", lambda r: r.service_worker is None and s.own.append(r.url))
    return s


def fetched(session, card: str) -> list[str]:
    """What the page fetched of a card's model (not the service worker)."""
    return [url for url in session.own if MODELS[card] in url]


def wait_shown(page, card: str) -> None:
    page.wait_for_function(f"({SHOWN})().join() === '{card}' && ({SELECTED})().join() === '{card}'")


def test_the_hash_opens_its_card_and_only_its_model_loads(dev_server, session_factory):
    s = watched(session_factory, dev_server.url)
    page = s.open("index.html#photo")
    assert shown(page) == ["photo"] and page.evaluate(SELECTED) == ["photo"]
    assert page.get_attribute("#tab-photo", "aria-controls") == "image-card"
    assert page.get_attribute("#image-card", "role") == "tabpanel"
    assert page.get_attribute("#image-card", "aria-labelledby") == "tab-photo"
    info = page.evaluate("window.engineClient.state.info")
    assert info["task"] == "image-classification" and info["model"] == "efficientnet_lite0"
    assert fetched(s, "photo") and not fetched(s, "digit") and not fetched(s, "sentences") and not fetched(s, "chat")
    # the tabs list the cards in the registry's order, as links to their URL
    tabs = page.eval_on_selector_all("[role=tablist] [role=tab]", "els => els.map(e => [e.dataset.tab, "
                                     "e.getAttribute('href'), e.textContent])")
    assert tabs == [["digit", "#digit", "Digit"], ["photo", "#photo", "Photo"], ["detect", "#detect", "Detect"],
                    ["sentences", "#sentences", "Sentences"], ["chat", "#chat", "Chat"], ["speech", "#speech", "Speech"],
                    ["ocr", "#ocr", "Read text"]]
    # another card opened: its model loads now, and works
    s.open_card("digit")
    assert page.evaluate("location.hash") == "#digit"
    assert shown(page) == ["digit"]
    draw(page, "7")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '7'", timeout=30_000)
    assert fetched(s, "digit") and not fetched(s, "sentences") and not fetched(s, "chat")
    assert s.console_errors == [] and s.foreign_requests() == []


def test_the_task_name_opens_its_card_too_and_a_bare_url_opens_the_first(dev_server, session_factory):
    s = watched(session_factory, dev_server.url)
    page = s.open("index.html#sentence-embedding")
    assert shown(page) == ["sentences"]
    assert page.evaluate("window.engineClient.state.info.task") == "sentence-embedding"
    s2 = watched(session_factory, dev_server.url)
    page2 = s2.open("index.html#no-such-card")
    assert shown(page2) == ["digit"] and page2.evaluate(SELECTED) == ["digit"]
    assert page2.evaluate("window.engineClient.state.info.task") == "digit-classification"
    assert not fetched(s2, "photo") and not fetched(s2, "sentences") and not fetched(s2, "chat")


def test_the_opened_card_is_the_only_one_painted_before_the_pages_python_runs(dev_server, session_factory):
    """index.html's first script shows the card the URL names (a style of its own) until app.py,
    held back here, takes over the tabs."""
    import time
    s = watched(session_factory, dev_server.url)

    def late(route):
        time.sleep(4)
        route.continue_()
    s.context.route("**/pyscript/core.js", late)
    page = s.page
    page.goto(dev_server.url + "index.html#sentences", wait_until="commit")      # not "load": core.js is late
    page.wait_for_selector("#chat-card", state="attached")
    assert shown(page) == ["sentences"] and page.evaluate("document.getElementById('opening-card') !== null")
    page.wait_for_function("window.engineClient && window.engineClient.tasksWanted")
    assert page.evaluate("window.engineClient.tasksWanted") == ["sentence-embedding", "digit-classification",
                                                                "image-classification", "object-detection",
                                                                "text-generation", "speech-recognition", "ocr"]
    s.wait_ready()
    wait_shown(page, "sentences")
    assert page.evaluate("document.getElementById('opening-card')") is None


def test_a_model_is_fetched_only_when_its_card_opens(dev_server, session_factory):
    s = watched(session_factory, dev_server.url)
    page = s.open()
    assert shown(page) == ["digit"] and page.evaluate("location.hash") == ""
    page.wait_for_timeout(1500)                     # time enough for anything that would start by itself
    assert fetched(s, "digit") and not fetched(s, "photo") and not fetched(s, "sentences") and not fetched(s, "chat")
    s.open_card("photo")
    page.wait_for_function("document.querySelectorAll('[data-sample]').length > 0")      # samples: once opened
    page.wait_for_function("window.engineClient.tasks.has('image-classification')")
    assert page.evaluate("window.engineClient.tasks.get('image-classification').then((info) => info.model)") == \
        "efficientnet_lite0"
    assert [u for u in fetched(s, "photo") if u.endswith(".safetensors")]
    assert not fetched(s, "sentences") and not fetched(s, "chat")
    assert s.console_errors == []


def test_back_and_forward_and_the_keyboard(dev_server, session_factory):
    s = watched(session_factory, dev_server.url)
    page = s.open()
    s.open_card("photo")
    s.open_card("sentences")
    page.go_back()
    wait_shown(page, "photo")
    assert page.evaluate("location.hash") == "#photo"
    page.go_back()
    wait_shown(page, "digit")
    page.go_forward()
    wait_shown(page, "photo")
    page.go_forward()
    wait_shown(page, "sentences")
    # a reload keeps the card the URL names
    page.reload()
    s.wait_ready()
    wait_shown(page, "sentences")
    assert page.evaluate("window.engineClient.state.info.task") == "sentence-embedding"

    # arrows move between the tabs (wrapping), Home and End to the ends; Space or Enter opens one;
    # the selected tab is the one Tab reaches (the others: tabindex -1)
    assert page.eval_on_selector_all("[role=tab]", "els => els.map(e => e.tabIndex)") == [-1, -1, -1, 0, -1, -1, -1]
    page.focus("#tab-sentences")
    focused = "() => document.activeElement.dataset.tab"
    page.keyboard.press("ArrowRight")
    assert page.evaluate(focused) == "chat"
    page.keyboard.press("ArrowRight")
    assert page.evaluate(focused) == "speech"
    page.keyboard.press("ArrowRight")
    assert page.evaluate(focused) == "ocr"
    page.keyboard.press("ArrowRight")
    assert page.evaluate(focused) == "digit"
    for _ in range(4):
        page.keyboard.press("ArrowLeft")
    assert page.evaluate(focused) == "sentences"
    page.keyboard.press("Home")
    assert page.evaluate(focused) == "digit"
    assert shown(page) == ["sentences"], "moving the focus opens nothing (a card's model loads when it opens)"
    page.keyboard.press("Space")
    wait_shown(page, "digit")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")
    wait_shown(page, "photo")
    assert page.evaluate("location.hash") == "#photo"
    assert not fetched(s, "chat")
    assert s.console_errors == []


def test_a_card_whose_task_the_site_does_not_serve_is_not_shown(dev_server, session_factory):
    """A site whose registry has no sentence-embedding model (as the worker reports it): its card and
    tab are hidden, a URL naming it opens the first card, and its model is never asked for."""
    s = watched(session_factory, dev_server.url)
    target = "const registry = JSON.parse(api.tasks());"

    def without_minilm(route):
        response = route.fetch()
        body = response.text()
        assert body.count(target) == 1, "worker.js reads the registry elsewhere: update this test"
        headers = {k: v for k, v in response.headers.items() if k not in ("content-encoding", "content-length")}
        route.fulfill(response=response, headers=headers,      # COEP's headers kept: the worker may start
                      body=body.replace(target, target[:-1] + '.filter((m) => m.name !== "all-MiniLM-L6-v2");'))
    s.context.route("**/worker.js", without_minilm)
    page = s.open("index.html#sentences")
    assert shown(page) == ["digit"]
    assert page.is_hidden("#tab-sentences") and page.is_hidden("#sentences-card")
    assert page.is_visible("#tab-chat") and page.is_visible("#tab-photo")
    assert page.evaluate("window.engineClient.state.info.task") == "digit-classification"
    page.evaluate("location.hash = '#sentences'")
    page.wait_for_timeout(300)
    assert shown(page) == ["digit"]
    page.focus("#tab-detect")
    page.keyboard.press("ArrowRight")                    # the hidden tab is skipped
    assert page.evaluate("document.activeElement.dataset.tab") == "chat"
    assert not fetched(s, "sentences")
    assert s.console_errors == []


def test_screenshots_desktop_and_phone(dev_server, session_factory, tmp_path):
    """The page with its tabs, on a desktop and on a phone: nothing wider than the screen; the
    screenshots are kept for a person to look at (pytest's temp folder)."""
    for name, viewport in (("desktop", {"width": 1200, "height": 900}), ("phone", {"width": 390, "height": 844})):
        s = watched(session_factory, dev_server.url, viewport=viewport)
        page = s.open("index.html#photo")
        page.wait_for_function("document.querySelectorAll('[data-sample]').length > 0")
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        boxes = page.eval_on_selector_all("[role=tab]", "els => els.map(e => e.getBoundingClientRect().toJSON())")
        assert all(0 <= b["x"] and b["x"] + b["width"] <= viewport["width"] for b in boxes), boxes
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        print(f"\n{name}: {tmp_path / f'{name}.png'}")
