"""max_pool2d with stride 1 (the separable path: row maxima, then column maxima) against torch on
every backend: odd sizes, padding, dilation, a 1-wide kernel side, NaN and -inf."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import engine
import engine.nn.functional as F
from tests.helpers import assert_close

CASES = [((1, 3, 7, 9), 5, 2, 1), ((2, 2, 6, 5), 3, 1, 1), ((1, 4, 8, 8), (3, 1), (1, 0), 1),
         ((1, 2, 9, 7), 3, 1, 2), ((1, 1, 4, 4), 2, 0, 1)]


@pytest.mark.parametrize("device", engine.available_devices())
@pytest.mark.parametrize("shape,k,p,d", CASES)
def test_stride_one_matches_torch(device, shape, k, p, d):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    ours = F.max_pool2d(engine.from_numpy(x, device), k, 1, p, dilation=d).numpy()
    assert_close(ours, TF.max_pool2d(torch.from_numpy(x), k, 1, p, dilation=d), rtol=0, atol=0)


def test_infinities_and_uneven_values():
    x = np.random.default_rng(4).standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 2, 3], x[0, 1, :, 0] = np.inf, -np.inf
    ours = F.max_pool2d(engine.from_numpy(x), 5, 1, 2).numpy()
    assert_close(ours, TF.max_pool2d(torch.from_numpy(x), 5, 1, 2), rtol=0, atol=0)
