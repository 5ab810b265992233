"""The page's cards (buildtools/cards.py): found in web/cards/, put together into index.html and
pyscript.json, in the registry's order; a card missing a part is a build error naming the file."""
import json
import re
import shutil
from pathlib import Path

import pytest

import engine
from buildtools import cards
from buildtools.steps import BuildError

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
ORDER = engine.tasks.card_order()


def test_every_card_of_the_checkout_is_found_in_the_order_of_its_task_module():
    found = cards.find(WEB, ORDER)
    assert [(c.tab, c.task, c.label) for c in found] == [
        ("digit", "digit-classification", "Digit"), ("photo", "image-classification", "Photo"),
        ("detect", "object-detection", "Detect"), ("sentences", "sentence-embedding", "Sentences"), ("chat", "text-generation", "Chat"),
        ("speech", "speech-recognition", "Speech"), ("ocr", "ocr", "Read text")]
    served = set(engine.registry.tasks())
    assert all(c.task in served for c in found)           # every card's task is a registry task
    assert sorted(p.stem for p in (WEB / "cards").glob("*.py")) == sorted(c.task for c in found)


def test_the_page_is_put_together(tmp_path):
    found = cards.write(tmp_path, WEB, ORDER)
    page = (tmp_path / "index.html").read_text()
    for marker in cards.MARKERS.values():
        assert marker not in page
    # the sections, in order, each whole; a tab for each, linking to its id
    sections = re.findall(r'<section class="card"[^>]*data-task="([^"]+)"', page)
    assert sections == [c.task for c in found]
    for c in found:
        assert " ".join(c.html.split()) in " ".join(page.split())
    tabs = re.findall(r'<a role="tab" id="tab-([^"]+)" href="#([^"]+)" data-tab="([^"]+)"[^>]*>([^<]+)</a>', page)
    assert tabs == [(c.tab, c.tab, c.tab, c.label) for c in found]
    assert page.index('role="tablist"') < page.index('data-task="digit-classification"')
    # the first script learns the ids before anything else loads
    ids = json.loads(re.search(r"const cards = (\[.*?\]);", page).group(1))
    assert ids == [[c.tab, c.task] for c in found]
    assert page.index("const cards = ") < page.index('<link rel="stylesheet"')
    config = json.loads((tmp_path / "pyscript.json").read_text())
    assert config["files"] == {"./bridge.py": "", **{f"./cards/{c.task}.py": f"./cards/{c.module_name}.py"
                                                    for c in found}}
    assert config["interpreter"] == json.loads((WEB / "pyscript.json").read_text())["interpreter"]
    for c in found:
        assert (tmp_path / "cards" / f"{c.task}.py").read_bytes() == c.module.read_bytes()
    assert not list((tmp_path / "cards").glob("*.html"))


def test_cards_of_tasks_the_registry_lacks_come_last(tmp_path):
    found = cards.find(WEB, ["text-generation", "digit-classification"])
    assert [c.task for c in found] == ["text-generation", "digit-classification", "image-classification",
                                       "object-detection", "ocr", "sentence-embedding", "speech-recognition"]


@pytest.fixture
def web(tmp_path):
    """A copy of web/ to break."""
    copy = tmp_path / "web"
    shutil.copytree(WEB, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("breakage, message", [
    (lambda w: (w / "cards/text-generation.py").unlink(), "web/cards/text-generation.html: its Python, "
                                                          "web/cards/text-generation.py, is missing"),
    (lambda w: (w / "cards/text-generation.html").unlink(), "web/cards/text-generation.py: its card, "
                                                            "web/cards/text-generation.html, is missing"),
    (lambda w: edit(w / "cards/text-generation.py", "def start(card):", "def begin(card):"),
     "web/cards/text-generation.py: a card's module defines start(card)"),
    (lambda w: edit(w / "cards/text-generation.html", 'data-tab="chat"', 'data-tab="photo"'),
     "the cards image-classification and text-generation share the tab 'photo'"),
    (lambda w: edit(w / "cards/text-generation.html", 'data-tab="chat"', 'data-tab="Chat Room"'),
     "data-tab='Chat Room' must be lower-case"),
    (lambda w: edit(w / "cards/text-generation.html", ' data-label="Chat"', ""),
     'web/cards/text-generation.html: its <section> needs data-label="..."'),
    (lambda w: edit(w / "cards/text-generation.html", 'data-task="text-generation"', 'data-task="chat"'),
     "data-task='chat' differs from the file's name 'text-generation'"),
    (lambda w: edit(w / "cards/text-generation.html", "</section>", "</section>\n<section class=\"card\">"),
     "web/cards/text-generation.html: a card is one <section> element; found 2"),
    (lambda w: edit(w / "index.html", "<!-- tabs -->", ""), "web/index.html: needs <!-- tabs --> exactly once"),
], ids=["no-module", "no-html", "no-start", "same-tab", "bad-tab", "no-label", "task-not-file-name", "two-sections",
        "no-tabs-marker"])
def test_a_broken_card_is_a_build_error_naming_it(web, tmp_path, breakage, message):
    breakage(web)
    with pytest.raises(BuildError) as error:
        cards.write(tmp_path / "out", web, ORDER)
    assert message in str(error.value)
