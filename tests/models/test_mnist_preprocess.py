"""MNIST preprocessing: drawn, scanned, inverted, transparent and blank digits."""
import json
from pathlib import Path

import numpy as np
import pytest

import engine
from models import mnist_cnn

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "digits"


@pytest.fixture(scope="module")
def clf():
    return engine.pipeline("digit-classification")


def upscale_on_paper(digit28: np.ndarray, size=200, offset=(30, 50)) -> np.ndarray:
    """An MNIST digit as a phone photo might show it: big, off-centre, dark ink on light paper."""
    big = np.kron(digit28, np.ones((5, 5), np.float32))              # 140x140
    paper = np.full((size, size + 40), 0.92, np.float32)
    y, x = offset
    paper[y:y + 140, x:x + 140] -= 0.85 * big
    return (np.clip(paper, 0, 1) * 255).astype(np.uint8)


def test_mnist_digits_survive_preprocessing(mnist):
    images, labels, _, held = mnist
    model = mnist_cnn.load()
    batch = np.stack([mnist_cnn.preprocess(images[i]) for i in held[:500]])[:, None]
    preds = model(engine.from_numpy(batch)).numpy().argmax(1)
    assert (preds == labels[held[:500]]).mean() >= 0.98


def test_scanned_inverted_offcentre_digit_predicts_like_the_original(mnist, clf):
    images, labels, _, held = mnist
    agree = 0
    for i in held[:40]:
        photo = upscale_on_paper(images[i])
        agree += clf(photo, top_k=1)[0]["label"] == clf(images[i], top_k=1)[0]["label"]
    assert agree >= 39


def test_output_format_like_mnist():
    img = np.zeros((300, 200), np.uint8)
    img[50:250, 90:110] = 255                                       # a tall bar, white on black
    out = mnist_cnn.preprocess(img)
    assert out.shape == (28, 28) and out.dtype == np.float32 and out.max() <= 1.0
    rows, cols = np.flatnonzero(out.max(1) > 0), np.flatnonzero(out.max(0) > 0)
    assert rows[-1] - rows[0] + 1 == 20                             # longer side scaled to 20
    ys, xs = np.nonzero(out)
    w = out[ys, xs]
    assert abs((ys * w).sum() / w.sum() - 13.5) <= 0.5 and abs((xs * w).sum() / w.sum() - 13.5) <= 0.5


def test_transparent_rgba_and_blank():
    rgba = np.zeros((100, 100, 4), np.uint8)                        # black ink on a transparent canvas
    rgba[20:80, 45:55, 3] = 255
    gray = np.full((100, 100), 255, np.uint8)
    gray[20:80, 45:55] = 0
    np.testing.assert_allclose(mnist_cnn.preprocess(rgba), mnist_cnn.preprocess(gray), atol=1e-6)
    assert not mnist_cnn.preprocess(np.full((50, 50, 3), 255, np.uint8)).any()
    with pytest.raises(ValueError, match="shape"):
        mnist_cnn.preprocess(np.zeros((4, 4, 5)))


def test_drawn_samples_are_recognised(clf):
    strokes = json.loads((SAMPLES / "strokes.json").read_text())
    for digit in strokes:
        preds = clf(str(SAMPLES / f"{digit}.png"))
        assert preds[0]["label"] == digit, (digit, preds)
        assert [p["score"] for p in preds] == sorted((p["score"] for p in preds), reverse=True)


def test_pipeline_inputs_and_batching(clf):
    from PIL import Image
    path = SAMPLES / "7.png"
    by_path = clf(str(path), top_k=3)
    by_pil = clf(Image.open(path), top_k=3)
    by_array = clf(np.asarray(Image.open(path)), top_k=3)
    assert by_path == by_pil == by_array and len(by_path) == 3
    batch = clf([str(path), str(SAMPLES / "1.png")], top_k=1)
    assert [b[0]["label"] for b in batch] == ["7", "1"]
    assert sum(p["score"] for p in clf(str(path), top_k=10)) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(engine.EngineError, match="unknown task"):
        engine.pipeline("translation")
    with pytest.raises(engine.EngineError, match="available: numpy"):
        engine.pipeline("digit-classification", device="metal")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
def test_median_is_numpys_bit_for_bit(dtype):
    """models.mnist_cnn.median (np.median's steps without numpy.ma): odd and even sizes, NaN."""
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 4, 111, 112):
        x = (rng.random(n) * 255).astype(dtype)
        cases = [x]
        if x.dtype.kind == "f":
            cases.append(np.where(np.arange(n) == n // 2, np.nan, x).astype(dtype))
        for values in cases:
            got, want = mnist_cnn.median(values), np.median(values)
            assert type(got) is type(want) and np.array_equal(got, want, equal_nan=True), (n, values)


def test_preprocess_imports_no_masked_arrays():
    """np.median imports numpy.ma on first use: about half a second of the page's first digit answer."""
    import subprocess
    import sys
    code = ("import sys, numpy as np\nfrom models import mnist_cnn\n"
            "mnist_cnn.preprocess(np.full((280, 280, 4), 255, np.uint8))\n"
            "mnist_cnn.preprocess(np.random.default_rng(0).random((40, 30)))\nprint('numpy.ma' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=SAMPLES.parents[1], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
