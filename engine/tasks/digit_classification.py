"""Digit classification: a handwritten digit -> the ten digits' probabilities.

    clf = engine.pipeline("digit-classification")
    clf("seven.png")            # [{"label": "7", "score": 0.98}, ...]

    python -m engine digit seven.png --top 2

Its model (models/mnist_cnn.py) is an image classifier, so engine/tasks/image_classification.py
runs it (the registry entry's `pipeline`); this module brings the digit's own command and the
page's drawing card's entry point.
"""
from __future__ import annotations

import json
import time

import numpy as np

from ..errors import EngineError
from . import state
from .base import Command, softmax_rows
from .image_classification import add_image_arguments, classify_each

TASK = "digit-classification"
CARD = 1                     # where its card stands on the page (engine.tasks.card_order)


def _digit(args) -> int:
    if not 1 <= args.top <= 10:                   # checked before the model is loaded
        raise EngineError(f"--top must be between 1 and 10, got {args.top}")
    return classify_each(TASK, args)


COMMANDS = {
    "digit": Command(
        help="recognise handwritten digits in images",
        description="Recognise a handwritten digit in each image (PNG or .npy; other formats need Pillow "
                    "natively).",
        add_arguments=lambda p: add_image_arguments(
            p, top=3, top_help="how many classes to print (1-10, default 3)",
            json_help='one JSON object per line: {"input", "predictions"}',
            weights_help="a safetensors file, index or URL (default: the bundled one)"),
        run=_digit),
}


async def predict_digit(pixels, width: int, height: int) -> str:
    """RGBA canvas pixels (a JS Uint8ClampedArray) -> the 10 probabilities and timing; a blank
    canvas is no prediction."""
    pipe = state.loaded(TASK)
    image = state.rgba(pixels, width, height)
    async with state.lock:
        t0 = time.perf_counter()
        batch = pipe.preprocess([image])                 # (1, 1, 28, 28)
        blank = not batch.any()
        # preprocess once: the same batch decides "blank" and feeds the model
        probs = softmax_rows(pipe.logits(batch))[0] if not blank else np.zeros(10)
        ms = (time.perf_counter() - t0) * 1e3
        notice = state.notice(pipe)
    return json.dumps({"probs": [round(float(p), 6) for p in probs], "blank": blank,
                       "prediction": None if blank else str(int(np.argmax(probs))),
                       "ms": round(ms, 2), "device": state.current["device"], **notice})


WORKER = (predict_digit,)
