"""Fixtures of the task tests: pipelines put where the page's worker keeps them."""
from __future__ import annotations

import pytest

from engine.tasks import state


@pytest.fixture
def loaded():
    """Put pipelines where the worker's load() puts them; forget them afterwards."""
    def load(task: str, pipe):
        state.current["pipelines"][task] = pipe
        state.current["device"] = pipe.device or "numpy"
        return pipe
    yield load
    state.current["pipelines"].clear()
    state.current["device"] = None
