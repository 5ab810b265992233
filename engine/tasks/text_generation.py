"""Text generation: chat with a causal language model, streaming, over one KV cache.

    chat = engine.pipeline("text-generation")
    chat.chat("What is the capital of France?")     # "The capital of France is Paris."

    python -m engine generate --chat "What is the capital of France?"
    python -m engine chat
"""
from __future__ import annotations

import asyncio
import json
import sys

from ..errors import EngineError, InputError
from . import contracts, state
from .base import Command, Pipeline, add_device_argument

TASK = "text-generation"
CARD = 5                     # where its card stands on the page (engine.tasks.card_order)
CONTEXT = 4096               # the default context length (tokens the KV cache holds; its rows grow as used)


class TextGeneration(Pipeline):
    """Chat with a causal language model from a GGUF (its tokenizer and chat template come from
    the file's metadata), streaming, over one KV cache that later turns reuse.

        chat = engine.pipeline("text-generation")
        chat.chat("What is the capital of France?")             # one user message -> the answer
        for piece in chat.stream(messages, temperature=0.7, seed=1):
            print(piece, end="")
        chat("Once upon a time", max_new_tokens=20)             # plain continuation, no template
        chat.stats      # prompt/reused/new tokens, ttft_s, prefill_tok_s, decode_tok_s, stop_reason

    messages: a str (one user message) or a list of {"role", "content"}, written out by the
    model's chat template (engine.text.ChatTemplate; many add a default system message when the
    first is not "system"). A base model (a file without a chat template) only continues text.
    An answer ends at the file's end-of-sequence or end-of-turn token, or at the token the
    template closes an assistant's turn with (`turn_end_id`). Options (here or as defaults at
    construction): engine.generation.GenerationConfig's fields. capacity: the context length the
    cache holds (prompt + answer), 4096 by default (at most the model's own); its rows are
    allocated as the conversation grows (SmolLM2's take 46 KB a position).
    """
    MODEL = contracts.CausalLM


    def __init__(self, entry, device: str | None = None, weights=None, capacity: int = CONTEXT, **defaults):
        from ..device import best_for_quantized
        from ..generation import GenerationConfig, Generator
        from ..text import ChatTemplate, Tokenizer
        device = device or best_for_quantized()           # not NumPy's reference kernels (30x slower)
        super().__init__(entry, device, weights)
        self.model = self.build(device)
        self.tokenizer = Tokenizer.from_gguf(self.model.metadata)
        template = self.tokenizer.chat_template
        self.template = (ChatTemplate(template, special_tokens=self.tokenizer.special_tokens,
                                      **self.tokenizer.chat_template_origin) if template else None)
        eos = set(self.model.end_token_ids)
        if self.template is not None:
            self.template.compile()                       # a template that cannot compile fails the load
            eos.add(turn_end_id(self.tokenizer, self.template))
        GenerationConfig.of(defaults)                     # bad defaults fail here, not at the first call
        self.defaults = defaults
        self._grammars: dict = {}
        self.generator = Generator(self.model, self.tokenizer, self._checked(capacity),
                                   {i for i in eos if isinstance(i, int)})

    def _checked(self, capacity) -> int:
        limit = self.model.config.max_position_embeddings
        if isinstance(capacity, bool) or not isinstance(capacity, int) or not 2 <= capacity <= limit:
            raise InputError(f"capacity must be an integer in [2, {limit}], got {capacity!r}")
        return capacity

    def set_capacity(self, capacity: int) -> None:
        """A new context length (tokens the cache holds): a new, empty cache; the conversation
        starts afresh."""
        self.generator.bind(self.model, self._checked(capacity))

    @classmethod
    def packages(cls, checkpoint) -> tuple[str, ...]:
        """jinja2, for a model file with a chat template (or whose metadata is not read yet)."""
        metadata = getattr(checkpoint.tensors, "metadata", None)
        return ("jinja2",) if not hasattr(metadata, "get") or metadata.get("tokenizer.chat_template") else ()

    def _config(self, options: dict):
        from ..generation import GenerationConfig
        return GenerationConfig.of({**self.defaults, **options})

    def prompt_ids(self, messages, tools=None) -> list[int]:
        """The token ids of a conversation rendered by the chat template, ready for the answer
        (`tools`: the functions' JSON schemas, for a template that writes them)."""
        if self.template is None:
            raise InputError(f"{self.entry.name} is a base model: its file has no chat template "
                             "(tokenizer.chat_template), so it does not chat; use plain completion instead: "
                             "pipe(prompt) or pipe.stream_text(prompt)")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        text = self.template.render(messages, add_generation_prompt=True, tools=tools)
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def stream(self, messages, cancel=None, grammar=None, tools=None, **options):
        """The answer to a conversation, as text pieces while it is generated; `grammar` (from
        self.grammar) constrains it, `tools` go to the chat template."""
        return self.generator.stream(self.prompt_ids(messages, tools), self._config(options), cancel, grammar)

    def grammar(self, schema=None, before: bytes = b"", after: bytes = b""):
        """The answers that are JSON texts of `schema` (a JSON Schema; None: any JSON object),
        with exact text around them, on this model's vocabulary (engine.structured); the last 8
        are kept for the next request with the same schema."""
        from ..structured import Grammar, any_object, compile_schema
        key = (json.dumps(schema, sort_keys=True), before, after)
        grammar = self._grammars.get(key)
        if grammar is None:
            node = any_object() if schema is None else compile_schema(schema, "response_format.json_schema.schema")
            if len(self._grammars) >= 8:
                self._grammars.pop(next(iter(self._grammars)))
            grammar = self._grammars[key] = Grammar(node, self.tokenizer, self.model.config.vocab_size, before, after)
        return grammar

    def chat(self, messages, callback=None, cancel=None, **options) -> str:
        """The whole answer; callback(piece) is called with each piece as it comes."""
        return _joined(self.stream(messages, cancel, **options), callback)

    def stream_text(self, prompt: str, cancel=None, **options):
        """The continuation of a plain text prompt (no chat template), as text pieces."""
        if not isinstance(prompt, str) or not prompt:
            raise InputError(f"the prompt must be a non-empty string, got {prompt!r}")
        return self.generator.stream(self.tokenizer.encode(prompt).ids, self._config(options), cancel)

    def __call__(self, prompt: str, callback=None, cancel=None, **options) -> str:
        """The continuation of a plain text prompt (no chat template)."""
        return _joined(self.stream_text(prompt, cancel, **options), callback)

    def cancel(self) -> None:
        """Stop the running generation before its next token."""
        self.generator.cancel()

    def reset(self) -> None:
        """A new conversation: nothing of the cached one is reused."""
        self.generator.reset()

    @property
    def stats(self) -> dict:
        return dict(self.generator.stats)

    def to(self, device: str):
        super().to(device)
        self.generator.bind(self.model)
        return self


def turn_end_id(tokenizer, template) -> int | None:
    """The token `template` closes an assistant's turn with, as an end of the answer: the first
    token of what it writes right after an answer (ChatTemplate.text_after_answer), when that is
    one special token of the vocabulary. ChatML's <|im_end|> (SmolLM2's and Qwen2.5's files name it
    their end-of-sequence too), Llama 3's <|eot_id|>, Phi-3's <|end|>, Gemma's <end_of_turn> (which
    a file may not name as its end-of-turn token); None for a template that writes plain text
    there."""
    text = template.text_after_answer()
    if not text:
        return None
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    if not ids or tokenizer.decode(ids[:1], skip_special_tokens=True) or not tokenizer.decode(ids[:1], False):
        return None                                       # not a special token (or nothing)
    return ids[0]


def _joined(pieces, callback) -> str:
    out = []
    for piece in pieces:
        out.append(piece)
        if callback is not None:
            callback(piece)
    return "".join(out)


PIPELINE = TextGeneration


# --- the command line -----------------------------------------------------------------------------
def _add_generation_options(p) -> None:
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N", help="at most N tokens (default 256)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 is greedy (default)")
    p.add_argument("--top-k", type=int, default=0, metavar="K", help="sample from the K most likely (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling (1: off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R", help="1: off")
    p.add_argument("--seed", type=int, default=None, help="repeatable sampling")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop at this text (repeatable)")
    p.add_argument("--system", default=None, help="a system message (default: the model's own)")
    p.add_argument("--capacity", type=int, default=CONTEXT, help=f"context length in tokens (default {CONTEXT})")
    p.add_argument("--model", default=None, metavar="NAME|FILE|URL",
                   help="a registry model (`python -m engine tasks` lists them; default SmolLM2-135M-Instruct, built "
                        "by build.py into dist/models/), or a GGUF file or URL of a supported architecture")
    p.add_argument("--weights", default=None, help="the registry model's weights from elsewhere: a GGUF file or URL")
    add_device_argument(p, default="simd where it is available, else numpy")


def _add_generate_arguments(p) -> None:
    p.add_argument("prompt", metavar="PROMPT")
    p.add_argument("--chat", action="store_true", help="answer PROMPT as a chat message (else continue it)")
    p.add_argument("--json", action="store_true", help='one JSON object: {"input", "output", "tokens", '
                                                      '"prefill_tok_s", "decode_tok_s"}')
    _add_generation_options(p)


def _generator(args) -> TextGeneration:
    from . import pipeline
    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, repetition_penalty=args.repetition_penalty, seed=args.seed, stop=args.stop)
    return pipeline(TASK, device=args.device, model=args.model, weights=args.weights, capacity=args.capacity,
                    **options)


def _with_system(args, messages: list) -> list:
    return ([{"role": "system", "content": args.system}] if args.system is not None else []) + messages


def _speeds(stats: dict) -> str:
    return (f"[{stats['new_tokens']} tokens, prefill {stats['prefill_tok_s']:.1f} tok/s, "
            f"decode {stats['decode_tok_s']:.1f} tok/s, first token after {stats.get('ttft_s', 0):.2f} s]")


def _generate(args) -> int:
    chat = _generator(args)
    if args.chat:
        pieces = chat.stream(_with_system(args, [{"role": "user", "content": args.prompt}]))
    else:
        if args.system is not None:
            raise EngineError("--system needs --chat")
        pieces = chat.stream_text(args.prompt)
    out = []
    for piece in pieces:
        out.append(piece)
        if not args.json:
            print(piece, end="", flush=True)
    stats = chat.stats
    if args.json:
        print(json.dumps({"input": args.prompt, "output": "".join(out), "tokens": stats["new_tokens"],
                          "prefill_tok_s": round(stats["prefill_tok_s"], 2),
                          "decode_tok_s": round(stats["decode_tok_s"], 2)}, ensure_ascii=False))
    else:
        print()
        print(_speeds(stats), file=sys.stderr)
    return 0


def _chat(args) -> int:
    chat = _generator(args)
    messages: list = []
    tty = sys.stdin.isatty()
    while True:
        if tty:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line or line.strip() == "/quit":
            return 0
        text = line.strip()
        if text == "/new":
            messages = []
            chat.reset()
            print("(a new conversation)", file=sys.stderr)
            continue
        if not text:
            continue
        messages.append({"role": "user", "content": text})
        answer = []
        try:
            for piece in chat.stream(_with_system(args, messages)):
                answer.append(piece)
                print(piece, end="", flush=True)
        except KeyboardInterrupt:                # stops this answer only; what came is kept
            print(" [stopped]", end="", file=sys.stderr)
        print()
        messages.append({"role": "assistant", "content": "".join(answer)})
        if tty:
            print(_speeds(chat.stats), file=sys.stderr)


COMMANDS = {
    "generate": Command(
        help="continue a prompt, or answer it as a chat message (SmolLM2, Qwen2.5, Gemma 3, any GGUF: --model)",
        description="Generate text with a causal language model (text-generation task; SmolLM2-135M-Instruct "
                    "unless --model names another registry model or a GGUF file or URL), streamed to stdout as "
                    "it comes; the speeds go to stderr. With --chat the prompt is a user message in the model's "
                    "chat template.",
        add_arguments=_add_generate_arguments, run=_generate),
    "chat": Command(
        help="an interactive chat in the terminal (SmolLM2 unless --model), streaming",
        description="Chat with a chat model (SmolLM2-135M-Instruct unless --model names another): type a "
                    "message and Enter; the answer streams in. Ctrl-C stops an answer, /new starts a new "
                    "conversation, /quit or Ctrl-D leaves. Later turns reuse the cached conversation.",
        add_arguments=_add_generation_options, run=_chat),
}


# --- the page's worker: the answer streams to the page piece by piece ------------------------------
_stop = {"requested": False}


async def chat(messages, options=None, on_piece=None) -> str:
    """Answer a conversation ([{"role", "content"}, ...], JSON or a list), calling on_piece(text)
    with each piece as it comes, and yielding to the worker's message loop between tokens so that
    chat_stop can arrive. The earlier turns' tokens still in the cache are not fed again.

    A chat_stop that arrives while this call waits for another model call to finish stops it
    too: messages are taken in order, so any Stop after this call began is meant for it."""
    messages = list(state.from_json(messages))
    return await _to_page(lambda pipe, **options: pipe.stream(messages, **options), options, on_piece)


async def complete_text(prompt, options=None, on_piece=None) -> str:
    """The continuation of a plain text prompt (no chat template: what a base model does), as
    `chat` streams an answer, with the same result."""
    prompt = state.py(prompt)
    return await _to_page(lambda pipe, **options: pipe.stream_text(prompt, **options), options, on_piece)


def page_cancel():
    """A new answer in the page: the `cancel` that chat_stop sets from now on."""
    _stop["requested"] = False
    return lambda: _stop["requested"]


async def _to_page(stream, options, on_piece) -> str:
    cancel = page_cancel()
    pipe = state.loaded(TASK)
    options = dict(state.from_json(options) or {})
    pieces = []
    async with state.lock:
        memory = state.heap_bytes()
        for piece in stream(pipe, cancel=cancel, **options):
            pieces.append(piece)
            if on_piece is not None:
                on_piece(piece)
            await asyncio.sleep(0)                  # the Stop button's message gets its turn
            memory = max(memory, state.heap_bytes())
        notice = state.notice(pipe)
    stats = {k: round(v, 4) if isinstance(v, float) else v for k, v in pipe.stats.items()}
    return json.dumps({"text": "".join(pieces), "stats": stats, "device": state.current["device"],
                       "model": pipe.entry.name, "heap_bytes": memory, **notice})


def chat_stop() -> str:
    """Stop the answer being generated, or about to be (it ends before its next token); no lock:
    it runs between tokens."""
    _stop["requested"] = True
    pipe = state.current["pipelines"].get(TASK)
    if pipe is not None:
        pipe.cancel()
    return json.dumps({"stopped": pipe is not None})


async def chat_reset() -> str:
    """A new conversation: the cached one is dropped (nothing to drop before the model loads)."""
    async with state.lock:
        pipe = state.current["pipelines"].get(TASK)
        if pipe is not None:
            pipe.reset()
    return json.dumps({"reset": pipe is not None})


async def chat_context(tokens) -> str:
    """Set the context length of the loaded model (its KV cache; the conversation starts afresh)."""
    async with state.lock:
        pipe = state.loaded(TASK)
        pipe.set_capacity(int(tokens) if isinstance(tokens, (int, float)) and not isinstance(tokens, bool) else tokens)
        return json.dumps({"capacity": pipe.generator.cache.capacity,
                           "max_capacity": pipe.model.config.max_position_embeddings})


def chat_defaults() -> str:
    """What the chat card starts from: the model's default system message, context length, model,
    and whether it chats (a base model has no chat template: the card completes text instead)."""
    pipe = state.loaded(TASK)
    return json.dumps({"system": pipe.template.default_system if pipe.template else None,
                       "capacity": pipe.generator.cache.capacity, "model": pipe.entry.name,
                       "max_capacity": pipe.model.config.max_position_embeddings,
                       "chat": pipe.template is not None,          # False: a base model, which only completes
                       "defaults": {"temperature": 0.0, "max_new_tokens": 256}})


WORKER = (chat, complete_text, chat_stop, chat_reset, chat_context, chat_defaults)
