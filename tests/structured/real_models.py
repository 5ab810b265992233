"""The 20 schemas x 10 prompts on a real chat model through engine.chat.completions.create, the
`jsonschema` package judging every answer (shared by the SmolLM2 and Qwen2.5 test files, which
run on separate workers)."""
from __future__ import annotations

import json

import engine
from tests.helpers import need_import
from engine.bench.structured import PROMPTS, SCHEMAS, messages

MAX_TOKENS = 48


def served(gguf, name: str):
    """A fixture's body: the GGUF's pipeline (simd) answering engine.chat.completions under `name`."""
    from engine import api
    pipe = engine.pipeline("text-generation", weights=str(gguf), device="simd", capacity=1024)
    with api.serving(pipe, name):
        yield pipe


def answer_all(model: str, name: str) -> list[dict]:
    """The ten prompts' answers for schema `name`: the first five greedy, the rest sampled."""
    jsonschema = need_import("jsonschema", "the judge of structured output (the test extra)")
    check = jsonschema.Draft202012Validator(SCHEMAS[name])
    replies = []
    for i, prompt in enumerate(PROMPTS):
        sampling = {"temperature": 0} if i < 5 else {"temperature": 0.8, "seed": i}
        reply = engine.chat.completions.create(
            model=model, messages=messages(name, prompt), max_tokens=MAX_TOKENS, **sampling,
            response_format={"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}})
        content = reply["choices"][0]["message"]["content"]
        errors = [e.message for e in check.iter_errors(json.loads(content))]
        assert not errors, (name, prompt, content, errors)
        assert reply["usage"]["completion_tokens"] <= MAX_TOKENS
        replies.append(reply)
    return replies
