"""The OpenAI request and response shapes over the engine's own pipelines, natively and in Pyodide:

    import engine
    reply = engine.chat.completions.create(model="SmolLM2-135M-Instruct",
                                           messages=[{"role": "user", "content": "Hi!"}],
                                           temperature=0, max_tokens=32)
    reply["choices"][0]["message"]["content"]
    for chunk in engine.chat.completions.create(messages=[...], stream=True):
        print(chunk["choices"][0]["delta"].get("content", ""), end="")
    engine.embeddings.create(model="all-MiniLM-L6-v2", input=["a sentence", "another"])

The answers are the dicts OpenAI's API returns (`id`, `object`, `created`, `model`, `choices`
with `message` or `delta` and `finish_reason`, `usage`), so code written against that API reads
them unchanged. `await engine.chat.completions.create_async(...)` is the same call where Python
cannot block (a Pyodide page without JSPI): it loads the model with engine.pipeline_async, and
with stream=True returns an async iterator of the chunks.

Defaults follow OpenAI's (temperature 1, top_p 1); temperature=0 is greedy and gives what
`engine.pipeline("text-generation").chat(messages)` gives. `model` is a registry name (None: the
task's first model) or a GGUF file or URL (engine.pipeline's `model=`), or a name given to a
pipeline of your own with `engine.api.serve(pipe, name)`; the pipelines stay loaded per (model,
device), and a request whose conversation extends the last one reuses its KV cache
(`usage.prompt_tokens_details.cached_tokens`). Bad requests raise engine.errors.InputError naming the field. Not yet supported, and
refused naming the field: response_format other than text, tools, logprobs, n > 1, penalties.
"""
from __future__ import annotations

import asyncio
import time
import uuid

from .errors import InputError

ROLES = ("system", "user", "assistant")
FINISH = {"eos": "stop", "stop": "stop", "cancelled": "stop", "length": "length"}
_pipelines: dict = {}            # (task, model, device) -> the pipeline loaded for such requests
_served: dict = {}               # (task, name) -> a pipeline handed over with serve()


def serve(pipe, name: str | None = None) -> None:
    """Answer requests for `name` (default the pipeline's model name; also requests naming no
    model, for its task) with this loaded pipeline, e.g. one built from weights of your own."""
    _served[(pipe.task, name or pipe.entry.name)] = pipe


def _known(task: str, model, device):
    pipe = _served.get((task, model)) if model is not None else \
        next((p for (t, _), p in _served.items() if t == task), None)
    if pipe is not None and device in (None, pipe.device):
        return pipe
    return _pipelines.get((task, model, device))


def _pipeline(task: str, model, device):
    pipe = _known(task, model, device)
    if pipe is None:
        from .tasks import pipeline
        pipe = _pipelines[(task, model, device)] = pipeline(task, device=device, model=model)
    return pipe


async def _pipeline_async(task: str, model, device):
    pipe = _known(task, model, device)
    if pipe is None:
        from .tasks import pipeline_async
        pipe = _pipelines[(task, model, device)] = await pipeline_async(task, device=device, model=model)
    return pipe


def _text(content, where: str) -> str:
    """A message's content: a string, or OpenAI's list of {"type": "text", "text"} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise InputError(f"{where}.content must be a string or a list of text parts, got {content!r:.80}")


def _messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise InputError(f"messages must be a non-empty list of {{'role', 'content'}}, got {messages!r:.80}")
    out = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InputError(f"{where} must be an object with 'role' and 'content', got {message!r:.80}")
        role = message.get("role")
        if role == "developer":                            # OpenAI's newer name for the system role
            role = "system"
        if role not in ROLES:
            raise InputError(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}")
        out.append({"role": role, "content": _text(message.get("content"), where)})
    return out


def _options(temperature, top_p, max_tokens, max_completion_tokens, stop, seed, n, presence_penalty,
             frequency_penalty, response_format, tools, tool_choice, logprobs, top_logprobs, extra) -> dict:
    """engine.generation.GenerationConfig's options for an OpenAI request; what it cannot honour yet
    is refused by name."""
    if extra:
        raise InputError(f"unknown request field(s): {', '.join(sorted(extra))}")
    unsupported = {"n": n not in (None, 1), "presence_penalty": presence_penalty not in (None, 0),
                   "frequency_penalty": frequency_penalty not in (None, 0),
                   "response_format": response_format not in (None, {"type": "text"}),
                   "tools": bool(tools), "tool_choice": tool_choice not in (None, "none", "auto"),
                   "logprobs": bool(logprobs) or top_logprobs not in (None, 0)}
    refused = [name for name, bad in unsupported.items() if bad]
    if refused:
        raise InputError(f"not supported yet: {', '.join(refused)}")
    if max_tokens is not None and max_completion_tokens is not None and max_tokens != max_completion_tokens:
        raise InputError("max_tokens and max_completion_tokens disagree: give one")
    limit = max_completion_tokens if max_completion_tokens is not None else max_tokens
    options = {"temperature": 1.0 if temperature is None else temperature,
               "top_p": 1.0 if top_p is None else top_p, "seed": seed,
               "stop": () if stop is None else ([stop] if isinstance(stop, str) else stop)}
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InputError(f"max_tokens must be an integer >= 1, got {limit!r}")
        options["max_new_tokens"] = limit
    if not isinstance(options["stop"], (list, tuple)) or len(options["stop"]) > 4:
        raise InputError(f"stop must be a string or a list of at most 4 strings, got {stop!r:.80}")
    from .generation import GenerationConfig
    GenerationConfig.of(options)                           # bad values named here, before any work
    return options


def _usage(stats: dict) -> dict:
    prompt, new = stats.get("prompt_tokens", 0), stats.get("new_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": new, "total_tokens": prompt + new,
            "prompt_tokens_details": {"cached_tokens": stats.get("reused_tokens", 0)}}


class _Request:
    """One chat completion on a loaded pipeline: the whole answer, or its chunks."""

    def __init__(self, pipe, messages, options, stream_options, cancel=None):
        capacity = pipe.generator.cache.capacity
        if options.get("max_new_tokens", 0) > capacity:
            raise InputError(f"max_tokens = {options['max_new_tokens']} is more than {pipe.entry.name}'s context "
                             f"holds here ({capacity} tokens, the prompt included)")
        self.pipe, self.messages, self.options = pipe, messages, dict(options, cancel=cancel)
        self.include_usage = bool((stream_options or {}).get("include_usage"))
        self.id, self.created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        self.model = pipe.entry.name

    def _head(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": f"engine-{self.pipe.device}"}

    def whole(self) -> dict:
        content = "".join(self.pipe.stream(self.messages, **self.options))
        stats = self.pipe.stats
        return {**self._head("chat.completion"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "logprobs": None, "finish_reason": FINISH[stats["stop_reason"]]}],
                "usage": _usage(stats)}

    def _chunk(self, delta: dict, finish=None) -> dict:
        chunk = {**self._head("chat.completion.chunk"),
                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def chunks(self):
        """An iterator of the chunks; a prompt too long for the context fails here, before any."""
        return self._chunks(self.pipe.stream(self.messages, **self.options))

    def _chunks(self, pieces):
        yield self._chunk({"role": "assistant", "content": ""})
        for piece in pieces:
            yield self._chunk({"content": piece})
        stats = self.pipe.stats
        yield self._chunk({}, FINISH[stats["stop_reason"]])
        if self.include_usage:
            yield {**self._head("chat.completion.chunk"), "choices": [], "usage": _usage(stats)}


class Completions:
    """engine.chat.completions"""

    def create(self, *, messages, model: str | None = None, stream: bool = False, temperature=None, top_p=None,
               max_tokens=None, max_completion_tokens=None, stop=None, seed=None, n=None, presence_penalty=None,
               frequency_penalty=None, response_format=None, tools=None, tool_choice=None, logprobs=None,
               top_logprobs=None, stream_options=None, user=None, device: str | None = None, cancel=None, **extra):
        """A chat completion (a dict), or with stream=True an iterator of its chunks. Extensions of
        the request: `device` picks the engine's backend (default the best one); `cancel()`, when
        it returns True, ends the answer before its next token (finish_reason "stop")."""
        fields = dict(temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                      max_completion_tokens=max_completion_tokens, stop=stop, seed=seed, n=n,
                      presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                      response_format=response_format, tools=tools, tool_choice=tool_choice, logprobs=logprobs,
                      top_logprobs=top_logprobs, extra=extra)
        options, messages = _options(**fields), _messages(messages)   # a bad request fails before a model loads
        request = _Request(_pipeline("text-generation", model, device), messages, options, stream_options, cancel)
        return request.chunks() if stream else request.whole()

    async def create_async(self, *, messages, model: str | None = None, stream: bool = False, device=None,
                           stream_options=None, cancel=None, **fields):
        """create(), awaited: the model loads without blocking; with stream=True an async iterator."""
        fields = {name: fields.pop(name, None) for name in
                  ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "n",
                   "presence_penalty", "frequency_penalty", "response_format", "tools", "tool_choice",
                   "logprobs", "top_logprobs")} | {"extra": {k: v for k, v in fields.items() if k != "user"}}
        options, messages = _options(**fields), _messages(messages)
        request = _Request(await _pipeline_async("text-generation", model, device), messages, options,
                           stream_options, cancel)
        if not stream:
            return request.whole()
        return _aiter(request.chunks())


async def _aiter(chunks):
    """The chunks as an async iterator, giving the event loop a turn between them."""
    for chunk in chunks:
        yield chunk
        await asyncio.sleep(0)


class Chat:
    """engine.chat"""
    completions = Completions()


class Embeddings:
    """engine.embeddings"""

    def create(self, *, input, model: str | None = None, encoding_format: str = "float", dimensions=None,
               user=None, device: str | None = None, **extra):
        """OpenAI's embeddings response for a string or a list of strings (unit vectors)."""
        if extra:
            raise InputError(f"unknown request field(s): {', '.join(sorted(extra))}")
        if encoding_format not in ("float", "base64"):
            raise InputError(f"encoding_format must be 'float' or 'base64', got {encoding_format!r}")
        texts = [input] if isinstance(input, str) else input
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
            raise InputError("input must be a non-empty string or a non-empty list of non-empty strings")
        pipe = _pipeline("sentence-embedding", model, device)
        if dimensions is not None and dimensions != pipe.dim:
            raise InputError(f"dimensions: {pipe.entry.name} gives {pipe.dim}, not {dimensions!r}")
        batch = pipe.tokenize(texts)
        vectors = pipe.embed(batch)
        data = []
        for i, vector in enumerate(vectors):
            if encoding_format == "base64":
                import base64
                value = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
            else:
                value = vector.tolist()
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = int(batch["attention_mask"].sum())
        return {"object": "list", "data": data, "model": pipe.entry.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


chat = Chat()
embeddings = Embeddings()
