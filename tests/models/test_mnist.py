"""The MNIST CNN: engine vs its torch twin on the real weights; held-out accuracy."""
import numpy as np
import pytest
import torch

import engine
from models import mnist_cnn
from engine.bench.mnist_twin import TorchMnistCNN
from tests.helpers import assert_close


@pytest.fixture(scope="module")
def models():
    ours = mnist_cnn.load()
    theirs = TorchMnistCNN().eval()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in
                            engine.load_safetensors(mnist_cnn.WEIGHTS).items()})
    return ours, theirs


def test_size_is_in_the_intended_range(models):
    assert 100_000 <= models[0].num_parameters() <= 300_000


def test_logits_match_torch_on_real_weights(models, mnist):
    images, _, _, held = mnist
    x = images[held[:64], None]
    ours, theirs = models
    with torch.no_grad():
        ref = theirs(torch.from_numpy(x))
    assert_close(ours(engine.from_numpy(x)), ref, rtol=0, atol=1e-5)


def test_random_config_matches_torch():
    """A tiny random model: the architecture, not just the trained weights, matches."""
    cfg = mnist_cnn.Config(channels=(3, 5, 4, 6), pooled=2, hidden=7)
    torch.manual_seed(0)
    theirs = TorchMnistCNN(cfg)
    for m in theirs.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
    theirs.eval()
    ours = mnist_cnn.MnistCNN(cfg)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
    with torch.no_grad():
        assert_close(ours(engine.from_numpy(x)), theirs(torch.from_numpy(x)), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_held_out_accuracy_reproduced_by_the_engine(models, mnist):
    images, labels, _, held = mnist
    ours = models[0]
    preds = np.concatenate([ours(engine.from_numpy(images[held[i:i + 500], None])).numpy().argmax(1)
                            for i in range(0, len(held), 500)])
    accuracy = float((preds == labels[held]).mean())
    recorded = float(engine.load_safetensors(mnist_cnn.WEIGHTS).metadata["held_out_accuracy"])
    assert accuracy >= 0.98
    assert accuracy == pytest.approx(recorded, abs=1e-4)   # what the training script measured in torch


def test_held_out_digits_were_never_trained_on(mnist):
    _, labels, train, held = mnist
    assert len(held) == 2000 and len(set(train) & set(held)) == 0 and len(train) + len(held) == len(labels)
    assert np.bincount(labels[held]).tolist() == [200] * 10


def test_folded_batchnorm_gives_the_same_logits(models, mnist):
    images, _, _, held = mnist
    x = images[held[:64], None]
    ours, theirs = models
    folded = mnist_cnn.fold_batchnorm(mnist_cnn.load())
    assert all(isinstance(getattr(folded, f"bn{i}"), engine.nn.Identity) for i in range(1, 5))
    with torch.no_grad():
        ref = theirs(torch.from_numpy(x))
    assert_close(folded(engine.from_numpy(x)), ref, rtol=0, atol=1e-5)
