"""`python -m engine serve` (engine/serve.py) with the official `openai` client as the test client,
on the real SmolLM2 GGUF: models, a greedy chat equal to the pipeline's own, a stream that joins to
it, OpenAI-style errors with the right status for bad JSON, bad fields, unknown models and absurd
max_tokens, 20 concurrent clients, memory that does not grow over 200 requests, a full queue (429) that leaves the request in flight whole, and a
client that disconnects mid-stream, after which the server answers at once."""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import engine

from tests.helpers import need, need_import

openai = need_import("openai", "the official client is the test client (the test extra)")
need_import("uvicorn", "the server runs on uvicorn (the serve extra)")
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(gguf, queue: int):
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", str(gguf), "--port", str(port),
                                "--queue", str(queue)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()                 # "serving NAME at URL" once the model is loaded
    assert line.startswith("serving "), (line, process.stderr.read() if process.poll() is not None else "")
    name = line.split()[1]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:               # and uvicorn listening
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return process, port, name


@pytest.fixture(scope="module")
def server(smollm2_gguf):
    process, port, name = _start(smollm2_gguf, queue=24)
    yield port, name, process.pid
    process.terminate()
    process.wait(10)


def _client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)


def _post(port, path, body: bytes):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("POST", path, body, {"Content-Type": "application/json"})
    reply = connection.getresponse()
    return reply.status, json.loads(reply.read())


def test_models_chat_and_stream_with_the_openai_client(server, smollm2_gguf):
    port, name, _ = server
    client = _client(port)
    assert [m.id for m in client.models.list().data] == [name]
    want = engine.pipeline("text-generation", weights=str(smollm2_gguf), device="simd").chat(QUESTION, max_new_tokens=16)
    reply = client.chat.completions.create(model=name, messages=QUESTION, temperature=0, max_tokens=16)
    assert reply.choices[0].message.content == want and reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens > 0 and reply.usage.total_tokens > reply.usage.completion_tokens
    stream = client.chat.completions.create(model=name, messages=QUESTION, temperature=0, max_tokens=16, stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == want


def test_bad_requests_get_openai_error_bodies_with_the_right_status(server):
    port, name, _ = server
    status, body = _post(port, "/v1/chat/completions", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    client = _client(port)
    with pytest.raises(openai.NotFoundError, match="not served"):
        client.chat.completions.create(model="no-such-model", messages=QUESTION)
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]\.role"):
        client.chat.completions.create(model=name, messages=[{"role": "robot", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model=name, messages=QUESTION, max_tokens=10**9)
    with pytest.raises(openai.BadRequestError, match="tools"):
        client.chat.completions.create(model=name, messages=QUESTION,
                                       tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    status, body = _post(port, "/v1/nowhere", b"{}")
    assert status == 404 and body["error"]["code"] == "not_found"


def test_twenty_concurrent_clients_each_get_their_answer(server):
    port, name, _ = server
    prompts = [[{"role": "user", "content": f"Count to {n}."}] for n in range(2, 22)]
    answers = [None] * len(prompts)

    def ask(i):
        answers[i] = _client(port).chat.completions.create(model=name, messages=prompts[i], temperature=0,
                                                           max_tokens=8).choices[0].message.content
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    alone = [_client(port).chat.completions.create(model=name, messages=p, temperature=0, max_tokens=8)
             .choices[0].message.content for p in prompts]
    assert answers == alone


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_the_servers_memory_does_not_grow_across_200_requests(server):
    port, name, pid = server
    need(os.path.exists(f"/proc/{pid}/status"), "the server's resident memory is read from /proc (Linux)")
    client = _client(port)

    def ask(i):
        stream = i % 2 == 1
        reply = client.chat.completions.create(model=name, messages=[{"role": "user", "content": f"Say {i}."}],
                                               temperature=0.5, seed=i, max_tokens=3, stream=stream)
        if stream:
            assert list(reply)
        else:
            assert reply.choices[0].finish_reason in ("stop", "length")
    for i in range(20):                            # warm: the allocator's pools, the captured steps
        ask(i)
    before = _rss_kib(pid)
    for i in range(20, 200):
        ask(i)
    grown = _rss_kib(pid) - before
    assert grown < 16 * 1024, f"the server grew by {grown} KiB over 180 requests"


def test_a_full_queue_answers_429_and_a_client_that_leaves_stops_its_generation(smollm2_gguf):
    process, port, name = _start(smollm2_gguf, queue=0)
    try:
        # greedy, this runs the whole 1500 tokens (about 15 s at 100 tokens/s) unless it is stopped
        long = {"model": name, "messages": [{"role": "user", "content": "Repeat the word hello 2000 times."}],
                "max_tokens": 1500, "stream": True, "temperature": 0}
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("POST", "/v1/chat/completions", json.dumps(long), {"Content-Type": "application/json"})
        reply = connection.getresponse()
        assert reply.status == 200 and reply.readline().startswith(b"data: ")    # generating
        with pytest.raises(openai.RateLimitError):
            _client(port).chat.completions.create(model=name, messages=QUESTION, max_tokens=4)
        connection.close()                        # the client goes mid-stream
        started, answer = time.monotonic(), None
        while answer is None and time.monotonic() - started < 60:
            try:
                answer = _client(port).chat.completions.create(model=name, messages=QUESTION, temperature=0,
                                                               max_tokens=4)
            except openai.RateLimitError:         # until the server has seen the client go
                time.sleep(0.05)
        assert answer is not None and answer.choices[0].message.content
        assert time.monotonic() - started < 8     # the long answer stopped, not ran out its 1500 tokens
    finally:
        process.terminate()
        process.wait(10)


def test_the_embeddings_route_gives_the_pipelines_vectors(minilm_folder):
    """the app in process (Starlette's test client) over a MiniLM pipeline of the original checkpoint"""
    import numpy as np
    from engine import api
    from engine.serve import Server
    testclient = need_import("starlette.testclient", "Starlette's test client (the serve extra, httpx)")
    pipe = engine.pipeline("sentence-embedding", weights=minilm_folder, device="numpy")
    try:
        # no `with`: each request runs in an event loop of its own that ends with the answer, so
        # the model's turn must pass on before the answer goes (CI hung here when it did not)
        client = testclient.TestClient(Server([pipe], queue=2).app())
        texts = ["A cat sits on the mat.", "Stock markets fell today."]
        reply = client.post("/v1/embeddings", json={"model": pipe.entry.name, "input": texts})
        assert reply.status_code == 200, reply.text
        vectors = np.array([d["embedding"] for d in reply.json()["data"]], np.float32)
        np.testing.assert_array_equal(vectors, pipe(texts))
        bad = client.post("/v1/embeddings", json={"model": pipe.entry.name, "input": []})
        assert bad.status_code == 400 and "input" in bad.json()["error"]["message"]
        assert client.post("/v1/embeddings", json={"model": "other", "input": "x"}).status_code == 404
        assert client.get("/v1/models").json()["data"][0]["id"] == pipe.entry.name
    finally:
        api._served.clear()


def test_structured_output_with_the_openai_clients_parse(server):
    """json_schema from a pydantic model (the client's strict schema: titles, additionalProperties
    false), parsed back by the client itself; and json_object"""
    pydantic = need_import("pydantic", "the openai client's parse() takes a pydantic model")
    jsonschema = need_import("jsonschema", "the judge of structured output (the test extra)")
    port, name, _ = server

    class City(pydantic.BaseModel):
        name: str
        country: str
        population: int
        capital: bool

    client = _client(port)
    ask = [{"role": "user", "content": "Describe Paris as JSON with name, country, population and capital."}]
    parsed = client.chat.completions.parse(model=name, messages=ask, temperature=0, max_tokens=60, response_format=City)
    city = parsed.choices[0].message.parsed
    assert isinstance(city, City) and city.name
    reply = client.chat.completions.create(model=name, messages=ask, temperature=0, max_tokens=40,
                                           response_format={"type": "json_object"})
    assert isinstance(json.loads(reply.choices[0].message.content), dict)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["n"]}
    stream = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Pick a digit."}],
                                            temperature=0, max_tokens=20, stream=True, response_format={
                                                "type": "json_schema", "json_schema": {"name": "d", "schema": schema}})
    jsonschema.validate(json.loads("".join(c.choices[0].delta.content or "" for c in stream if c.choices)), schema)
    with pytest.raises(openai.BadRequestError, match="pattern"):
        client.chat.completions.create(model=name, messages=ask, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}})


TOOLS = [{"type": "function", "function": {
             "name": "add", "description": "Add two numbers",
             "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                            "required": ["a", "b"]}}},
         {"type": "function", "function": {
             "name": "get_time", "description": "The current time in a time zone",
             "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]


@pytest.fixture(scope="module")
def qwen_server(qwen05_gguf):
    process, port, name = _start(qwen05_gguf, queue=4)
    yield port, name
    process.terminate()
    process.wait(10)


def test_tool_calls_with_the_openai_client(qwen_server):
    """Qwen2.5's template writes the tools; each tool_choice gives calls whose arguments are the
    tool's parameters, the tool's result goes back as role "tool" reusing the cached prompt, and
    a stream gives the call as tool_calls deltas"""
    jsonschema = need_import("jsonschema", "the judge of structured output (the test extra)")
    port, name = qwen_server
    client = _client(port)
    ask = [{"role": "user", "content": "What is 12.5 plus 30?"}]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for choice, want in (("required", None), ({"type": "function", "function": {"name": "get_time"}}, "get_time"),
                         ("auto", None)):
        reply = client.chat.completions.create(model=name, messages=ask, temperature=0, max_tokens=60, tools=TOOLS,
                                               tool_choice=choice)
        message = reply.choices[0].message
        assert reply.choices[0].finish_reason == "tool_calls" and message.tool_calls, (choice, message)
        call = message.tool_calls[0]
        assert want in (None, call.function.name) and call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    none = client.chat.completions.create(model=name, messages=ask, temperature=0, max_tokens=30, tools=TOOLS,
                                          tool_choice="none")
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    call = client.chat.completions.create(model=name, messages=ask, temperature=0, max_tokens=60, tools=TOOLS,
                                          tool_choice="required")
    first = call.usage.prompt_tokens
    follow = ask + [call.choices[0].message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.choices[0].message.tool_calls[0].id, "content": "42.5"}]
    reply = client.chat.completions.create(model=name, messages=follow, temperature=0, max_tokens=30, tools=TOOLS,
                                           tool_choice="none")
    assert reply.usage.prompt_tokens > first and reply.usage.prompt_tokens_details.cached_tokens >= first - 1
    stream = client.chat.completions.create(model=name, messages=ask, temperature=0, max_tokens=60, tools=TOOLS,
                                            tool_choice="required", stream=True)
    chunks = [c for c in stream if c.choices]
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name in schemas and chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not "".join(c.choices[0].delta.content or "" for c in chunks).strip()
