"""20 schemas x 10 prompts with SmolLM2-135M-Instruct (the registry's GGUF): every answer parses
and validates (tests/structured/real_models.py)."""
from __future__ import annotations

import pytest

from engine.bench.structured import SCHEMAS
from tests.structured.real_models import answer_all, served

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol(smollm2_gguf):
    yield from served(smollm2_gguf, "smol")


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_answer_validates(smol, name):
    answer_all("smol", name)


def test_the_bench_measures_both_ways_on_the_same_tokens(smol):
    """engine.bench.structured (python -m engine bench structured, the bench page's section): both
    runs counted, the constraint's cost per step reported (the figures go in docs/benchmarks.md)."""
    from engine.bench.structured import CASES, bench_model, format_structured
    result = bench_model(smol, cases=CASES[:2], new_tokens=12, rounds=1)
    assert result["steps"] > 0 and result["free_tok_s"] > 0 and result["schema_tok_s"] > 0
    assert result["ratio"] == round(result["schema_tok_s"] / result["free_tok_s"], 3)
    assert 0 <= result["masked_share"] <= 1 and result["constraint_ms_per_step"] > 0
    assert "ratio" in format_structured({"machine": "m", "new_tokens": 12, "models": [result]})
