"""engine.nn modules: state-dict names like torch's, strict loading with named errors."""
import numpy as np
import pytest
import torch
import torch.nn as tnn

import engine
import engine.nn as nn
from engine.errors import DtypeMismatch, MissingTensor, ShapeMismatch, UnexpectedTensor
from tests.helpers import assert_close


def torch_state(m: tnn.Module) -> dict:
    return {k: v.detach().numpy() for k, v in m.state_dict().items()}


def build_pair():
    ours = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, groups=8, padding="same"), nn.GELU(approximate="tanh"),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Dropout(0.1), nn.Linear(32, 5), nn.LayerNorm(5),
                         nn.SiLU(), nn.Linear(5, 4, bias=False), nn.RMSNorm(4, eps=1e-6), nn.Sigmoid())
    theirs = tnn.Sequential(tnn.Conv2d(3, 8, 3, padding=1), tnn.BatchNorm2d(8), tnn.ReLU6(), tnn.MaxPool2d(2),
                            tnn.Conv2d(8, 8, 3, groups=8, padding="same"), tnn.GELU(approximate="tanh"),
                            tnn.AdaptiveAvgPool2d(2), tnn.Flatten(), tnn.Dropout(0.1), tnn.Linear(32, 5),
                            tnn.LayerNorm(5), tnn.SiLU(), tnn.Linear(5, 4, bias=False), tnn.RMSNorm(4, eps=1e-6),
                            tnn.Sigmoid()).eval()
    with torch.no_grad():                       # non-trivial running stats
        theirs[1].running_mean.uniform_(-1, 1)
        theirs[1].running_var.uniform_(0.5, 2)
        theirs[1].num_batches_tracked.fill_(7)
    return ours, theirs


def test_state_dict_names_shapes_and_forward_match_torch():
    ours, theirs = build_pair()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        assert a.shape == tuple(b.shape), name
    ours.load_state_dict(torch_state(theirs))
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype(np.float32)
    assert_close(ours(engine.tensor(x)), theirs(torch.tensor(x)), atol=1e-6)
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]


def test_embedding_module():
    ours, theirs = nn.Embedding(10, 3), tnn.Embedding(10, 3)
    ours.load_state_dict(torch_state(theirs))
    assert_close(ours(engine.tensor([[1, 9], [0, 0]])), theirs(torch.tensor([[1, 9], [0, 0]])))


def test_strict_loading_names_the_offender():
    ours, theirs = build_pair()
    state = torch_state(theirs)
    missing = dict(state)
    del missing["9.weight"]
    with pytest.raises(MissingTensor, match=r"'9\.weight'"):
        ours.load_state_dict(missing)
    with pytest.raises(UnexpectedTensor, match=r"'extra\.bias'"):
        ours.load_state_dict({**state, "extra.bias": np.zeros(1, np.float32)})
    with pytest.raises(ShapeMismatch, match=r"'4\.weight'.*|expected \(8, 1, 3, 3\), found \(8, 1, 3, 4\)"):
        ours.load_state_dict({**state, "4.weight": np.zeros((8, 1, 3, 4), np.float32)})
    with pytest.raises(DtypeMismatch, match=r"expected float32, found float16.*'0\.bias'"):
        ours.load_state_dict({**state, "0.bias": np.zeros(8, np.float16)})
    result = ours.load_state_dict({**missing, "extra": np.zeros(1, np.float32)}, strict=False)
    assert result.missing_keys == ["9.weight"] and result.unexpected_keys == ["extra"]


def test_load_from_lazy_safetensors_reads_only_what_it_needs(tmp_path):
    ours, theirs = build_pair()
    path = engine.save_safetensors(torch_state(theirs), tmp_path / "m.safetensors")
    ours.load_state_dict(engine.load_safetensors(path))
    x = engine.ones(1, 3, 8, 8)
    assert_close(ours(x), theirs(torch.ones(1, 3, 8, 8)), atol=1e-6)


def test_weights_prefix_loader():
    w = engine.Weights({"encoder.layer.3.weight": engine.zeros(2, 3), "encoder.layer.3.bias": engine.zeros(2)},
                       file="model.safetensors")
    layer = w.pp("encoder").pp("layer").pp(3)
    assert layer.get("weight", (2, 3)).shape == (2, 3)
    assert sorted(layer.keys()) == ["bias", "weight"]
    with pytest.raises(MissingTensor, match=r"'encoder\.layer\.3\.gamma'.*|model\.safetensors"):
        layer.get("gamma")
    with pytest.raises(ShapeMismatch, match=r"encoder\.layer\.3\.weight"):
        layer.get("weight", (3, 2))
    with pytest.raises(DtypeMismatch, match=r"encoder\.layer\.3\.bias"):
        layer.get("bias", (2,), engine.float16)


def test_module_to_dtype_and_repr():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm2d(2))
    m.to(engine.float16)
    assert m[0].weight.dtype is engine.float16 and m[1].num_batches_tracked.dtype is engine.int64
    assert "Linear(in_features=3, out_features=2, bias=True)" in repr(m)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        m.nope


def test_assigning_a_tensor_where_none_was_registers_it():
    conv = nn.Conv2d(2, 3, 1, bias=False)
    assert conv.bias is None and "bias" not in conv.state_dict()
    conv.bias = engine.ones(3)
    assert conv.bias is not None and list(conv.state_dict()) == ["weight", "bias"]
    assert conv(engine.zeros(1, 2, 2, 2)).numpy().tolist() == np.ones((1, 3, 2, 2)).tolist()


@pytest.mark.parametrize("bias", [True, False])
def test_fuse_conv_bn_eval_matches_torch(bias):
    from torch.nn.utils import fuse_conv_bn_eval as torch_fuse
    torch.manual_seed(3)
    tconv, tbn = tnn.Conv2d(4, 6, 3, padding=1, bias=bias).eval(), tnn.BatchNorm2d(6, eps=1e-3).eval()
    with torch.no_grad():
        for t in (tbn.weight, tbn.bias, tbn.running_mean):
            t.uniform_(-1, 1)
        tbn.running_var.uniform_(0.5, 2)
    conv, bn = nn.Conv2d(4, 6, 3, padding=1, bias=bias), nn.BatchNorm2d(6, eps=1e-3)
    conv.load_state_dict({k: engine.from_numpy(v.detach().numpy()) for k, v in tconv.state_dict().items()})
    bn.load_state_dict({k: engine.from_numpy(v.detach().numpy()) for k, v in tbn.state_dict().items()})
    x = torch.randn(2, 4, 7, 5)
    fused = nn.fuse_conv_bn_eval(conv, bn)
    assert fused is conv and conv.bias is not None
    reference = torch_fuse(tconv, tbn)
    assert_close(conv.weight, reference.weight, atol=1e-6)
    assert_close(conv.bias, reference.bias, atol=1e-6)
    with torch.no_grad():
        assert_close(conv(engine.from_numpy(x.numpy())), tbn(tconv(x)), atol=1e-5)
