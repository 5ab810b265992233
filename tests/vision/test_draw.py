"""Drawing detections and the PNG writer (engine/vision/draw.py)."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from engine.errors import InputError
from engine.vision import read_image
from engine.vision.draw import (
    draw_detections,
    draw_line,
    draw_rectangle,
    draw_text,
    encode_png,
)


@pytest.mark.parametrize("shape", [(7, 5), (7, 5, 1), (3, 9, 2), (4, 6, 3), (5, 5, 4)])
def test_png_round_trips_through_our_reader_and_pillow(shape):
    img = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    data = encode_png(img)
    expected = img if img.ndim == 3 else img[:, :, None]
    np.testing.assert_array_equal(read_image(data), expected)
    with Image.open(io.BytesIO(data)) as im:
        np.testing.assert_array_equal(np.asarray(im).reshape(expected.shape), expected)
    with pytest.raises(InputError):
        encode_png(img.astype(np.float32))
    with pytest.raises(InputError):
        encode_png(np.zeros((0, 3, 3), np.uint8))


def test_rectangle_line_and_text_stay_inside_the_image():
    img = np.zeros((20, 30, 3), np.uint8)
    draw_rectangle(img, (2, 3, 10, 12), (255, 0, 0), thickness=1)
    box = np.zeros((20, 30), bool)
    box[3, 2:11] = box[12, 2:11] = box[3:13, 2] = box[3:13, 10] = True
    np.testing.assert_array_equal(img[..., 0] == 255, box)
    draw_line(img, (-10, -10), (40, 40), (0, 255, 0), thickness=1)   # clipped, not wrapped
    assert img[5, 5, 1] == 255 and img[19, 19, 1] == 255 and img[0, 25, 1] == 0
    draw_text(img, 25, 15, "person 0.9", (0, 0, 255), background=(9, 9, 9), scale=2)
    assert (img[15:, 25:, 2] == 255).any() and (img[:15, :, 2] == 0).all() and (img[:, :25, 2] == 0).all()


def test_detections_drawn_on_a_copy():
    img = np.full((100, 120, 3), 40, np.uint8)
    people = [{"score": 0.9, "box": {"xmin": 10, "ymin": 30, "xmax": 60, "ymax": 95},
               "keypoints": [{"name": str(i), "x": 20 + 2 * i, "y": 35 + 3 * i, "score": 0.9 if i != 3 else 0.1}
                             for i in range(17)]}]
    things = [{"label": "bus", "score": 0.5, "box": {"xmin": 70, "ymin": 0, "xmax": 119, "ymax": 50}}]
    out = draw_detections(img, people + things)
    assert (img == 40).all() and out.shape == img.shape
    changed = (out != 40).any(axis=2)
    assert changed[30:96, 10:61].any() and changed[0:51, 70:120].any() and not changed[60:, 70:].any()
