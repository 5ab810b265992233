"""OpenAI's chat.completions in the page (engine-client.js chat.completions.create, the worker's
chat_completion) in headless Chromium, on SmolLM2: the same greedy request gives the same
answer as engine.chat.completions.create natively, plain and with a JSON Schema (a sample of the
20 schemas, every answer validated by `jsonschema`); a stream is an async iterator whose chunks
join to the answer, and leaving it early stops the generation; the chat card's JSON toggle."""
from __future__ import annotations

import json

import pytest

from engine.bench.structured import PROMPTS, SCHEMAS
from tests.helpers import need_import

SAMPLE = [("person", 0), ("shape", 1), ("order", 7), ("sentiment", 6)]
CREATE = "(request) => window.engineClient.chat.completions.create(request)"


def request(name=None, prompt="What is the capital of France?", max_tokens=40) -> dict:
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": max_tokens}
    if name:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name]}}
    return body


@pytest.fixture(scope="module")
def native(smollm2_gguf):
    """request -> the native answer's content (the simd backend, as the page's)"""
    import engine
    from engine import api
    pipe = engine.pipeline("text-generation", weights=str(smollm2_gguf), device="simd", capacity=4096)
    api.serve(pipe, "native-smol")

    def answer(body):
        return engine.chat.completions.create(model="native-smol", **body)["choices"][0]["message"]["content"]
    yield answer
    api._served.pop(("text-generation", "native-smol"))


def test_the_js_client_answers_as_python_does(dev_server, session_factory, native):
    jsonschema = need_import("jsonschema", "the judge of structured output (the test extra)")
    s = session_factory(dev_server.url)
    page = s.open("index.html#chat")
    plain = page.evaluate(CREATE, request())
    assert plain["object"] == "chat.completion" and plain["choices"][0]["finish_reason"] in ("stop", "length")
    assert plain["choices"][0]["message"]["content"] == native(request())
    assert plain["engine"]["device"] == "simd" and plain["engine"]["stats"]["new_tokens"] > 0
    for name, prompt in SAMPLE:
        body = request(name, PROMPTS[prompt])
        content = page.evaluate(CREATE, body)["choices"][0]["message"]["content"]
        jsonschema.validate(json.loads(content), SCHEMAS[name])
        assert content == native(body), name

    streamed = page.evaluate("""async (request) => {
        const stream = await window.engineClient.chat.completions.create({...request, stream: true});
        const chunks = [];
        for await (const chunk of stream) chunks.push(chunk);
        return {chunks, engine: stream.engine};
    }""", request("person", PROMPTS[0]))
    chunks = streamed["chunks"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant" and len(chunks) > 5
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == native(request("person", PROMPTS[0])) and streamed["engine"]["stats"]["new_tokens"] > 0

    # leaving the loop early stops the answer: the next request is answered at once, whole
    left = page.evaluate("""async (request) => {
        const stream = await window.engineClient.chat.completions.create({...request, stream: true});
        let n = 0;
        for await (const chunk of stream) if (++n === 4) break;
        return n;
    }""", request(prompt="Write a long story about a dragon.", max_tokens=400))
    assert left == 4
    again = page.evaluate(CREATE, request())
    assert again["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    stopped = s.run("from engine.web import worker\nworker.pipeline('text-generation').stats")
    assert stopped["prompt_tokens"] > 0
    assert s.foreign_requests() == [] and s.console_errors == []


def test_the_chat_cards_json_toggle(dev_server, session_factory, native):
    from tests.web.test_chat_card import ask
    s = session_factory(dev_server.url)
    page = s.open("index.html#chat")
    page.wait_for_selector("[data-testid=chat-model][data-loaded]", state="attached", timeout=120_000)
    assert page.is_hidden("[data-testid=chat-schema]")
    page.check("[data-testid=chat-json]")
    assert page.is_visible("[data-testid=chat-schema]")
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "country": {"type": "string", "maxLength": 30}},
              "required": ["city", "country"]}
    page.fill("[data-testid=chat-schema]", json.dumps(schema))
    answer = ask(page, "Where is the Eiffel Tower?")
    value = json.loads(answer)
    assert set(value) >= {"city", "country"}
    page.fill("[data-testid=chat-schema]", "")                    # any JSON object
    assert isinstance(json.loads(ask(page, "Describe a cat.")), dict)
    page.fill("[data-testid=chat-schema]", "{not json")
    page.fill("[data-testid=chat-input]", "Hello")
    page.press("[data-testid=chat-input]", "Enter")
    page.wait_for_selector("[data-testid=chat-error]:not([hidden])")
    assert "not JSON" in page.text_content("[data-testid=chat-error]")
    page.uncheck("[data-testid=chat-json]")
    page.check("[data-testid=chat-tools]")                        # SmolLM2's template writes no tool calls
    page.fill("[data-testid=chat-input]", "What time is it?")
    page.press("[data-testid=chat-input]", "Enter")
    page.wait_for_function("document.querySelector('[data-testid=chat-error]').textContent.includes('tool calls')")
    assert s.foreign_requests() == [] and s.console_errors == []


def test_the_bench_pages_structured_section(dev_server, session_factory):
    from tests.web.test_bench_peers import run_bench
    s = session_factory(dev_server.url)
    results = run_bench(s, "structured=SmolLM2-135M-Instruct&tokens=24", timeout_ms=300_000)
    page = s.page
    r = results["structured"]["SmolLM2-135M-Instruct"]
    assert r["device"] == "simd" and r["steps"] > 0 and r["free_tok_s"] > 0 and r["schema_tok_s"] > 0
    assert "SmolLM2-135M-Instruct" in page.text_content("[data-testid=structured-table]")
