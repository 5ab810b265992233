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
(`usage.prompt_tokens_details.cached_tokens`). Bad requests raise engine.errors.InputError
naming the field, before any model loads.

Structured output (engine.structured): response_format {"type": "json_object"} or {"type":
"json_schema", "json_schema": {"name", "schema"}} constrains the answer token by token, so it
parses (and validates); a schema keyword it cannot keep is refused by name. tools with
tool_choice "auto", "required", "none" or one function: for a model whose chat template writes
tool calls (Qwen2.5's), the calls' JSON is constrained to the tools' names and parameters and
comes back as `tool_calls` (finish_reason "tool_calls"); results go back as role "tool"
messages. Also: logprobs with top_logprobs (the model's log-softmax, before sampling options),
n choices (with a seed, choice i draws with seed + i), presence_penalty and frequency_penalty
(OpenAI's, on the tokens generated).
"""
from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from .errors import InputError

ROLES = ("system", "user", "assistant", "tool")
FINISH = {"eos": "stop", "stop": "stop", "cancelled": "stop", "length": "length"}
_pipelines: dict = {}            # (task, model, device) -> the pipeline loaded for such requests
_served: dict = {}               # (task, name) -> a pipeline handed over with serve()


def serve(pipe, name: str | None = None) -> None:
    """Answer requests for `name` (default the pipeline's model name; also requests naming no
    model, for its task) with this loaded pipeline, e.g. one built from weights of your own."""
    _served[(pipe.task, name or pipe.entry.name)] = pipe


@contextlib.contextmanager
def serving(pipe, name: str | None = None):
    """serve(pipe, name) for the length of a with block only: the page's worker answers with the
    pipeline it has loaded, and never keeps one alive after the page drops it."""
    key = (pipe.task, name or pipe.entry.name)
    before = _served.get(key)
    _served[key] = pipe
    try:
        yield pipe
    finally:
        if before is None:
            _served.pop(key, None)
        else:
            _served[key] = before


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
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls is not None and (not isinstance(calls, list) or not all(
                isinstance(c, dict) and isinstance(c.get("function"), dict) for c in calls)):
            raise InputError(f"{where}.tool_calls must be a list of {{'id', 'type', 'function'}}")
        content = message.get("content")
        entry = {"role": role, "content": None if content is None and calls else _text(content, where)}
        if calls:
            entry["tool_calls"] = calls
        if role == "tool":
            entry["tool_call_id"] = message.get("tool_call_id")
        out.append(entry)
    return out


class _Format:
    """What shapes the answer: response_format's schema, or the tools and tool_choice."""

    def __init__(self, response_format, tools_, tool_choice):
        from .structured import compile_schema, tools
        self.json, self.schema, self.functions, self.choice = False, None, None, None
        if tools_ is not None:
            self.functions, self.choice = tools.check(tools_, tool_choice)
            if self.choice != "none":
                tools.compile_calls(self.functions, self.choice)        # refused by name here
        elif tool_choice not in (None, "none", "auto"):
            raise InputError("tool_choice needs tools")
        self.tools = tools_                      # in the prompt, even for "none" (the cache stays shared)
        self.calls = tools_ is not None and self.choice != "none"
        kind = "text" if response_format is None else \
            response_format.get("type") if isinstance(response_format, dict) else None
        if kind not in ("text", "json_object", "json_schema"):
            raise InputError(f"response_format must be {{'type': 'text' | 'json_object' | 'json_schema'}}, "
                             f"got {response_format!r:.80}")
        if kind != "text":
            if self.calls:
                raise InputError("response_format with tools is not supported: give tool_choice 'none' or one of them")
            self.json = True
            if kind == "json_schema":
                spec = response_format.get("json_schema")
                if not isinstance(spec, dict) or "schema" not in spec:
                    raise InputError("response_format.json_schema must be {'name', 'schema'}")
                self.schema = spec["schema"]
                compile_schema(self.schema, "response_format.json_schema.schema")

    def grammar(self, pipe):
        """The Grammar (or Trigger, or Ban) for `pipe`, or None for free text."""
        from .structured import Ban, Trigger, tools
        if self.tools is not None and not tools.supports(pipe.template):
            raise InputError(f"tools: the chat template of {pipe.entry.name} does not write tool calls "
                             f"(a template with {tools.OPEN} does, e.g. Qwen2.5's)")
        if self.json:
            return pipe.grammar(self.schema)
        if self.tools is None:
            return None
        if not self.calls:                       # "none": the tools are in the prompt, the call's tag is not allowed
            opener = pipe.tokenizer.token_to_id(tools.OPEN)
            return Ban([opener]) if opener is not None else None
        schema = tools.call_schema(self.functions, self.choice)
        if self.choice == "auto":
            return Trigger(pipe.grammar(schema, after=b"\n" + tools.CLOSE.encode()), tools.OPEN.encode(),
                           bare=pipe.grammar(schema))
        return pipe.grammar(schema, before=tools.OPEN.encode(), after=b"\n" + tools.CLOSE.encode())


OPTION_FIELDS = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "n",
                 "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs")


def _parts(messages, response_format=None, tools=None, tool_choice=None, user=None, **fields):
    """(generation options, messages, _Format) of a request's fields: a bad one fails here, before
    a model loads; a field OpenAI does not define is refused by name."""
    extra = {name: value for name, value in fields.items() if name not in OPTION_FIELDS}
    options = _options(**{name: fields.get(name) for name in OPTION_FIELDS}, extra=extra)
    return options, _messages(messages), _Format(response_format, tools, tool_choice)


def _options(temperature, top_p, max_tokens, max_completion_tokens, stop, seed, n, presence_penalty,
             frequency_penalty, logprobs, top_logprobs, extra) -> dict:
    """engine.generation.GenerationConfig's options for an OpenAI request."""
    if extra:
        raise InputError(f"unknown request field(s): {', '.join(sorted(extra))}")
    if max_tokens is not None and max_completion_tokens is not None and max_tokens != max_completion_tokens:
        raise InputError("max_tokens and max_completion_tokens disagree: give one")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16):
        raise InputError(f"n must be an integer in [1, 16], got {n!r}")
    if top_logprobs is not None and not logprobs:
        raise InputError("top_logprobs needs logprobs: true")
    limit = max_completion_tokens if max_completion_tokens is not None else max_tokens
    options = {"temperature": 1.0 if temperature is None else temperature,
               "top_p": 1.0 if top_p is None else top_p, "seed": seed,
               "presence_penalty": presence_penalty or 0.0, "frequency_penalty": frequency_penalty or 0.0,
               "logprobs": (top_logprobs or 0) if logprobs else None,
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


def _usage(stats: dict, new: int) -> dict:
    """OpenAI's usage: the prompt's tokens from the last run's stats, `new` over all the choices."""
    prompt = stats.get("prompt_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": new, "total_tokens": prompt + new,
            "prompt_tokens_details": {"cached_tokens": stats.get("reused_tokens", 0)}}


class _Request:
    """One chat completion on a loaded pipeline: the whole answer, or its chunks; n of them."""

    def __init__(self, pipe, messages, options, stream_options, cancel=None, fmt=None, n=None):
        capacity = pipe.generator.cache.capacity
        if options.get("max_new_tokens", 0) > capacity:
            raise InputError(f"max_tokens = {options['max_new_tokens']} is more than {pipe.entry.name}'s context "
                             f"holds here ({capacity} tokens, the prompt included)")
        from .structured import tools
        self.pipe, self.options, self.n = pipe, dict(options, cancel=cancel), n or 1
        self.fmt = fmt or _Format(None, None, None)
        self.grammar = self.fmt.grammar(pipe)
        self.messages = tools.messages_for_template(messages) if self.fmt.tools is not None else messages
        self.include_usage = bool((stream_options or {}).get("include_usage"))
        self.id, self.created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        self.model = pipe.entry.name

    def _head(self, kind: str) -> dict:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                "system_fingerprint": f"engine-{self.pipe.device}"}

    def _stream(self, i: int):
        options = dict(self.options)
        if i and options.get("seed") is not None:
            options["seed"] += i                           # n choices, each its own draw
        return self.pipe.stream(self.messages, grammar=self.grammar, tools=self.fmt.tools, **options)

    def _logprobs(self, entries) -> dict | None:
        if self.options.get("logprobs") is None:
            return None
        return {"content": [dict(_token(self.pipe.tokenizer, e["id"]), logprob=e["logprob"],
                                 top_logprobs=[dict(_token(self.pipe.tokenizer, i), logprob=lp) for i, lp in e["top"]])
                            for e in entries], "refusal": None}

    def _message(self, text: str) -> tuple[dict, str]:
        finish = FINISH[self.pipe.stats["stop_reason"]]
        if not self.fmt.calls:
            return {"role": "assistant", "content": text}, finish
        from .structured import tools
        content, calls = tools.parse(text, [f["name"] for f in self.fmt.functions])
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        return message, "tool_calls" if calls else finish

    def whole(self) -> dict:
        choices, new, stats = [], 0, {}
        for i in range(self.n):
            text = "".join(self._stream(i))
            stats = self.pipe.stats
            new += stats["new_tokens"]
            message, finish = self._message(text)
            choices.append({"index": i, "message": message, "logprobs": self._logprobs(self.pipe.generator.logprobs),
                            "finish_reason": finish})
        return {**self._head("chat.completion"), "choices": choices, "usage": _usage(stats, new)}

    def _chunk(self, i: int, delta: dict, finish=None, logprobs=None) -> dict:
        chunk = {**self._head("chat.completion.chunk"),
                 "choices": [{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def chunks(self):
        """An iterator of the chunks; a prompt too long for the context fails here, before any."""
        return self._chunks(self._stream(0))

    def _chunks(self, first):
        new, stats = 0, {}
        for i in range(self.n):
            pieces = first if i == 0 else self._stream(i)
            yield self._chunk(i, {"role": "assistant", "content": ""})
            yield from self._pieces(i, pieces)
            stats = self.pipe.stats
            new += stats["new_tokens"]
        if self.include_usage:
            yield {**self._head("chat.completion.chunk"), "choices": [], "usage": _usage(stats, new)}

    def _pieces(self, i: int, pieces):
        """One choice's content chunks; with tools, what follows a call's opening (or an answer
        that starts as a bare call's JSON) is held and comes out as tool_calls at the end."""
        from .structured import tools
        told, text, given = 0, "", 0
        for piece in pieces:
            text += piece
            entries = self.pipe.generator.logprobs
            logprobs, told = self._logprobs(entries[told:]), len(entries)
            if self.fmt.calls:
                cut = 0 if not text.strip() or text.lstrip().startswith("{") else _held(text, tools.OPEN)
                piece, given = text[given:cut], max(given, cut)
            if piece:
                yield self._chunk(i, {"content": piece}, logprobs=logprobs)
        message, finish = self._message(text)
        if self.fmt.calls and text[given:].strip() and not message.get("tool_calls"):
            yield self._chunk(i, {"content": text[given:]})
        for k, call in enumerate(message.get("tool_calls", [])):
            yield self._chunk(i, {"tool_calls": [dict(call, index=k)]})
        yield self._chunk(i, {}, finish)


def _held(text: str, tag: str) -> int:
    """Where content may be given out to: before `tag`, or before a tail that may start it."""
    at = text.find(tag)
    if at >= 0:
        return at
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return len(text) - n
    return len(text)


def _token(tokenizer, i: int) -> dict:
    piece = tokenizer.token_bytes()[i] if i < len(tokenizer.token_bytes()) else None
    if piece is None:
        piece = tokenizer.decode([i], skip_special_tokens=False).encode()
    return {"token": piece.decode("utf-8", "replace"), "bytes": list(piece)}


class Completions:
    """engine.chat.completions"""

    def create(self, *, messages, model: str | None = None, stream: bool = False, temperature=None, top_p=None,
               max_tokens=None, max_completion_tokens=None, stop=None, seed=None, n=None, presence_penalty=None,
               frequency_penalty=None, response_format=None, tools=None, tool_choice=None, logprobs=None,
               top_logprobs=None, stream_options=None, user=None, device: str | None = None, cancel=None, **extra):
        """A chat completion (a dict), or with stream=True an iterator of its chunks. Extensions of
        the request: `device` picks the engine's backend (default the best one); `cancel()`, when
        it returns True, ends the answer before its next token (finish_reason "stop")."""
        options, messages, fmt = _parts(
            messages, response_format, tools, tool_choice, temperature=temperature, top_p=top_p,
            max_tokens=max_tokens, max_completion_tokens=max_completion_tokens, stop=stop, seed=seed, n=n,
            presence_penalty=presence_penalty, frequency_penalty=frequency_penalty, logprobs=logprobs,
            top_logprobs=top_logprobs, **extra)
        request = _Request(_pipeline("text-generation", model, device), messages, options, stream_options, cancel,
                           fmt, n)
        return request.chunks() if stream else request.whole()

    async def create_async(self, *, messages, model: str | None = None, stream: bool = False, device=None,
                           stream_options=None, cancel=None, **fields):
        """create(), awaited: the model loads without blocking; with stream=True an async iterator."""
        options, messages, fmt = _parts(messages, **fields)
        request = _Request(await _pipeline_async("text-generation", model, device), messages, options,
                           stream_options, cancel, fmt, fields.get("n"))
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
