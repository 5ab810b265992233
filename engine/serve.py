"""`python -m engine serve`: the OpenAI-compatible HTTP API (engine/api.py) natively, on Starlette
and uvicorn (the `serve` extra), for any OpenAI client:

    python -m engine serve --model SmolLM2-135M-Instruct --port 8080
    OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="unused").chat.completions.create(...)

Routes: POST /v1/chat/completions (with "stream": true, server-sent events ending in
`data: [DONE]`), POST /v1/embeddings, GET /v1/models. The models named at the start are loaded
then and are the only ones served; a request for another gets 404.

Each model answers one request at a time, in a thread of its own so the server keeps taking
requests; up to `queue` more wait their turn, and one past that gets 429 at once, leaving the
others untouched. A client that disconnects mid-stream stops its generation before the next
token. Errors have OpenAI's body, {"error": {"message", "type", "param", "code"}}: 400 for bad
JSON and bad fields (named), 404 for an unknown model or route, 413 for a body over 1 MiB, 429
for a full queue, 500 for a failure of the engine's own.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time

from . import api
from .errors import EngineError, InputError

MAX_BODY = 1 << 20
TASKS = {"/v1/chat/completions": "text-generation", "/v1/embeddings": "sentence-embedding"}


def _error_body(message: str, kind: str = "invalid_request_error", code=None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _error(status: int, message: str, kind: str = "invalid_request_error", code=None):
    from starlette.responses import JSONResponse
    return JSONResponse(_error_body(message, kind, code), status)


class _Model:
    """A served pipeline, its turn (one request at a time) and its waiting line."""

    def __init__(self, pipe, queue: int):
        self.pipe, self.queue, self.waiting = pipe, queue, 0
        self.turn = asyncio.Lock()


class Server:
    """The routes over pipelines loaded once (`pipes`: task pipelines, each served under its model's
    name, as engine.api.serve names them)."""

    def __init__(self, pipes, queue: int = 8):
        self.models = {}
        for pipe in pipes:
            api.serve(pipe)
            self.models[pipe.entry.name] = _Model(pipe, queue)
        self.created = int(time.time())

    def app(self):
        from starlette.applications import Starlette
        from starlette.routing import Route
        return Starlette(routes=[Route("/v1/models", self.list_models, methods=["GET"]),
                                 Route("/v1/chat/completions", self.chat, methods=["POST"]),
                                 Route("/v1/embeddings", self.embeddings, methods=["POST"])],
                         exception_handlers={404: lambda request, exc: _error(404, f"no route {request.url.path}",
                                                                              code="not_found")})

    async def list_models(self, request):
        from starlette.responses import JSONResponse
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": self.created, "owned_by": "engine"}
            for name in self.models]})

    async def _body(self, request, task: str):
        """(the request's fields, its model) or an error response."""
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, f"the request body is over {MAX_BODY} bytes"), None
        try:
            fields = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            return _error(400, f"the request body is not valid JSON: {e}"), None
        if not isinstance(fields, dict):
            return _error(400, "the request body must be a JSON object"), None
        name = fields.get("model")
        model = self.models.get(name)
        if model is None or model.pipe.task != task:
            served = [n for n, m in self.models.items() if m.pipe.task == task]
            return _error(404, f"the model {name!r} is not served here for {task}; served: {served}",
                          code="model_not_found"), None
        if model.waiting > model.queue:
            return _error(429, f"{name} has {model.waiting} requests waiting; try again later",
                          kind="rate_limit_exceeded", code="queue_full"), None
        return fields, model

    async def embeddings(self, request):
        fields, model = await self._body(request, "sentence-embedding")
        if model is None:
            return fields
        return await self._answer(model, lambda stopped: api.embeddings.create(**fields))

    async def chat(self, request):
        fields, model = await self._body(request, "text-generation")
        if model is None:
            return fields
        fields.pop("device", None)                    # the server's choice, not a client's
        fields.pop("cancel", None)
        if not fields.get("stream"):
            return await self._answer(model, lambda stopped: api.chat.completions.create(**fields,
                                                                                         cancel=stopped.is_set))
        await self._turn(model)
        stopped = threading.Event()
        try:
            chunks = api.chat.completions.create(**fields, cancel=stopped.is_set)
        except EngineError as e:
            self._done(model)
            return _failure(e)
        return self._stream(model, chunks, stopped)

    async def _turn(self, model) -> None:
        """Wait for the model's turn (a client that leaves meanwhile leaves the line)."""
        model.waiting += 1
        try:
            await model.turn.acquire()
        except asyncio.CancelledError:
            model.waiting -= 1
            raise

    def _done(self, model) -> None:
        model.turn.release()
        model.waiting -= 1

    async def _answer(self, model, work):
        """work(stopped) in a thread of its own, in the model's turn, as a JSON answer. The turn
        passes on when the work ends, so a client that left never lets two run at once."""
        from starlette.responses import JSONResponse
        await self._turn(model)
        loop, stopped = asyncio.get_running_loop(), threading.Event()
        future = loop.create_future()

        def settle(result, error):
            self._done(model)                          # the turn passes on before the answer goes
            if not future.done():
                future.set_exception(error) if error is not None else future.set_result(result)

        def target():
            try:
                result, error = work(stopped), None
            except Exception as e:                     # handed to the request's coroutine
                result, error = None, e
            loop.call_soon_threadsafe(settle, result, error)

        threading.Thread(target=target, name="engine-serve", daemon=True).start()
        try:
            return JSONResponse(await asyncio.shield(future))
        except asyncio.CancelledError:
            stopped.set()                              # the client went: stop before the next token
            raise
        except EngineError as e:
            return _failure(e)

    def _stream(self, model, chunks, stopped):
        """Server-sent events of `chunks`, made in a thread in the model's turn; a client that goes
        stops the generation before its next token."""
        from starlette.responses import StreamingResponse
        loop, lines = asyncio.get_running_loop(), asyncio.Queue()

        def produce():
            try:
                for chunk in chunks:
                    loop.call_soon_threadsafe(lines.put_nowait, f"data: {json.dumps(chunk)}\n\n")
                loop.call_soon_threadsafe(lines.put_nowait, "data: [DONE]\n\n")
            except Exception as e:                     # after the first chunk: an error event
                error = json.dumps(_error_body(str(e), "server_error"))
                loop.call_soon_threadsafe(lines.put_nowait, f"data: {error}\n\n")
            finally:
                loop.call_soon_threadsafe(self._done, model)
                loop.call_soon_threadsafe(lines.put_nowait, None)

        async def events():
            try:
                while (line := await lines.get()) is not None:
                    yield line
            finally:                                   # the client went, or the answer ended
                stopped.set()

        threading.Thread(target=produce, name="engine-serve-stream", daemon=True).start()
        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _failure(e: Exception):
    """An engine error as OpenAI's error body: 400 for what the request asked, 500 otherwise."""
    if isinstance(e, InputError):
        return _error(400, str(e))
    return _error(500, str(e), kind="server_error")


def run(models, host: str = "127.0.0.1", port: int = 8080, device: str | None = None, queue: int = 8) -> None:
    """Load `models` (registry names or GGUF files; tasks from the registry) and serve until stopped."""
    try:
        import uvicorn
    except ImportError as e:
        raise EngineError("`python -m engine serve` needs Starlette and uvicorn: pip install 'engine[serve]'") from e
    from . import registry
    from .tasks import pipeline
    pipes = []
    for name in models:
        task = "text-generation" if registry.names_a_file(name) else registry.model(name).tasks[0]
        pipes.append(pipeline(task, device=device, model=name))
    server = Server(pipes, queue)
    print(f"serving {', '.join(server.models)} at http://{host}:{port}/v1", flush=True)
    uvicorn.run(server.app(), host=host, port=port, log_level="warning")
