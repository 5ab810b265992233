"""F.interpolate(mode="nearest") against torch on every backend: whole repeats (the broadcast
path) and other sizes (the gather path)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import engine
import engine.nn.functional as F
from tests.helpers import assert_close

CASES = [((2, 3, 5, 7), {"scale_factor": 2}), ((1, 4, 3, 3), {"scale_factor": 3.0}),
         ((1, 2, 5, 7), {"size": (8, 9)}), ((2, 2, 6, 8), {"size": (3, 4)}),
         ((1, 3, 4, 6), {"scale_factor": (2, 1.5)}), ((2, 3, 7), {"scale_factor": 2}),
         ((1, 1, 5, 4), {"scale_factor": 1.7, "recompute_scale_factor": True})]


@pytest.mark.parametrize("device", engine.available_devices())
@pytest.mark.parametrize("shape,kw", CASES)
def test_nearest_matches_torch(device, shape, kw):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ours = F.interpolate(engine.from_numpy(x, device), **kw).numpy()
    assert_close(ours, TF.interpolate(torch.from_numpy(x), mode="nearest", **kw), rtol=0, atol=0)


def test_bad_arguments_are_refused():
    x = engine.from_numpy(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(NotImplementedError):
        F.interpolate(x, scale_factor=2, mode="bilinear")
    with pytest.raises(ValueError):
        F.interpolate(x, size=8, scale_factor=2)
    with pytest.raises(ValueError):
        F.interpolate(engine.from_numpy(np.zeros((4, 4), np.float32)), scale_factor=2)
