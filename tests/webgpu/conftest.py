"""The WebGPU shaders natively: PyPI wgpu on whatever adapter the machine has (Mesa lavapipe,
a Vulkan device on the CPU, where there is no GPU: apt mesa-vulkan-drivers)."""
from __future__ import annotations

import pytest

from tests.helpers import need


@pytest.fixture(scope="session")
def gpu():
    try:
        import wgpu  # noqa: F401
    except ImportError:
        need(False, "the wgpu package is not installed (pip install -e .[test])")
    from engine.backends import webgpu
    try:
        return webgpu.device()                       # the engine's own device
    except RuntimeError as e:
        need(False, str(e))
