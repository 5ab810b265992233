"""engine.chat.completions and engine.embeddings (engine/api.py): OpenAI's request and response
shapes over the pipelines, on the real SmolLM2 GGUF and MiniLM checkpoint. Greedy answers equal
the pipeline's own chat(), streamed chunks join to the whole answer, usage counts the tokens,
a follow-up turn reuses the cache, logprobs, n and the penalties, JSON output, and bad or
unsupported requests are refused by field before any model loads."""
from __future__ import annotations

import asyncio
import base64
import re

import numpy as np
import pytest

import engine
from engine import api
from engine.errors import InputError

QUESTION = [{"role": "system", "content": "You are brief."},
            {"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def chat(smollm2_gguf):
    pipe = engine.pipeline("text-generation", weights=str(smollm2_gguf), device="simd", capacity=256)
    api.serve(pipe, "smol")
    yield pipe
    api._served.clear()


def test_greedy_answer_equals_the_pipelines_chat_with_openais_shape(chat):
    want = chat.chat(QUESTION, max_new_tokens=12)
    reply = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=12)
    assert reply["object"] == "chat.completion" and reply["id"].startswith("chatcmpl-")
    assert reply["model"] == chat.entry.name and isinstance(reply["created"], int)
    (choice,) = reply["choices"]
    assert choice["message"] == {"role": "assistant", "content": want}
    assert choice["finish_reason"] == ("length" if chat.stats["new_tokens"] == 12 else "stop")
    usage = reply["usage"]
    assert usage["prompt_tokens"] == len(chat.prompt_ids(QUESTION))
    assert usage["completion_tokens"] == chat.stats["new_tokens"] and 0 < usage["completion_tokens"] <= 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_streamed_chunks_join_to_the_whole_answer(chat):
    whole = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=10)
    chunks = list(engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=10,
                                                 stream=True, stream_options={"include_usage": True}))
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == \
        whole["usage"]["completion_tokens"]


def test_stop_seed_and_a_follow_up_turn(chat):
    plain = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=20)
    content = plain["choices"][0]["message"]["content"]
    word = content.split()[1]
    cut = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=20, stop=[word])
    assert cut["choices"][0]["message"]["content"] == content[:content.index(word)]
    assert cut["choices"][0]["finish_reason"] == "stop"
    sampled = [engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0.9, seed=5,
                                              max_tokens=12)["choices"][0]["message"]["content"] for _ in range(2)]
    assert sampled[0] == sampled[1]
    follow = QUESTION + [{"role": "assistant", "content": content}, {"role": "user", "content": "And of Spain?"}]
    chat.chat(QUESTION, max_new_tokens=20)                      # the cache holds the first turn
    reply = engine.chat.completions.create(model="smol", messages=follow, temperature=0, max_tokens=8)
    assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] > len(chat.prompt_ids(QUESTION)) // 2


def test_the_awaitable_form(chat):
    async def both():
        whole = await engine.chat.completions.create_async(model="smol", messages=QUESTION, temperature=0,
                                                           max_tokens=8)
        stream = await engine.chat.completions.create_async(model="smol", messages=QUESTION, temperature=0,
                                                            max_tokens=8, stream=True)
        return whole, [c async for c in stream]
    whole, chunks = asyncio.run(both())
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == \
        whole["choices"][0]["message"]["content"]


@pytest.mark.parametrize("fields, named", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": 7000}, "temperature"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string", "pattern": "x"}}}]},
     "tools.f.parameters: JSON Schema keyword(s) not supported for constrained output: pattern"),
    ({"tool_choice": "required"}, "tool_choice needs tools"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {
        "type": "function", "function": {"name": "g"}}}, "tool_choice names 'g'"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "response_format": {"type": "json_object"}},
     "response_format with tools"),
    ({"response_format": {"type": "yaml"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"d": {"type": "string", "format": "date"}}}}}},
     "response_format.json_schema.schema/properties/d: JSON Schema keyword(s) not supported for constrained "
     "output: format"),
    ({"n": 0}, "n must be"),
    ({"top_logprobs": 3}, "top_logprobs needs logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "logprobs"),
    ({"presence_penalty": 3}, "presence_penalty"),
])
def test_bad_or_unsupported_requests_are_refused_by_field_before_a_model_loads(fields, named):
    request = {"model": "not-a-model-anywhere", "messages": QUESTION, **fields}
    with pytest.raises(InputError, match=re.escape(named)):
        engine.chat.completions.create(**request)


def test_embeddings_have_openais_shape_and_the_pipelines_vectors(minilm_folder):
    pipe = engine.pipeline("sentence-embedding", weights=minilm_folder, device="numpy")
    api.serve(pipe, "minilm")
    try:
        texts = ["A cat sits on the mat.", "Stock markets fell today."]
        reply = engine.embeddings.create(model="minilm", input=texts)
        assert reply["object"] == "list" and reply["model"] == pipe.entry.name
        assert [d["index"] for d in reply["data"]] == [0, 1]
        np.testing.assert_array_equal(np.array([d["embedding"] for d in reply["data"]], np.float32), pipe(texts))
        assert reply["usage"]["prompt_tokens"] == int(pipe.tokenize(texts)["attention_mask"].sum())
        packed = engine.embeddings.create(model="minilm", input=texts[0], encoding_format="base64")
        (item,) = packed["data"]
        np.testing.assert_array_equal(np.frombuffer(base64.b64decode(item["embedding"]), "<f4"), pipe(texts[0]))
        for bad, named in (({"input": []}, "input"), ({"input": "x", "dimensions": 7}, "dimensions"),
                           ({"input": "x", "encoding_format": "int8"}, "encoding_format")):
            with pytest.raises(InputError, match=named):
                engine.embeddings.create(model="minilm", **bad)
    finally:
        api._served.pop(("sentence-embedding", "minilm"))


def test_logprobs_n_and_penalties(chat):
    reply = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=8,
                                           logprobs=True, top_logprobs=3, n=2)
    first, second = reply["choices"]
    assert first["message"] == second["message"] and [first["index"], second["index"]] == [0, 1]
    entries = first["logprobs"]["content"]
    assert "".join(e["token"] for e in entries) == first["message"]["content"]
    assert reply["usage"]["completion_tokens"] == 2 * len(entries)
    for e in entries:                                  # greedy: the chosen token is the likeliest
        top = [t["logprob"] for t in e["top_logprobs"]]
        assert len(top) == 3 and top == sorted(top, reverse=True) and e["logprob"] == top[0] <= 0
        assert sum(np.exp(top)) <= 1 + 1e-9 and bytes(e["bytes"]).decode() == e["token"]
    sampled = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=1.5, max_tokens=12,
                                             n=3, seed=5)
    texts = [c["message"]["content"] for c in sampled["choices"]]
    assert len(set(texts)) > 1                          # each choice its own draw (seed + i)
    again = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=1.5, max_tokens=12,
                                           n=3, seed=5)
    assert [c["message"]["content"] for c in again["choices"]] == texts
    echo = [{"role": "user", "content": "Repeat the word hello 2000 times."}]
    free = engine.chat.completions.create(model="smol", messages=echo, temperature=0, max_tokens=30)
    penalised = engine.chat.completions.create(model="smol", messages=echo, temperature=0, max_tokens=30,
                                               frequency_penalty=2.0, presence_penalty=1.0)
    count = lambda r: r["choices"][0]["message"]["content"].lower().count("hello")    # noqa: E731
    assert count(penalised) < count(free) / 2, (free, penalised)


def test_json_output_streams_and_parses_and_tools_need_a_template_that_writes_them(chat):
    import json
    schema = {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 20},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["capital", "population"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema}}
    whole = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=40,
                                           response_format=fmt)
    value = json.loads(whole["choices"][0]["message"]["content"])
    assert set(value) >= {"capital", "population"} and len(value["capital"]) <= 20 and value["population"] >= 0
    chunks = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=40,
                                            response_format=fmt, stream=True)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == \
        whole["choices"][0]["message"]["content"]
    anything = engine.chat.completions.create(model="smol", messages=QUESTION, temperature=0, max_tokens=30,
                                              response_format={"type": "json_object"})
    assert isinstance(json.loads(anything["choices"][0]["message"]["content"]), dict)
    with pytest.raises(InputError, match="does not write tool calls"):
        engine.chat.completions.create(model="smol", messages=QUESTION, tools=[
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
