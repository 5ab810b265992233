"""The photo card: choose, drop or paste a photo (or click a sample); the top five ImageNet classes.

The browser decodes the image (EXIF orientation applied, no colour management) and the worker
gets its RGBA pixels; the samples are listed the first time the card is opened.
"""
import asyncio
import html

import js
from bridge import by_id, error_text, take_files, to_js, to_py
from pyscript.ffi import create_proxy

MAX_PIXELS = 64_000_000              # the same limit as natively: refuse before decoding more


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


def start(card):
    client, document = card.client, js.document
    samples_shown = {"done": False}

    async def classify(blob, name):
        card.error(None)
        preview = by_id("image-preview")
        if preview.src.startswith("blob:"):
            js.URL.revokeObjectURL(preview.src)
        preview.src = js.URL.createObjectURL(blob)
        preview.hidden = False
        by_id("image-top5").innerHTML = ""
        by_id("image-time-ms").textContent = "…"
        try:
            pixels = await decode(blob, name)
            await card.load()
            result = await client.callWithPixels("classify_image", pixels, 5)
        except Exception as e:
            by_id("image-time-ms").textContent = "–"
            card.error(error_text(e))
            return
        rows = []
        for p in result.predictions:
            label = html.escape(p.label, quote=True)
            rows.append(f'<li data-label="{label}" data-index="{p.index}" data-score="{p.score:.6f}">'
                        f'<span title="{label}">{label}</span><span class="bar" style="width:{p.score * 100:.1f}%">'
                        f'</span><span class="pct">{p.score * 100:.1f}%</span></li>')
        card.follow_device(result)
        by_id("image-top5").innerHTML = "".join(rows)
        by_id("image-time-ms").textContent = f"{result.ms:.0f}"
        by_id("image-backend").textContent = result.device

    def run_classify(blob, name):
        if not card.ready:
            card.error("the engine is still starting; try again in a moment")
            return
        asyncio.create_task(classify(blob, name))

    def on_paste(event):
        files = event.clipboardData.files if event.clipboardData else None
        if card.shown and files and files.length:   # a paste elsewhere (another card) is not for us
            run_classify(files.item(0), files.item(0).name or "pasted image")

    async def classify_sample(url, name):
        response = await js.fetch(url)
        run_classify(await response.blob(), name)

    async def show_samples():
        try:
            samples = to_py(await (await js.fetch("samples/samples.json")).json())
        except Exception:
            return                                    # a site built without samples
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

    def on_open():
        if not samples_shown["done"]:                # after the engine: 1.6 MB of photos never delay it
            samples_shown["done"] = True
            asyncio.create_task(show_samples())

    take_files("image-input", "image-drop", run_classify)
    document.addEventListener("paste", create_proxy(on_paste))
    card.on("open", on_open)
