"""The page logic (PyScript on MicroPython, main thread): drawing, status, results.

Inference never runs here: it runs in the worker behind window.engineClient
(engine-client.js), so drawing stays smooth while the model computes. The page's Python is
MicroPython (index.html: `type="mpy"`), so one full CPython (the worker's) is in the page, not
two; bridge.py holds what differs from Pyodide's FFI.
"""
import asyncio
import html

import js
from bridge import error_text, items, to_js, to_py, without_prefix
from pyscript.ffi import create_proxy

document = js.document
client = js.window.engineClient
canvas = document.getElementById("digit-canvas")
ctx = canvas.getContext("2d", to_js({"willReadFrequently": True}))
STAGES = ["pyodide", "numpy", "engine", "weights"]
PEN_WIDTH = 20                                   # canvas pixels at 280 x 280


def by_id(name):
    return document.getElementById(name)


def megabytes(n):
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} kB"


# --- engine status ----------------------------------------------------------------------
seen = {"status": None}
backend = {"current": None}                      # where the worker's models are
samples_shown = {"done": False}                  # the photo card's samples: listed once the engine is up


def show_state(snapshot):
    status = snapshot.status
    by_id("engine-status").textContent = status
    for stage in STAGES:
        p = getattr(snapshot.progress, stage)
        row = document.querySelector(f'.stage[data-stage="{stage}"]')
        bar = row.querySelector("progress")
        bar.value = p.loaded / p.total if p.total else (1 if status == "ready" else 0)
        row.querySelector(".bytes").textContent = f"{megabytes(p.loaded)} / {megabytes(p.total)}" if p.total else ""
    by_id("error-box").hidden = status != "error"
    if status == "error":
        by_id("error-text").textContent = f"The engine could not start: {snapshot.error}"
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
    by_id("isolation").textContent = ("cross-origin isolated: precise timers" if info.crossOriginIsolated
                                      else "not cross-origin isolated: coarse timers")
    show_registry(to_py(info.registry))
    storage_note(info.model, info.weights)
    document.body.dataset.ready = "true"
    schedule_prediction()
    if not samples_shown["done"]:                 # after the engine: 1.6 MB of photos never delay it
        samples_shown["done"] = True
        asyncio.create_task(show_samples())


def show_registry(models):
    """Each card names the model the registry serves its task with; a card whose task this site
    does not serve is hidden."""
    by_task = {task: m for m in models for task in m["tasks"]}
    for card in items(document.querySelectorAll("section[data-task]")):
        entry = by_task.get(card.dataset.task)
        card.hidden = entry is None
        label = card.querySelector("[data-model]")
        if entry is not None and label is not None:
            label.textContent = entry["title"].split(" · ", 1)[-1]


storage_notes = {}
task_models = {}


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


async def load_task(task):
    """Load a task's model (once; a failed load may be tried again) and report how it was stored."""
    info = await client.loadTask(task)
    task_models[task] = info.model
    storage_note(info.model, info.weights)
    return info


def retry(event=None):
    document.body.dataset.ready = "false"
    seen["status"] = None
    client.restart()


# --- drawing ----------------------------------------------------------------------------
drawing = {"active": False, "last": None}


def clear_canvas(event=None):
    ctx.fillStyle = "#fff"
    ctx.fillRect(0, 0, canvas.width, canvas.height)
    pending["drawing"] += 1                     # an answer still in flight is for the old drawing
    if pending["timer"] is not None:
        js.clearTimeout(pending["timer"])
        pending["timer"] = None
    pending["dirty"] = False
    show_result(None)


def point(event):
    rect = canvas.getBoundingClientRect()
    return ((event.clientX - rect.left) * canvas.width / rect.width,
            (event.clientY - rect.top) * canvas.height / rect.height)


def segment(a, b):
    ctx.beginPath()
    ctx.moveTo(*a)
    ctx.lineTo(*b)
    ctx.stroke()


def on_pointer_down(event):
    event.preventDefault()
    canvas.setPointerCapture(event.pointerId)
    ctx.strokeStyle, ctx.lineWidth, ctx.lineCap, ctx.lineJoin = "#000", PEN_WIDTH, "round", "round"
    drawing["active"] = True
    drawing["last"] = point(event)
    segment(drawing["last"], drawing["last"])
    schedule_prediction()


def on_pointer_move(event):
    if not drawing["active"]:
        return
    events = list(event.getCoalescedEvents()) if hasattr(event, "getCoalescedEvents") else []
    for e in events or [event]:
        p = point(e)
        segment(drawing["last"], p)
        drawing["last"] = p
    schedule_prediction()


def on_pointer_up(event):
    drawing["active"] = False
    schedule_prediction()


# --- prediction (debounced, never two at once) --------------------------------------------
pending = {"timer": None, "running": False, "dirty": False, "drawing": 0}


def schedule_prediction():
    if document.body.dataset.ready != "true":
        return
    pending["dirty"] = True
    if pending["timer"] is None and not pending["running"]:
        pending["timer"] = js.setTimeout(run_prediction_proxy, 120)


def run_prediction():
    pending["timer"] = None
    asyncio.create_task(predict())


async def predict():
    pending["running"], pending["dirty"] = True, False
    drawing_id = pending["drawing"]
    try:
        image = ctx.getImageData(0, 0, canvas.width, canvas.height)
        result = await client.callWithPixels("predict_digit", image)
        if drawing_id == pending["drawing"]:     # not cleared meanwhile
            show_result(result)
    except Exception as e:                      # the worker reports errors as JS Errors
        by_id("digit-prediction").textContent = "error"
        by_id("digit-time-ms").textContent = error_text(e)
    finally:
        pending["running"] = False
    if pending["dirty"]:
        schedule_prediction()


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


def show_result(result):
    if result is not None:
        follow_device(result)
    bars = by_id("digit-probs")
    probs = list(result.probs) if result is not None else [0.0] * 10
    blank = result is None or result.blank
    best = max(range(10), key=lambda d: probs[d])
    bars.innerHTML = "".join(
        f'<li data-digit="{d}" data-prob="{p:.6f}" class="{"top" if d == best and not blank else ""}">'
        f'<span>{d}</span><span class="bar" style="width:{p * 100:.1f}%"></span>'
        f'<span class="pct">{p * 100:.1f}%</span></li>' for d, p in enumerate(probs))
    by_id("digit-prediction").textContent = "–" if blank else result.prediction
    by_id("digit-time-ms").textContent = "–" if result is None else f"{result.ms:.1f}"
    by_id("digit-backend").textContent = "–" if result is None else result.device


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
    schedule_prediction()
    if ranking["ranked"]:
        schedule_ranking(0)


run_prediction_proxy = create_proxy(run_prediction)
canvas.addEventListener("pointerdown", create_proxy(on_pointer_down))
canvas.addEventListener("pointermove", create_proxy(on_pointer_move))
canvas.addEventListener("pointerup", create_proxy(on_pointer_up))
canvas.addEventListener("pointercancel", create_proxy(on_pointer_up))
by_id("digit-clear").addEventListener("click", create_proxy(clear_canvas))
by_id("retry").addEventListener("click", create_proxy(retry))
by_id("backend-select").addEventListener("change", create_proxy(lambda e: asyncio.create_task(change_backend(e))))
clear_canvas()
client.subscribe(create_proxy(show_state))


# --- photo classification -----------------------------------------------------------------
IMAGE_TASK = by_id("image-card").dataset.task
MAX_PIXELS = 64_000_000              # the same limit as natively: refuse before decoding more


def card_error(box_id, message):
    """A card's error line: the message, or hidden for None."""
    box = by_id(box_id)
    box.textContent = message or ""
    box.hidden = message is None


def image_error(message):
    card_error("image-error", message)


def weights_progress(task, row_id):
    """A subscriber that shows the download of `task`'s weights (stage "weights:<task>") in a card's row."""
    def show(snapshot):
        p = getattr(snapshot.progress, f"weights:{task}", None)
        row = by_id(row_id)
        if p is None or not p.total:
            return
        row.hidden = p.loaded >= p.total
        row.querySelector("progress").value = p.loaded / p.total
        row.querySelector(".bytes").textContent = f"{megabytes(p.loaded)} / {megabytes(p.total)}"
    return show


async def decode(blob, name):
    """Pixels as the browser decodes them (EXIF orientation applied, no colour management)."""
    options = to_js({"imageOrientation": "from-image", "colorSpaceConversion": "none",
                     "premultiplyAlpha": "none"})
    try:
        bitmap = await js.createImageBitmap(blob, options)
    except Exception:
        raise ValueError(f"{name}: the browser cannot decode this file as an image") from None
    width, height = bitmap.width, bitmap.height
    if width * height > MAX_PIXELS:
        bitmap.close()
        raise ValueError(f"{name}: {width}x{height} is too large (limit {MAX_PIXELS:,} pixels)")
    canvas = js.OffscreenCanvas.new(width, height)
    ctx2d = canvas.getContext("2d")
    ctx2d.drawImage(bitmap, 0, 0)
    bitmap.close()
    return ctx2d.getImageData(0, 0, width, height)


async def classify(blob, name):
    image_error(None)
    preview = by_id("image-preview")
    if preview.src.startswith("blob:"):
        js.URL.revokeObjectURL(preview.src)
    preview.src = js.URL.createObjectURL(blob)
    preview.hidden = False
    by_id("image-top5").innerHTML = ""
    by_id("image-time-ms").textContent = "…"
    try:
        pixels = await decode(blob, name)
        await load_task(IMAGE_TASK)
        by_id("image-progress").hidden = True
        result = await client.callWithPixels("classify_image", pixels, 5)
    except Exception as e:
        by_id("image-time-ms").textContent = "–"
        image_error(error_text(e))
        return
    items = []
    for p in result.predictions:
        label = html.escape(p.label, quote=True)
        items.append(f'<li data-label="{label}" data-index="{p.index}" data-score="{p.score:.6f}">'
                     f'<span title="{label}">{label}</span><span class="bar" style="width:{p.score * 100:.1f}%">'
                     f'</span><span class="pct">{p.score * 100:.1f}%</span></li>')
    follow_device(result)
    by_id("image-top5").innerHTML = "".join(items)
    by_id("image-time-ms").textContent = f"{result.ms:.0f}"
    by_id("image-backend").textContent = result.device


def run_classify(blob, name):
    if document.body.dataset.ready != "true":
        image_error("the engine is still starting; try again in a moment")
        return
    asyncio.create_task(classify(blob, name))


def on_file(event):
    files = event.target.files
    if files.length:
        run_classify(files.item(0), files.item(0).name)
    event.target.value = ""                          # choosing the same file again fires change


def on_drop(event):
    event.preventDefault()
    by_id("image-drop").classList.remove("over")
    files = event.dataTransfer.files
    if files.length:
        run_classify(files.item(0), files.item(0).name)


def on_drag(event):
    event.preventDefault()
    by_id("image-drop").classList.toggle("over", event.type == "dragover")


def on_paste(event):
    files = event.clipboardData.files if event.clipboardData else None
    if files and files.length:
        run_classify(files.item(0), files.item(0).name or "pasted image")


async def classify_sample(url, name):
    response = await js.fetch(url)
    run_classify(await response.blob(), name)


async def show_samples():
    try:
        samples = to_py(await (await js.fetch("samples/samples.json")).json())
    except Exception:
        return                                        # a site built without samples
    box = by_id("image-samples")
    for sample in samples:
        button = document.createElement("button")
        button.type = "button"
        button.dataset.sample = sample["file"]
        button.title = sample["credit"]
        thumb = sample.get("thumb", sample["file"])
        button.innerHTML = f'<img src="samples/{thumb}" alt="{sample["title"]}"><span>{sample["title"]}</span>'
        url, title = f"samples/{sample['file']}", sample["title"]
        button.addEventListener("click", create_proxy(
            lambda e, url=url, title=title: asyncio.create_task(classify_sample(url, title))))
        box.appendChild(button)


by_id("image-input").addEventListener("change", create_proxy(on_file))
for kind in ("dragover", "dragleave"):
    by_id("image-drop").addEventListener(kind, create_proxy(on_drag))
by_id("image-drop").addEventListener("drop", create_proxy(on_drop))
document.addEventListener("paste", create_proxy(on_paste))
client.subscribe(create_proxy(weights_progress(IMAGE_TASK, "image-progress")))


# --- sentences: ranked by meaning, and the similarity of every pair ---------------------------
SENTENCE_TASK = by_id("sentences-card").dataset.task
MAX_SENTENCES = 64                   # one request; more would make a heatmap nobody can read
RERANK_MS = 250                      # after the first ranking, edits re-rank once typing pauses
DENSE = 12                           # above this many sentences the heatmap cells carry no numbers
ranking = {"timer": None, "running": False, "dirty": False, "ranked": False}


def read_sentences():
    """(query, [(line index, sentence), ...]) from the card; ValueError says what to fix."""
    query = by_id("sentences-query").value.strip()
    lines = by_id("sentences-list").value.split("\n")
    sentences = [(i, line.strip()) for i, line in enumerate(lines) if line.strip()]    # blank lines: ignored
    if not query:
        raise ValueError("Type a query: the sentences are ranked by how close they are to it.")
    if not sentences:
        raise ValueError("Add at least one sentence to rank, one per line.")
    if len(sentences) > MAX_SENTENCES:
        raise ValueError(f"{len(sentences)} sentences is too many: at most {MAX_SENTENCES} are compared at once. "
                         f"Remove {len(sentences) - MAX_SENTENCES} of them.")
    return query, sentences


def clear_sentences():
    by_id("sentences-ranking").innerHTML = ""
    by_id("sentences-heatmap").innerHTML = ""
    by_id("sentences-heatmap-box").hidden = True
    by_id("sentences-truncated").hidden = True
    by_id("sentences-time-ms").textContent = "–"


def schedule_ranking(delay=RERANK_MS):
    """Rank after `delay` ms of quiet (each edit restarts the wait); never two requests at once:
    an edit during a ranking is ranked when that one ends."""
    ranking["dirty"] = True
    if ranking["timer"] is not None:
        js.clearTimeout(ranking["timer"])
        ranking["timer"] = None
    if not ranking["running"]:
        ranking["timer"] = js.setTimeout(start_ranking_proxy, delay)


def start_ranking():
    ranking["timer"] = None
    asyncio.create_task(rank())


async def rank():
    ranking["running"], ranking["dirty"] = True, False
    try:
        await rank_once()
    finally:
        ranking["running"] = False
    if ranking["dirty"]:
        schedule_ranking()


async def rank_once():
    if document.body.dataset.ready != "true":
        card_error("sentences-error", "the engine is still starting; try again in a moment")
        return
    try:
        query, sentences = read_sentences()
    except ValueError as e:
        clear_sentences()
        card_error("sentences-error", str(e))
        return
    card_error("sentences-error", None)
    by_id("sentences-time-ms").textContent = "…"
    doing = "The model could not be loaded: "
    try:
        await load_task(SENTENCE_TASK)              # once: the first Rank downloads the model
        by_id("sentences-progress").hidden = True
        doing = ""
        result = await client.python("embed_texts", to_js([query] + [text for _, text in sentences]))
    except Exception as e:                          # the worker's errors arrive as JS Errors
        clear_sentences()
        card_error("sentences-error", doing + without_prefix(error_text(e), "engine.errors."))
        return
    ranking["ranked"] = True
    follow_device(result)
    storage_note(task_models.get(SENTENCE_TASK), result)
    show_ranking(sentences, result)


def heat(value):
    """A cell's colours: blue for similar, white for unrelated, red for opposite."""
    v = max(-1.0, min(1.0, value))
    light = 97 - 52 * abs(v)
    return f"background:hsl({218 if v >= 0 else 4} 70% {light:.0f}%);color:{'#fff' if light < 62 else 'inherit'}"


def show_ranking(sentences, result):
    """The sentences ordered by similarity to the query, their heatmap, timing and notes."""
    similarity = to_py(result.similarity)          # (1 + N, 1 + N): the query, then the sentences
    lines = [line for line, _ in sentences]
    texts = [html.escape(text, quote=True) for _, text in sentences]
    scores = similarity[0][1:]
    order = sorted(range(len(sentences)), key=lambda k: -scores[k])
    by_id("sentences-ranking").innerHTML = "".join(
        f'<li data-index="{lines[k]}" data-score="{scores[k]:.6f}" class="{"top" if place == 0 else ""}">'
        f'<span class="num" title="line {lines[k] + 1}">{lines[k] + 1}</span><span class="text" title="{texts[k]}">{texts[k]}</span>'
        f'<span class="bar" style="width:{max(scores[k], 0.0) * 100:.1f}%"></span>'
        f'<span class="pct">{scores[k]:.3f}</span></li>' for place, k in enumerate(order))
    show_heatmap([row[1:] for row in similarity[1:]], lines, texts)
    by_id("sentences-time-ms").textContent = f"{result.ms:.0f}"
    by_id("sentences-backend").textContent = result.device
    show_sentence_notes(result, lines)


def show_heatmap(pairs, lines, texts):
    """(N, N) similarities as a table; rows and columns named by line number (the text in a tooltip)."""
    n = len(pairs)

    def cell(i, j):
        v = pairs[i][j]
        shown = f"{round(v, 2) + 0.0:.2f}" if n <= DENSE else ""         # + 0.0: never "-0.00"
        return (f'<td data-row="{i}" data-col="{j}" data-value="{v:.6f}" style="{heat(v)}" '
                f'title="{lines[i] + 1} · {lines[j] + 1}: {v:.3f}&#10;{texts[i]}&#10;{texts[j]}">{shown}</td>')
    header = "".join(f'<th scope="col" title="{texts[j]}">{lines[j] + 1}</th>' for j in range(n))
    body = "".join(f'<tr><th scope="row" title="{texts[i]}">{lines[i] + 1}</th>'
                   f'{"".join(cell(i, j) for j in range(n))}</tr>' for i in range(n))
    table = by_id("sentences-heatmap")
    table.innerHTML = f"<thead><tr><th></th>{header}</tr></thead><tbody>{body}</tbody>"
    table.classList.toggle("dense", n > DENSE)
    by_id("sentences-heatmap-box").hidden = False


def show_sentence_notes(result, lines):
    """Which texts were cut to the model's length, and how much of the word-embedding table is here."""
    cut = [f"sentence {lines[k - 1] + 1}" if k else "the query" for k in to_py(result.truncated)]
    note = by_id("sentences-truncated")
    note.hidden = not cut
    if cut:
        names = cut[0] if len(cut) == 1 else ", ".join(cut[:-1]) + " and " + cut[-1]
        note.textContent = (f"{names} {'is' if len(cut) == 1 else 'are'} longer than {result.max_length} tokens; "
                            f"only {'its' if len(cut) == 1 else 'their'} start was used")
    tables = to_py(result.rows).values()
    fetched, total = sum(t["fetched_rows"] for t in tables), sum(t["rows"] for t in tables)
    by_id("sentences-rows").textContent = f"{fetched:,} of {total:,} word vectors downloaded" if total else ""


def on_query_key(event):
    if event.key == "Enter" and not event.isComposing:      # not the Enter that ends an IME composition
        event.preventDefault()
        schedule_ranking(0)


def on_sentences_edit(event):
    if ranking["ranked"] or ranking["running"]:             # an edit during the first ranking counts too
        schedule_ranking()


start_ranking_proxy = create_proxy(start_ranking)
by_id("sentences-rank").addEventListener("click", create_proxy(lambda e: schedule_ranking(0)))
by_id("sentences-query").addEventListener("keydown", create_proxy(on_query_key))
for box in ("sentences-query", "sentences-list"):
    by_id(box).addEventListener("input", create_proxy(on_sentences_edit))
client.subscribe(create_proxy(weights_progress(SENTENCE_TASK, "sentences-progress")))


# --- chat: web/chat_card.py (pyscript.json puts it beside this file) ------------------------------
import chat_card  # noqa: E402

chat_card.start(client, by_id, card_error, weights_progress, load_task)
