"""Render samples/digits/strokes.json into PNGs the way a person draws on the page.

    python samples/make_digit_samples.py

strokes.json holds, per digit, pen strokes as polylines in a unit box (x right,
y down). The same strokes are replayed with a real mouse by the browser tests,
so the native samples and the page see the same handwriting. Needs Pillow.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent / "digits"


def generate() -> dict[str, list[list[list[float]]]]:
    """The stroke paths; curves are sampled from simple parametric shapes."""
    def arc(cx, cy, rx, ry, a0, a1, n=16):
        return [[round(cx + rx * math.cos(a), 3), round(cy + ry * math.sin(a), 3)]
                for a in (a0 + (a1 - a0) * i / n for i in range(n + 1))]
    eight = [[round(0.5 + 0.19 * math.sin(2 * t), 3), round(0.5 - 0.37 * math.cos(t), 3)]
             for t in (2 * math.pi * i / 32 for i in range(33))]
    return {
        "0": [arc(0.5, 0.5, 0.24, 0.37, -math.pi / 2, 1.5 * math.pi, 24)],
        "1": [[[0.40, 0.26], [0.54, 0.12], [0.54, 0.88]]],
        "2": [arc(0.5, 0.3, 0.2, 0.17, math.pi * 1.05, math.pi * 2.2, 10) + [[0.3, 0.86], [0.74, 0.86]]],
        "3": [arc(0.48, 0.3, 0.19, 0.17, math.pi * 1.1, math.pi * 2.5, 12)
              + arc(0.48, 0.67, 0.21, 0.2, math.pi * 1.5, math.pi * 2.85, 12)],
        "4": [[[0.6, 0.86], [0.6, 0.12], [0.24, 0.62], [0.78, 0.62]]],
        "5": [[[0.7, 0.13], [0.36, 0.13], [0.33, 0.45]]
              + arc(0.49, 0.64, 0.2, 0.22, math.pi * 1.25, math.pi * 2.75, 12)],
        "6": [[[0.64, 0.12], [0.44, 0.3], [0.33, 0.55]] + arc(0.5, 0.68, 0.17, 0.19, math.pi, math.pi * 3.1, 16)],
        "7": [[[0.26, 0.15], [0.74, 0.15], [0.45, 0.88]]],
        "8": [eight],
        "9": [arc(0.48, 0.32, 0.18, 0.19, 0.0, 2 * math.pi, 16) + [[0.66, 0.34], [0.6, 0.88]]],
    }


def render(strokes, size: int = 280, width: int = 20):
    """Black ink on white, round pen, as the page's canvas draws it."""
    from PIL import Image, ImageDraw
    img = Image.new("L", (size, size), 255)
    draw = ImageDraw.Draw(img)
    for stroke in strokes:
        pts = [(x * size, y * size) for x, y in stroke]
        draw.line(pts, fill=0, width=width, joint="curve")
        for x, y in (pts[0], pts[-1]):
            draw.ellipse((x - width / 2, y - width / 2, x + width / 2, y + width / 2), fill=0)
    return img


def main() -> None:
    strokes = generate()
    HERE.mkdir(parents=True, exist_ok=True)
    (HERE / "strokes.json").write_text(json.dumps(strokes, indent=1) + "\n")
    for digit, paths in strokes.items():
        render(paths).save(HERE / f"{digit}.png", optimize=True)
    print(f"wrote {len(strokes)} samples to {HERE}")


if __name__ == "__main__":
    main()
