"""Quantized linear and embedding (tests/quant_checks.py) natively on every backend; the same
checks run in Chromium in tests/web/test_quantized_page.py."""
from __future__ import annotations

import numpy as np
import pytest

from tests import quant_checks
from tests.helpers import need


@pytest.mark.parametrize("device", ["numpy", "simd", "webgpu"])
def test_quantized_linear_and_embedding_match_dequantize(device):
    from engine.device import unavailable_reason
    reason = unavailable_reason(device)
    need(reason is None, f"{device}: {reason}")
    result = quant_checks.run(device)
    failed = {name: ratio for name, ratio in result["errors"].items() if not ratio <= 1.0}
    assert not failed, failed                      # each value: worst error / stated tolerance
    assert len(result["errors"]) == 12 * len(quant_checks.TYPES)


def test_the_checks_catch_a_wrong_answer():
    assert quant_checks.worst_relative([1.0, np.nan], [1.0, 2.0], np.ones(2), 1e-5) == float("inf")
    assert quant_checks.worst_relative([1.0, 2.001], [1.0, 2.0], np.ones(2), 1e-5) > 1
    assert quant_checks.worst_relative([[1.0]], [1.0], np.ones(1), 1e-5) == float("inf")
    one = np.ones(3, np.float32)
    assert quant_checks.exact(one, one) == 0 and quant_checks.exact(one, one + 1e-7) == float("inf")
    assert quant_checks.exact(one.astype(np.float64), one) == float("inf")


def test_random_blocks_are_valid_for_every_type():
    from engine import quants
    from engine.bench.quant import random_blocks
    for qtype in quant_checks.TYPES:
        kind = quants.BY_NAME[qtype]
        raw = random_blocks(qtype, 3, 2 * kind.block_size, 5)
        assert raw.dtype == np.uint8 and raw.size == 3 * kind.row_bytes(2 * kind.block_size)
        assert np.array_equal(raw, random_blocks(qtype, 3, 2 * kind.block_size, 5))      # seeded
        w = quants.dequantize(raw, qtype)
        assert np.isfinite(w).all() and np.abs(w).max() > 0, qtype
    with pytest.raises(ValueError, match="block size"):
        random_blocks("q4_k", 1, 576)
