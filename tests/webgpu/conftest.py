"""The WebGPU shaders natively: PyPI wgpu on whatever adapter the machine has (Mesa lavapipe,
a Vulkan device on the CPU, where there is no GPU: apt mesa-vulkan-drivers)."""
from __future__ import annotations

import pytest

from tests.helpers import need, need_import


@pytest.fixture(scope="session")
def gpu():
    need_import("wgpu", "the native WebGPU tests")
    from engine.backends import webgpu
    try:
        return webgpu.device()                       # the engine's own device
    except RuntimeError as e:
        need(False, str(e))
