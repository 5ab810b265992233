"""engine.chat.completions and engine.embeddings (engine/api.py): OpenAI's request and response
shapes over the pipelines, on the real SmolLM2 GGUF and MiniLM checkpoint. Greedy answers equal
the pipeline's own chat(), streamed chunks join to the whole answer, usage counts the tokens,
a follow-up turn reuses the cache, and bad or not-yet-supported requests are refused by field
before any model loads."""
from __future__ import annotations

import asyncio
import base64

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
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
])
def test_bad_or_unsupported_requests_are_refused_by_field_before_a_model_loads(fields, named):
    request = {"model": "not-a-model-anywhere", "messages": QUESTION, **fields}
    with pytest.raises(InputError, match=named.replace("[", r"\[").replace("]", r"\]")):
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
        api._served.clear()
