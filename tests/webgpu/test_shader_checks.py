"""The shader checks (shader_checks.py) natively; tests/web/test_webgpu.py runs the same file in
Chromium."""
from __future__ import annotations

import pytest

from tests.webgpu import shader_checks


@pytest.mark.slow
def test_every_shader_matches_numpy(gpu):
    result = shader_checks.run()
    failed = {name: ratio for name, ratio in result["errors"].items() if not ratio <= 1.0}
    assert not failed, failed                      # each value: worst error / stated tolerance
    assert len(result["errors"]) > 100


def test_the_checks_catch_a_wrong_answer():
    import numpy as np
    assert shader_checks.worst([1.0, np.nan], [1.0, 2.0], 1e-6) == float("inf")
    assert shader_checks.worst([1.0, 2.001], [1.0, 2.0], 1e-6) > 1
    assert shader_checks.worst([np.inf, np.nan], [np.inf, np.nan], 1e-6) == 0
