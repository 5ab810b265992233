"""20 schemas x 10 prompts with Qwen2.5-Coder-0.5B-Instruct (the registry's GGUF, a 151,936-token
head): every answer parses and validates (tests/structured/real_models.py)."""
from __future__ import annotations

import pytest

from engine import api
from tests.structured.real_models import answer_all
from engine.bench.structured import SCHEMAS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def qwen(qwen05_gguf):
    import engine
    pipe = engine.pipeline("text-generation", weights=str(qwen05_gguf), device="simd", capacity=1024)
    api.serve(pipe, "qwen")
    yield pipe
    api._served.clear()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_answer_validates(qwen, name):
    answer_all("qwen", name)
