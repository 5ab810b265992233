"""The handwritten-digit card: draw with a mouse, finger or pen; the answer updates as you draw.

Predictions are debounced (120 ms after the last stroke) and never two at once: strokes made while
one runs are predicted when it ends, and Clear wins over an answer still on its way.
"""
import asyncio

import js
from bridge import by_id, error_text, to_js
from pyscript.ffi import create_proxy

PEN_WIDTH = 20                                   # canvas pixels at 280 x 280
DEBOUNCE_MS = 120


def start(card):
    client = card.client
    canvas = by_id("digit-canvas")
    ctx = canvas.getContext("2d", to_js({"willReadFrequently": True}))
    drawing = {"active": False, "last": None}
    # drawing: counts Clears, so an answer for an older drawing is dropped
    pending = {"timer": None, "running": False, "dirty": False, "drawing": 0}

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

    def schedule_prediction():
        if not card.ready or not card.opened:
            return                                  # drawn before the engine was up: predicted once it is
        pending["dirty"] = True
        if pending["timer"] is None and not pending["running"]:
            pending["timer"] = js.setTimeout(run_prediction_proxy, DEBOUNCE_MS)

    def run_prediction():
        pending["timer"] = None
        asyncio.create_task(predict())

    async def predict():
        pending["running"], pending["dirty"] = True, False
        drawing_id = pending["drawing"]
        try:
            await card.load()                       # at once when the page started with this card
            image = ctx.getImageData(0, 0, canvas.width, canvas.height)
            result = await client.callWithPixels("predict_digit", image)
            if result is not None:                  # a dropped answer may still carry the only notice
                card.follow_device(result)
            if drawing_id == pending["drawing"]:     # not cleared meanwhile
                card.error(None)
                show_result(result)
        except Exception as e:                      # the worker reports errors as JS Errors
            by_id("digit-prediction").textContent = "error"
            card.error(error_text(e))
        finally:
            pending["running"] = False
        if pending["dirty"]:
            schedule_prediction()

    def show_result(result):
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

    run_prediction_proxy = create_proxy(run_prediction)
    canvas.addEventListener("pointerdown", create_proxy(on_pointer_down))
    canvas.addEventListener("pointermove", create_proxy(on_pointer_move))
    canvas.addEventListener("pointerup", create_proxy(on_pointer_up))
    canvas.addEventListener("pointercancel", create_proxy(on_pointer_up))
    by_id("digit-clear").addEventListener("click", create_proxy(clear_canvas))
    card.on("open", schedule_prediction)
    card.on("backend", schedule_prediction)
    clear_canvas()
