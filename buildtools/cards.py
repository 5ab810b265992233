"""The page's cards, found in web/cards/ and put together into index.html and pyscript.json.

A card is two files named by its task (web/app.py says what the page gives them):

    web/cards/<task>.html   one <section class="card" data-task="<task>" data-tab="<id>" data-label="<tab>">
    web/cards/<task>.py     its MicroPython module, with start(card)

The build writes, from web/index.html and web/pyscript.json:

- index.html: every card's section at `<!-- cards -->`, a tab for each at `<!-- tabs -->`, and the
  [id, task] pairs into the first script (`[/* cards */]`), which opens the card the URL names;
- pyscript.json: "files" gains each card's module, as `cards/<task with _ for ->.py` in the
  page's Python file system (app.py imports it by its section's task);
- cards/<task>.py, copied as is (the .html files live on only inside index.html).

Cards come in the order their task modules give (each module's `CARD`, engine.tasks.card_order),
so the first card is the one a bare URL opens; cards of tasks no module places come last, by name.
Nothing here or in the page lists tasks by hand.
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .steps import BuildError

FOLDER = "cards"
MARKERS = {"cards": "<!-- cards -->", "tabs": "<!-- tabs -->", "ids": "[/* cards */]"}
SECTION = re.compile(r"<section\b([^>]*)>")
ATTRIBUTE = re.compile(r'([\w-]+)="([^"]*)"')
TAB_ID = re.compile(r"[a-z][a-z0-9-]*\Z")


@dataclass(frozen=True)
class Card:
    task: str              # the registry's task name; the files' stem
    tab: str               # its id in the URL: index.html#<tab>
    label: str             # the text of its tab
    html: str              # the section, as written
    module: Path           # web/cards/<task>.py

    @property
    def module_name(self) -> str:
        return self.task.replace("-", "_")


def find(web: Path, order=()) -> list[Card]:
    """The cards in web/cards/, checked, in the order of the tasks in `order` (engine.tasks.card_order)."""
    cards = []
    for page in sorted((web / FOLDER).glob("*.html")):
        where = f"web/{FOLDER}/{page.name}"
        text = page.read_text()
        sections = SECTION.findall(text)
        if len(sections) != 1:
            raise BuildError(f"{where}: a card is one <section> element; found {len(sections)}")
        attributes = dict(ATTRIBUTE.findall(sections[0]))
        for name in ("data-task", "data-tab", "data-label"):
            if not attributes.get(name):
                raise BuildError(f'{where}: its <section> needs {name}="..."')
        task, tab = attributes["data-task"], attributes["data-tab"]
        if task != page.stem:
            raise BuildError(f"{where}: data-task={task!r} differs from the file's name {page.stem!r}")
        if not TAB_ID.match(tab):
            raise BuildError(f"{where}: data-tab={tab!r} must be lower-case letters, digits and '-'")
        module = page.with_suffix(".py")
        if not module.is_file():
            raise BuildError(f"{where}: its Python, web/{FOLDER}/{module.name}, is missing")
        if not re.search(r"^def start\(", module.read_text(), re.M):
            raise BuildError(f"web/{FOLDER}/{module.name}: a card's module defines start(card)")
        cards.append(Card(task, tab, html.unescape(attributes["data-label"]), text.strip(), module))
    for page in sorted((web / FOLDER).glob("*.py")):
        if not page.with_suffix(".html").is_file():
            raise BuildError(f"web/{FOLDER}/{page.name}: its card, web/{FOLDER}/{page.stem}.html, is missing")
    for attribute in ("tab", "module_name"):
        seen = {}
        for card in cards:
            other = seen.setdefault(getattr(card, attribute), card.task)
            if other != card.task:
                raise BuildError(f"web/{FOLDER}: the cards {other} and {card.task} share the {attribute} "
                                 f"{getattr(card, attribute)!r}")
    order = list(dict.fromkeys(order))
    return sorted(cards, key=lambda c: (order.index(c.task) if c.task in order else len(order), c.task))


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else line for line in text.split("\n"))


def _replace(text: str, marker: str, value: str, where: str) -> str:
    if text.count(marker) != 1:
        raise BuildError(f"{where}: needs {marker} exactly once (found {text.count(marker)})")
    return text.replace(marker, value)


def page(index: str, cards: list[Card]) -> str:
    """index.html with the cards, their tabs and their [id, task] pairs in place."""
    def indentation(marker):
        line = next((line for line in index.split("\n") if marker in line), "")
        return line[:len(line) - len(line.lstrip())]
    sections = "\n".join(_indent(c.html, indentation(MARKERS["cards"])) for c in cards).lstrip()
    # tabs as links: a middle click or a copied link opens that card; app.py makes them tabs
    tabs = f"\n{indentation(MARKERS['tabs'])}".join(
        f'<a role="tab" id="tab-{c.tab}" href="#{c.tab}" data-tab="{c.tab}" aria-selected="false">'
        f'{html.escape(c.label)}</a>' for c in cards)
    ids = json.dumps([[c.tab, c.task] for c in cards])
    index = _replace(index, MARKERS["cards"], sections, "web/index.html")
    index = _replace(index, MARKERS["tabs"], tabs, "web/index.html")
    return _replace(index, MARKERS["ids"], ids, "web/index.html")


def pyscript_config(text: str, cards: list[Card]) -> str:
    """pyscript.json with each card's module in its "files"."""
    config = json.loads(text)
    files = config.setdefault("files", {})
    for c in cards:
        files[f"./{FOLDER}/{c.module.name}"] = f"./{FOLDER}/{c.module_name}.py"
    return json.dumps(config, indent=2) + "\n"


def write(out: Path, web: Path, order=()) -> list[Card]:
    """index.html, pyscript.json and cards/*.py into `out`."""
    cards = find(web, order)
    (out / "index.html").write_text(page((web / "index.html").read_text(), cards))
    (out / "pyscript.json").write_text(pyscript_config((web / "pyscript.json").read_text(), cards))
    (out / FOLDER).mkdir(parents=True, exist_ok=True)
    for c in cards:
        (out / FOLDER / c.module.name).write_bytes(c.module.read_bytes())
    return cards
