"""20 schemas x 10 prompts with SmolLM2-135M-Instruct (the registry's GGUF): every answer parses
and validates (tests/structured/real_models.py)."""
from __future__ import annotations

import pytest

from engine import api
from tests.structured.real_models import answer_all
from engine.bench.structured import SCHEMAS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol(smollm2_gguf):
    import engine
    pipe = engine.pipeline("text-generation", weights=str(smollm2_gguf), device="simd", capacity=1024)
    api.serve(pipe, "smol")
    yield pipe
    api._served.clear()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_answer_validates(smol, name):
    answer_all("smol", name)
