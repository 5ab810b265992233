"""The C kernels (wasm_kernels/) against NumPy. They need a C compiler natively: without one
the tests skip with the reason, except under CI, where that is a failure (tests/helpers.py)."""
import numpy as np
import pytest

from tests.helpers import need


def require_simd():
    from engine.device import unavailable_reason
    reason = unavailable_reason("simd")
    need(reason is None, f"simd backend unavailable: {reason}")


@pytest.fixture(autouse=True)
def _simd_available():
    require_simd()


@pytest.fixture
def rng():
    return np.random.default_rng(20240605)
