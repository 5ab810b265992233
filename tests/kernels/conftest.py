"""The C kernels (wasm_kernels/) against NumPy. They need a C compiler natively: without one
the tests skip with the reason, except under CI (CI=true), where that is a failure."""
import os

import numpy as np
import pytest


def require_simd():
    from engine.device import unavailable_reason
    reason = unavailable_reason("simd")
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"simd backend unavailable under CI: {reason}")
        pytest.skip(f"simd backend unavailable: {reason}")


@pytest.fixture(autouse=True)
def _simd_available():
    require_simd()


@pytest.fixture
def rng():
    return np.random.default_rng(20240605)
