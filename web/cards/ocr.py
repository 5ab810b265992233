"""The Read text card (PyScript on MicroPython, main thread; app.py calls start(card)): choose, drop
or paste an image (a screenshot from the clipboard), or try a sample, and read its lines of text
with PP-OCR: a detector, a 0/180 degree classifier and a recognizer (engine/tasks/ocr.py).

The page decodes the image as the Detect card does (detect-live.js's decode: EXIF orientation
applied, no colour management, a huge image refused from its header before its pixels are
allocated) and the worker reads its RGBA pixels (read_text). The boxes are SVG polygons in the
image's own pixels (the SVG's viewBox), so they scale with the image as it is shown; the lines are
listed beside it as text one can select, and a line chosen in either place is highlighted in both.
When the site serves more than one model for the task, a select picks it; the one chosen loads
when first used, in place of the other (the worker keeps one model a task).
"""
import asyncio
import html

import js
from bridge import by_id, error_text, items, sample_buttons, take_files, to_py, without_prefix
from pyscript.ffi import create_proxy

ENTRY = "read_text"                  # engine/tasks/ocr.py's entry point in the worker
MAX_PIXELS = 64_000_000              # read_image's limit natively: refuse before decoding more


def message(e):
    return without_prefix(error_text(e), "engine.errors.", "InputError: ", "ImageError: ", "Error: ")


def polygons(lines):
    """Each line's box as an SVG polygon (its four corners, in the image's pixels)."""
    shapes = []
    for i, line in enumerate(lines):
        corners = " ".join(f"{x},{y}" for x, y in line["box"])
        shapes.append(f'<polygon data-index="{i}" points="{corners}"><title>{html.escape(line["text"])}</title>'
                      f'</polygon>')
    return "".join(shapes)


def list_items(lines):
    """Each line as an item of the list: its text alone (the score is the item's CSS ::after, left
    out of a selection and of a copy)."""
    rows = []
    for i, line in enumerate(lines):
        pct = f"{line['score'] * 100:.0f}%"
        rows.append(f'<li data-index="{i}" data-score="{line["score"]}" data-pct="{pct}" tabindex="0" '
                    f'title="recognizer score {pct}">{html.escape(line["text"])}</li>')
    return "".join(rows)


def start(card):
    client, section = card.client, card.section
    state = {"busy": False, "pending": None, "frame": None, "text": "", "models": {}, "samples_shown": False}
    lines_box = by_id("ocr-lines")

    # --- what the card shows --------------------------------------------------------------------
    def clear():
        lines_box.innerHTML = ""
        lines_box.removeAttribute("data-result")
        lines_box.dataset.state = "working"
        by_id("ocr-boxes").innerHTML = ""
        for name in ("count", "ms", "backend", "det", "cls", "rec"):
            by_id(f"ocr-{name}").textContent = "–"
        by_id("ocr-input-size").textContent = ""
        by_id("ocr-copied").textContent = ""
        by_id("ocr-copy").disabled = True
        state["text"] = ""

    def failed(text):
        lines_box.dataset.state = "error"
        card.error(text)

    def show(reply):
        """The worker's answer: the boxes over the image, the lines beside it, the times."""
        result = to_py(reply)
        lines = result["lines"]
        boxes = by_id("ocr-boxes")
        boxes.setAttribute("viewBox", f"0 0 {result['width']} {result['height']}")
        boxes.innerHTML = polygons(lines)
        lines_box.innerHTML = list_items(lines)
        lines_box.dataset.result = js.JSON.stringify(reply.lines)       # as the worker gave them (the tests)
        state["text"] = result["text"]
        by_id("ocr-copy").disabled = not lines
        by_id("ocr-count").textContent = str(len(lines))
        timings = result["timings"]
        for name in ("det", "cls", "rec"):
            by_id(f"ocr-{name}").textContent = f"{timings[name]:.1f}"
        by_id("ocr-ms").textContent = f"{result['ms']:.0f}"
        by_id("ocr-backend").textContent = result["device"]
        height, width = result["input"]
        by_id("ocr-input-size").textContent = f"(detector input {width}x{height})"
        lines_box.dataset.state = "done"
        card.follow_device(reply)
        if result.get("notice"):
            card.error(result["notice"])

    def select(index):
        """Highlight one line, in the list and over the image."""
        for element in items(section.querySelectorAll(".selected")):
            element.classList.remove("selected")
        for element in items(section.querySelectorAll(f'[data-index="{index}"]')):
            element.classList.add("selected")

    def on_list_focus(event):
        item = event.target.closest("li[data-index]")
        if item is not None:
            select(item.dataset.index)

    def on_box_click(event):
        shape = event.target.closest("polygon[data-index]")
        if shape is not None:
            item = lines_box.querySelector(f'li[data-index="{shape.dataset.index}"]')
            if item is not None:
                item.focus()                          # scrolls to it; its focus selects it

    # --- the model ------------------------------------------------------------------------------
    def show_model(name):
        title = state["models"].get(name)
        if title:
            section.querySelector("[data-model]").textContent = title

    def on_ready():
        """The site's models for the task; a select when there is more than one."""
        info = client.snapshot().info
        models = [m for m in to_py(info.registry) if card.task in m["tasks"]] if info else []
        state["models"] = {}
        select_box = by_id("ocr-model")
        select_box.innerHTML = ""
        for m in models:
            state["models"][m["name"]] = m["title"].split(" · ", 1)[-1]
            option = js.document.createElement("option")
            option.value = m["name"]
            option.textContent = state["models"][m["name"]]
            select_box.appendChild(option)
        by_id("ocr-model-choice").hidden = len(models) < 2
        if card.model in state["models"]:
            select_box.value = card.model

    async def load():
        """The model chosen: the registry's first loads with the card; another replaces it."""
        info = await card.load()                      # what is loaded or loading: the first, at first
        wanted = by_id("ocr-model").value
        if wanted and info.model != wanted:
            info = await client.loadTask(card.task, wanted)
            card.model = info.model
            card.storage_note(info.weights)
            by_id("ocr-progress").hidden = True
        show_model(info.model)

    # --- reading an image, one at a time --------------------------------------------------------
    def set_busy(busy):
        state["busy"] = busy
        lines_box.dataset.busy = "true" if busy else "false"

    def submit(job):
        """Run job() now, or after the one running (the latest asked waits; earlier ones are dropped)."""
        if state["busy"]:
            state["pending"] = job
            return
        asyncio.create_task(drain(job))

    async def drain(job):
        set_busy(True)
        try:
            while job is not None:
                await job()
                job, state["pending"] = state["pending"], None
        finally:
            set_busy(False)

    async def read(frame):
        await load()
        show(await client.callWithPixels(ENTRY, frame))

    async def read_file(blob, name):
        card.error(None)
        clear()
        try:
            frame = await js.window.detectLive.decode(blob, name, by_id("ocr-image"), MAX_PIXELS)
        except Exception as e:
            state["frame"] = None
            by_id("ocr-view").hidden = True
            failed(message(e))
            return
        state["frame"] = frame
        by_id("ocr-view").hidden = False
        try:
            await read(frame)
        except Exception as e:
            failed(message(e))

    async def read_again():
        """The image shown, read again (with the model chosen now)."""
        if state["frame"] is None:
            try:
                await load()
            except Exception as e:
                card.error("The model could not be loaded: " + message(e))
            return
        card.error(None)
        clear()
        try:
            await read(state["frame"])
        except Exception as e:
            failed(message(e))

    def take(blob, name):
        if not card.ready:
            card.error("the engine is still starting; try again in a moment")
            return
        submit(lambda: read_file(blob, name))

    def on_paste(event):
        """A pasted image (a screenshot), while this card is the one shown."""
        data = event.clipboardData
        if not card.shown or not data:
            return
        for i in range(data.items.length):          # a DataTransferItemList has no item()
            entry = data.items[i]
            if entry.kind == "file" and entry.type.startswith("image/"):
                event.preventDefault()
                blob = entry.getAsFile()
                take(blob, blob.name or "pasted image")
                return
        tag = event.target.tagName if event.target else ""
        if tag not in ("INPUT", "TEXTAREA", "SELECT"):
            card.error("the clipboard holds no image to read (copy a screenshot or an image, then paste)")

    async def from_sample(file, title):
        try:
            response = await js.fetch(f"samples/ocr/{file}")
            if not response.ok:
                raise ValueError(f"{file}: HTTP {response.status}")
            blob = await response.blob()
        except Exception as e:
            card.error(message(e))
            return
        take(blob, title)

    # --- copying ----------------------------------------------------------------------------------
    async def copy_all(event=None):
        """The lines, joined by newlines, onto the clipboard; where the page may not write it
        (no permission, a page not served over HTTPS), the lines are selected for Ctrl+C."""
        text, said = state["text"], by_id("ocr-copied")
        if not text:
            return
        try:
            await js.navigator.clipboard.writeText(text)
            said.textContent = "copied"
            return
        except Exception:
            pass
        selection = js.window.getSelection()
        selection.selectAllChildren(lines_box)
        copied = False
        try:
            copied = bool(js.document.execCommand("copy"))
        except Exception:
            pass
        said.textContent = "copied" if copied else "selected: press Ctrl+C to copy"

    def on_open():
        if not state["samples_shown"]:
            state["samples_shown"] = True
            asyncio.create_task(sample_buttons("samples/ocr/samples.json", "ocr-samples", "ocr-sample",
                                               lambda file, title: asyncio.create_task(from_sample(file, title))))

    take_files("ocr-input", "ocr-drop", take)
    js.document.addEventListener("paste", create_proxy(on_paste))
    lines_box.addEventListener("focusin", create_proxy(on_list_focus))
    by_id("ocr-boxes").addEventListener("click", create_proxy(on_box_click))
    by_id("ocr-copy").addEventListener("click", create_proxy(lambda e: asyncio.create_task(copy_all())))
    by_id("ocr-model").addEventListener("change", create_proxy(
        lambda e: submit(read_again) if card.ready else None))
    card.on("ready", on_ready)
    card.on("open", on_open)
