"""Render the OCR card's two samples, and the images the OCR tests and benchmarks read, with
Debian's DejaVu fonts (fonts-dejavu-core) and Pillow.

    python samples/make_ocr_samples.py          # writes samples/ocr/screenshot.png and receipt.png

The samples are our own renders (the text below, DejaVu's licence permits embedding its glyphs):
- screenshot.png: a 1280 x 960 screenshot-like page of ~40 lines at several sizes, the bench's image;
- receipt.png: a receipt turned by 6 degrees on a dark table, with a light-on-dark header.
The tests render more at test time with `render_page` (sizes, turns, colours).
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent / "ocr"
FONTS = Path("/usr/share/fonts/truetype/dejavu")

ARTICLE = [
    "Reading text in the browser",
    "The page finds each line of text in an image, then reads it.",
    "Nothing leaves your machine: the networks run in a web worker.",
    "A detector marks where text is, one box per line.",
    "Each box is cut out, turned upright and read by the recognizer.",
    "Settings",
    "Backend: simd (WebAssembly SIMD kernels)",
    "Threads: 2 of 8 cores",
    "Model: PP-OCRv4 mobile, 16 MB in half precision",
    "Last run: 2026-12-08 09:41, 1.2 seconds",
    "Invoice number 4471-2093",
    "Total due: 1,284.50 EUR by 15 January 2027",
    "Questions? Write to support@example.org",
    "Keyboard shortcuts",
    "Ctrl+V pastes a screenshot from the clipboard",
    "Drop a photo anywhere on the card to read it",
    "Press Copy all to copy every line at once",
]
RECEIPT = [
    ("CORNER BAKERY", True), ("12 Market Street", False), ("Tel 555 0199", False),
    ("Sourdough loaf      4.20", False), ("2 x Croissant       3.60", False), ("Flat white          2.90", False),
    ("Apple tart          3.75", False), ("Subtotal           14.45", False), ("VAT 7%              1.01", False),
    ("TOTAL              15.46", True), ("Card payment       15.46", False), ("Thank you for visiting!", False),
]


def font(size: int, bold: bool = False, mono: bool = False):
    from PIL import ImageFont
    name = "DejaVuSansMono" if mono else "DejaVuSans"
    return ImageFont.truetype(str(FONTS / f"{name}{'-Bold' if bold else ''}.ttf"), size)


def render_page(lines, size=(1280, 960), font_size: int = 22, ink=(20, 20, 20), paper=(255, 255, 255),
                margin: int = 40, spacing: float = 1.7, angle: float = 0.0, mono: bool = False):
    """A page of `lines` ((text, bold) pairs or strings) as an RGB PIL image, turned by `angle`
    degrees (counter-clockwise; the corners filled with the paper's colour)."""
    from PIL import Image, ImageDraw
    image = Image.new("RGB", size, paper)
    draw = ImageDraw.Draw(image)
    y = margin
    for line in lines:
        text, bold = (line, False) if isinstance(line, str) else line
        draw.text((margin, y), text, fill=ink, font=font(font_size, bold, mono))
        y += int(font_size * spacing)
    if angle:
        image = image.rotate(angle, resample=Image.BICUBIC, expand=True, fillcolor=paper)
    return image


def screenshot():
    """1280 x 960: a title, paragraphs at 16-30 px and a settings panel on grey: ~40 lines."""
    from PIL import Image, ImageDraw
    image = Image.new("RGB", (1280, 960), (250, 250, 250))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, 1280, 56), fill=(32, 48, 80))
    draw.text((24, 14), "engine - read text", fill=(240, 240, 240), font=font(24, bold=True))
    y, sizes = 80, (30, 20, 20, 20, 20, 26, 18, 18, 18, 18, 22, 22, 18, 26, 18, 18, 18)
    for text, size in zip(ARTICLE, sizes):
        draw.text((40, y), text, fill=(20, 20, 20), font=font(size, bold=size >= 26))
        y += int(size * 1.55)
    draw.rectangle((760, 80, 1250, 930), fill=(228, 232, 240))
    y = 100
    for i in range(22):
        draw.text((780, y), f"Line {i + 1:02d}: item {chr(65 + i)}{i * 37 % 100:02d} ready", fill=(30, 30, 60),
                  font=font(17, mono=i % 3 == 0))
        y += 37
    return image


def receipt():
    """A receipt (monospaced, a white-on-black header) turned by 6 degrees on a dark table."""
    from PIL import Image, ImageDraw
    paper = Image.new("RGB", (520, 700), (246, 244, 236))
    draw = ImageDraw.Draw(paper)
    draw.rectangle((0, 0, 520, 80), fill=(25, 25, 25))
    draw.text((40, 20), RECEIPT[0][0], fill=(250, 250, 250), font=font(34, bold=True))
    y = 110
    for text, bold in RECEIPT[1:]:
        draw.text((40, y), text, fill=(35, 35, 35), font=font(22, bold, mono=True))
        y += 46
    turned = paper.rotate(6, resample=Image.BICUBIC, expand=True, fillcolor=(70, 60, 52))
    table = Image.new("RGB", (760, 900), (70, 60, 52))
    table.paste(turned, ((760 - turned.width) // 2, (900 - turned.height) // 2))
    return table


SAMPLES = [
    {"file": "screenshot.png", "title": "A screenshot", "credit": "rendered by samples/make_ocr_samples.py "
                                                                 "with DejaVu Sans"},
    {"file": "receipt.png", "title": "A receipt, turned", "credit": "rendered by samples/make_ocr_samples.py "
                                                                   "with DejaVu Sans Mono"},
]


def main() -> None:
    HERE.mkdir(exist_ok=True)
    screenshot().save(HERE / "screenshot.png", optimize=True)
    receipt().save(HERE / "receipt.png", optimize=True)
    (HERE / "samples.json").write_text(json.dumps(SAMPLES, indent=1) + "\n")


if __name__ == "__main__":
    main()
