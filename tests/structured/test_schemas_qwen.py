"""20 schemas x 10 prompts with Qwen2.5-Coder-0.5B-Instruct (the registry's GGUF, a 151,936-token
head): every answer parses and validates (tests/structured/real_models.py)."""
from __future__ import annotations

import pytest

from engine.bench.structured import SCHEMAS
from tests.structured.real_models import answer_all, served

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def qwen(qwen05_gguf):
    yield from served(qwen05_gguf, "qwen")


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_answer_validates(qwen, name):
    answer_all("qwen", name)
