"""The page (PyScript on MicroPython, main thread): what its cards share, and the cards themselves.

Here: the engine's status, the backend and threads selects, the storage note, and the tabs that
show one card at a time, named in the URL (index.html#photo). Inference never runs on this thread: it runs in
the worker behind window.engineClient (engine-client.js), so the page stays smooth while a model
computes. The page's Python is MicroPython (index.html: `type="mpy"`), so one full CPython (the
worker's) is in the page, not two; bridge.py holds what differs from Pyodide's FFI.

A card is two files in web/cards/, named by its task (a task of engine/registry.py):

- `<task>.html`: one `<section class="card" data-task="<task>" data-tab="<id>" data-label="<tab>">`.
  `data-tab` is its id in the URL, short and stable since links use it (today: digit, photo,
  sentences, chat; the task's own name opens it too); `data-label` the text of its tab. Inside,
  each optional: `[data-model]` (gets the model's name from the registry), `.stage[data-weights]`
  (a progress row: its weights' download) and `[data-card-error]` (its error line).
- `<task>.py`: the module `cards.<task, "-" as "_">` (e.g. cards.text_generation), defining
  `start(card)`, called once as the page starts, with the `Card` below: its task and section, the
  engine client, `load()` for its model, `error()`, and hooks: `card.on("ready" | "open" |
  "backend", fn)`. It runs on MicroPython: bridge.py (by_id, to_js, to_py, error_text) and
  pyscript.ffi are what it has of the browser besides `js`.

The build (buildtools/cards.py) finds them: it puts each section into index.html with its tab, in
the order their task modules give (engine.tasks.card_order), and lists the modules in pyscript.json. This file imports a card's
module by its section's task. A card shows when the site's registry serves its task; its model
loads when it is first opened (the worker's start loads the one the URL opens).
"""
import asyncio

import js
from bridge import by_id, error_text, items, to_js, to_py, without_prefix
from pyscript.ffi import create_proxy

document = js.document
client = js.window.engineClient
STAGES = ["pyodide", "numpy", "engine", "weights"]


def megabytes(n):
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


def show_progress(row, p):
    """A progress row (.stage) showing {loaded, total} bytes."""
    row.querySelector("progress").value = p.loaded / p.total if p.total else 0
    row.querySelector(".bytes").textContent = f"{megabytes(p.loaded)} / {megabytes(p.total)}" if p.total else ""


# --- what a card gets ------------------------------------------------------------------------
class Card:
    """A card as its module's start(card) sees it."""

    def __init__(self, section):
        self.section = section
        self.task = section.dataset.task
        self.tab = section.dataset.tab
        self.client = client
        self.model = None                      # the registry's model name, once loaded
        self.served = True                     # until the registry says otherwise
        self.opened = False                    # shown at least once since the engine was ready
        self.hooks = {"ready": [], "open": [], "backend": []}

    def on(self, event, fn):
        """fn() on "ready" (the engine is up), "open" (the card is shown, the engine being up: its
        model is loading by then) or "backend" (the models moved to another backend)."""
        self.hooks[event].append(fn)

    def fire(self, event):
        for fn in self.hooks[event]:
            fn()

    @property
    def ready(self):
        return document.body.dataset.ready == "true"

    @property
    def shown(self):
        return not self.section.hidden

    def error(self, message):
        """The card's error line ([data-card-error]): the message, or hidden for None."""
        box = self.section.querySelector("[data-card-error]")
        if box is not None:
            box.textContent = message or ""
            box.hidden = message is None

    async def load(self):
        """Load the card's model (once; a failed load may be tried again); note how it was stored."""
        info = await client.loadTask(self.task)
        self.model = info.model
        row = self.section.querySelector(".stage[data-weights]")
        if row is not None:
            row.hidden = True
        storage_note(info.model, info.weights)
        return info

    def storage_note(self, stats):
        """The storage note for stats a later call reported (rows fetched after the load)."""
        storage_note(self.model, stats)

    def follow_device(self, result):
        follow_device(result)

    async def preload(self):
        """Opened: its model starts loading; a failure shows in the card (its own use tries again)."""
        try:
            await self.load()
        except Exception as e:
            self.error("The model could not be loaded: " + without_prefix(error_text(e), "engine.errors."))

    def show_weights(self, snapshot):
        row = self.section.querySelector(".stage[data-weights]")
        p = getattr(snapshot.progress, f"weights:{self.task}", None)
        if row is None or p is None or not p.total:
            return
        row.hidden = p.loaded >= p.total
        show_progress(row, p)


# --- engine status ---------------------------------------------------------------------------
seen = {"status": None}
backend = {"current": None}                      # where the worker's models are


def show_state(snapshot):
    status = snapshot.status
    by_id("engine-status").textContent = status
    for stage in STAGES:
        p = getattr(snapshot.progress, stage)
        row = document.querySelector(f'.stage[data-stage="{stage}"]')
        show_progress(row, p)
        if not p.total:
            row.querySelector("progress").value = 1 if status == "ready" else 0
    by_id("error-box").hidden = status != "error"
    if status == "error":
        by_id("error-text").textContent = f"The engine could not start: {snapshot.error}"
    for card in cards:
        card.show_weights(snapshot)
    if status == "ready" and seen["status"] != "ready":
        became_ready(snapshot.info)
    seen["status"] = status


def became_ready(info):
    select = by_id("backend-select")
    select.innerHTML = ""
    devices = list(info.devices)
    for name in devices:
        option = document.createElement("option")
        option.value = option.textContent = name
        select.appendChild(option)
    select.value = backend["current"] = info.device
    select.disabled = False
    note = by_id("backend-note")
    requested = info.requested
    note.hidden = requested in ("auto", info.device)
    why = getattr(info.unavailable, requested, None) if requested not in devices else None
    detail = f" ({why})" if why else ""              # MicroPython: no f-string inside an f-string
    note.textContent = f"backend {requested!r} is not available here{detail}; using {info.device}"
    by_id("backend-info").textContent = (f"wasm kernels: {'relaxed SIMD' if info.kernels == 'relaxed' else 'SIMD128'}"
                                         if info.kernels else "no wasm SIMD kernels in this browser")
    no_gpu = getattr(info.unavailable, "webgpu", None)
    by_id("adapter-info").textContent = f"GPU: {info.adapter}" if info.adapter else f"no WebGPU: {no_gpu}"
    show_threads(info)
    show_registry(to_py(info.registry))
    storage_note(info.model, info.weights)
    if info.task in by_task:
        by_task[info.task].model = info.model
    document.body.dataset.ready = "true"
    for card in cards:
        card.opened = False
        card.fire("ready")
    show_card(wanted_card())


# --- threads: how many the worker's kernels run on ------------------------------------------
threads = js.window.engineThreads              # index.html's threadChoice(): what was asked, and why
THREADS_KEY = "engine-threads"                 # localStorage: the Threads select's choice
# why a page that is not cross-origin isolated runs one thread, by where its service worker stands
NOT_ISOLATED = {
    "unsupported": "the host does not send the COOP/COEP headers, and without a service worker "
                   "(HTTPS or localhost only) nothing here can add them",
    "none": "the host does not send the COOP/COEP headers; the site's service worker adds them "
            "once it is installed, from the next load on",
    "controlling": "the host does not send the COOP/COEP headers, and the service worker in control "
                   "is an older version that does not add them (the new one takes over once every tab "
                   "of this site is closed)",
    "reloaded": "the host does not send the COOP/COEP headers, and this browser did not isolate the "
                "page with the ones its service worker adds",
}


def setup_threads():
    """The Threads select: auto (min(4, cores)) or a count; only an isolated page can change it."""
    select = by_id("threads-select")
    select.innerHTML = ""
    top = max(4, min(threads.cores, threads.most), threads.wanted)
    for value in [""] + [str(n) for n in range(1, top + 1)]:
        option = document.createElement("option")
        option.value = value
        option.textContent = value or f"auto ({threads.auto})"
        select.appendChild(option)
    select.value = str(threads.wanted) if threads.fromUrl else str(threads.chosen or "")
    if not threads.isolated:
        select.value = "1"
        select.title = "one thread: this page is not cross-origin isolated"
    note = by_id("threads-note")
    note.textContent, note.hidden = threads.error or "", not threads.error


def show_threads(info):
    """How many threads the worker's kernels run on, and why fewer than asked; whether the page is
    cross-origin isolated, and why not."""
    by_id("threads-select").disabled = not threads.isolated
    reported = getattr(info, "threads", None)
    if reported:
        got = to_py(reported)
    else:                                        # a worker without a thread pool
        got = {"requested": client.threadsWanted, "used": 1,
               "reason": "this worker runs its kernels on one thread"}
    used, requested = got["used"], got["requested"]
    text = "1 thread" if used == 1 else f"{used} threads"
    if used < requested:
        text += f" of {requested} asked"
        if got.get("reason"):
            text += ": " + got["reason"]
    by_id("threads-info").textContent = text
    if info.crossOriginIsolated:
        by_id("isolation").textContent = "cross-origin isolated: precise timers"
    else:
        why = NOT_ISOLATED.get(threads.serviceWorker, NOT_ISOLATED["none"])
        by_id("isolation").textContent = f"not cross-origin isolated: coarse timers, one thread ({why})"


def change_threads(event):
    """Run the kernels on the chosen number of threads: kept for the next visits, then the worker
    starts again with it (a thread pool is set up as the worker starts)."""
    value = event.target.value
    try:
        if value:
            js.localStorage.setItem(THREADS_KEY, value)
        else:
            js.localStorage.removeItem(THREADS_KEY)
    except Exception:
        pass                                     # no storage: the choice lasts for this page only
    url = js.URL.new(js.location.href)
    if url.searchParams.has("threads"):          # the address keeps saying what runs
        if value:
            url.searchParams.set("threads", value)
        else:
            url.searchParams.delete("threads")
        js.history.replaceState(None, "", url.href)
    wanted = int(value) if value else threads.auto
    threads.wanted = threads.sent = wanted
    threads.chosen = wanted if value else None
    by_id("threads-note").hidden = True
    if wanted != client.threadsWanted:
        client.threadsWanted = wanted
        event.target.disabled = True
        retry()


def show_registry(models):
    """Each card names the model the registry serves its task with (its first: the one that loads
    with the card); a card (and its tab) whose task this site does not serve is hidden."""
    served = {}
    for m in models:
        for task in m["tasks"]:
            if task not in served:
                served[task] = m
    for card in cards:
        entry = served.get(card.task)
        card.served = entry is not None
        tabs[card.tab].hidden = not card.served
        label = card.section.querySelector("[data-model]")
        if entry is not None and label is not None:
            label.textContent = entry["title"].split(" · ", 1)[-1]


storage_notes = {}


def storage_note(model, stats):
    """Say so when a model's weights could not be kept in the browser's cache (a full quota, no
    Cache API): the page works, but they will download again on the next visit."""
    error = getattr(stats, "cache_error", None) if stats is not None else None
    if not error or model in storage_notes:
        return
    storage_notes[model] = error
    note = by_id("storage-note")
    listed = "; ".join(f"{name} ({why})" for name, why in storage_notes.items())
    note.textContent = (f"Weights not cached: {listed}. They work, but will download again on the next visit.")
    note.hidden = False


def follow_device(result):
    """The worker left a lost GPU for another backend: say so and show where it runs now."""
    notice = getattr(result, "notice", None)
    if not notice:
        return
    select = by_id("backend-select")
    for option in items(select.options):
        if option.value == "webgpu":
            option.remove()
    select.value = backend["current"] = result.device
    note = by_id("backend-note")
    note.textContent, note.hidden = notice, False
    by_id("adapter-info").textContent = "no WebGPU: the device was lost"


def retry(event=None):
    """Start the worker again, loading the shown card's model first."""
    document.body.dataset.ready = "false"
    seen["status"] = None
    shown = [card.task for card in cards if card.shown]
    client.restart(client.backendWanted, to_js(shown + [c.task for c in cards if c.task not in shown]))


async def change_backend(event):
    """Move the models to the chosen backend. The worker does it after the job in progress; if it
    cannot, the models stay where they were, and the select and a note say so."""
    select = event.target
    name = select.value
    previous = backend["current"]
    note = by_id("backend-note")
    try:
        await client.setBackend(name)
    except Exception as e:
        select.value = previous
        why = without_prefix(error_text(e), "engine.errors.")
        note.textContent = f"could not switch to {name}: {why}; still on {previous}"
        note.hidden = False
        return
    backend["current"] = name
    url = js.URL.new(js.location.href)
    url.searchParams.set("backend", name)
    js.history.replaceState(None, "", url.href)
    client.backendWanted = name                      # what a Retry restarts with
    for card in cards:
        card.fire("backend")


# --- navigation: one card at a time, the URL's hash names it ---------------------------------
cards = []                                       # in tab order (MicroPython's dicts keep no order)
by_task = {}                                     # task -> Card
tab_list = items(document.querySelectorAll("[role=tab][data-tab]"))     # in their order
tabs = {tab.dataset.tab: tab for tab in tab_list}


def wanted_card():
    """The card the URL names (by its id or its task), else the first one this site serves."""
    wanted = js.decodeURIComponent(js.location.hash[1:])
    served = [card for card in cards if card.served]
    for card in served:
        if wanted in (card.tab, card.task):
            return card
    return served[0] if served else None


def show_card(shown):
    """Show one card (its tab selected), the others hidden; once the engine is up, an opened card
    loads its model."""
    for card in cards:
        selected = card is shown
        card.section.hidden = not selected
        tab = tabs[card.tab]
        tab.setAttribute("aria-selected", "true" if selected else "false")
        tab.tabIndex = 0 if selected else -1
    opening = by_id("opening-card")                  # index.html's first script's stand-in for this
    if opening is not None:
        opening.remove()
    if shown is None or not shown.ready:
        return
    if not shown.opened:
        shown.opened = True
        asyncio.create_task(shown.preload())
    shown.fire("open")


def on_tab_key(event):
    """Arrows, Home and End move between the tabs; Enter (the link's own) or Space opens one."""
    visible = [tab for tab in tab_list if not tab.hidden]
    ids = [tab.dataset.tab for tab in visible]
    if event.target.dataset.tab not in ids:
        return
    if event.key == " ":
        event.preventDefault()
        event.target.click()
        return
    at = ids.index(event.target.dataset.tab)
    moves = {"ArrowRight": at + 1, "ArrowLeft": at - 1, "Home": 0, "End": len(visible) - 1}
    if event.key in moves:
        event.preventDefault()
        visible[moves[event.key] % len(visible)].focus()


def start_cards():
    """Each card's module, imported by its task, started with its Card."""
    for section in items(document.querySelectorAll("main > section[data-task][data-tab]")):
        card = Card(section)
        tab = tabs[card.tab]
        if not section.id:
            section.id = f"card-{card.tab}"
        section.setAttribute("role", "tabpanel")
        section.setAttribute("aria-labelledby", tab.id)
        tab.setAttribute("aria-controls", section.id)
        cards.append(card)
        by_task[card.task] = card
        name = card.task.replace("-", "_")
        module = getattr(__import__("cards." + name), name)
        module.start(card)


start_cards()
show_card(wanted_card())
setup_threads()
by_id("retry").addEventListener("click", create_proxy(retry))
by_id("threads-select").addEventListener("change", create_proxy(change_threads))
by_id("backend-select").addEventListener("change", create_proxy(lambda e: asyncio.create_task(change_backend(e))))
js.window.addEventListener("hashchange", create_proxy(lambda e: show_card(wanted_card())))
document.querySelector("[role=tablist]").addEventListener("keydown", create_proxy(on_tab_key))
client.subscribe(create_proxy(show_state))
