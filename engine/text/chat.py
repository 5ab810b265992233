"""Chat templates: a conversation -> the prompt text a chat model was trained on.

    template = ChatTemplate(tok.chat_template, special_tokens=tok.special_tokens, **tok.chat_template_origin)
    template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    # '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n'
    # '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
    template.render(messages, add_generation_prompt=True, tools=[schema])     # Qwen2.5's tools branch
    template.default_system     # the system message the template adds on its own, or None

A model ships its template as Jinja source (a GGUF's `tokenizer.chat_template`, a
tokenizer_config.json's `chat_template`): Qwen2.5's, SmolLM2's, Llama 3's, Mistral's, Phi-3's,
Gemma's. This module renders it with jinja2 as transformers' `apply_chat_template(messages,
tokenize=False, add_generation_prompt=..., tools=..., documents=..., **kwargs)` does (facts from
transformers 5, utils/chat_template_utils.py and tokenization_utils_base.py):

- the template sees `messages` (each message's keys whose value is None dropped; a message with
  its reasoning under `reasoning_content`, `thinking` or `reasoning` gets it under the first two
  as well), `tools` (JSON schemas, or None), `documents`, `add_generation_prompt`, the tokenizer's
  special tokens as strings (`bos_token`, `eos_token`, ...: `special_tokens`) and the caller's
  keyword arguments, which win over the special tokens; every value is plain data (str, numbers,
  None, lists, tuples, dicts);
- the environment (trim_blocks, lstrip_blocks, loop controls, transformers' `tojson`,
  `raise_exception`, `strftime_now`, `dict`, `namespace`) is template_sandbox.py's: jinja2's
  immutable sandbox, with bounds on the time and memory one rendering may take.

A template that does not compile, that raises (`raise_exception`, or an error of its own), that
tries what the sandbox forbids or that goes past a bound gives a TokenizerError naming where the
template came from (`file`, `field`) and, where known, the template's line. A conversation that
is not a list of messages is an InputError.

jinja2 is imported when a template first renders (or compiles), never before: natively
`pip install jinja2` (the `chat` extra); in Pyodide the site ships jinja2 and MarkupSafe wheels,
which the worker loads when a chat model loads (engine.tasks.load_packages), and which are
loaded here otherwise (engine.runtime.load_packages).

What the engine reads from a template by rendering it (text_generation.py): `default_system`, the
system message it puts first when a conversation has none; `text_after_answer()`, what it writes
right after an assistant's answer (the token that ends a turn).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..errors import EngineError, InputError, TokenizerError
from ..untrusted import shown

_NOT_YET = object()
# stand-ins for text in the conversations rendered to read a template: private-use characters,
# which no template changes (trim, capitalize) and no conversation is likely to hold
_USER, _SYSTEM, _ANSWER, _NEXT = "\ue000user\ue001", "\ue000system\ue001", "\ue000answer\ue001", "\ue000next\ue001"
_REASONING = ("reasoning_content", "thinking", "reasoning")     # transformers' names, the first the standard


def _sandbox():
    """template_sandbox, imported with jinja2 (loaded first in Pyodide when missing)."""
    from .. import runtime
    try:
        from . import template_sandbox
    except ImportError as e:
        if e.name not in ("jinja2", "markupsafe"):
            raise
        if not runtime.in_browser():
            raise EngineError("rendering a chat template needs jinja2 3.1.6 or newer: pip install jinja2 "
                              "(or the engine's `chat` extra)") from None
        runtime.wait(runtime.load_packages(["jinja2"]), "await engine.runtime.load_packages(['jinja2'])")
        from . import template_sandbox
    problem = template_sandbox.version_problem()
    if problem is not None:
        raise EngineError(problem)
    return template_sandbox


class ChatTemplate:
    """A model's chat template; `render(messages, add_generation_prompt)` gives what transformers'
    apply_chat_template(messages, tokenize=False, ...) gives.

    `file` and `field`: where the template came from (a GGUF's tokenizer.chat_template, a
    tokenizer_config.json's chat_template), named by its errors. `special_tokens`: the token
    strings the template may print ({"bos_token": "<s>", ...}: Tokenizer.special_tokens).
    `time_limit_s`: how long one rendering may take (template_sandbox.TIME_LIMIT_S by default)."""

    def __init__(self, template: str, *, file: str | None = None, field: str = "chat_template",
                 special_tokens: Mapping[str, str] | None = None, time_limit_s: float | None = None):
        self.origin = {"file": file, "field": field}
        if not isinstance(template, str):
            raise TokenizerError(f"a chat template is Jinja source text, got {type(template).__name__}", **self.origin)
        special_tokens = dict(special_tokens or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in special_tokens.items()):
            raise InputError(f"special_tokens maps names to token strings, got {shown(special_tokens)}")
        self.template = template
        self.special_tokens = special_tokens
        self.time_limit_s = time_limit_s
        self._compiled = None
        self._default_system = _NOT_YET

    def __repr__(self) -> str:
        return f"ChatTemplate({len(self.template)} characters, special_tokens={sorted(self.special_tokens)})"

    def compile(self) -> None:
        """Compile the template now rather than at its first rendering: a TokenizerError when it
        cannot be."""
        self._template()

    def _template(self):
        if self._compiled is None:
            sandbox = _sandbox()
            try:
                self._compiled = sandbox.compile_template(self.template)
            except sandbox.jinja2.TemplateSyntaxError as e:
                raise self._error(f"does not compile: {shown(e.message, 300)} (line {e.lineno})") from None
            except sandbox.LimitExceeded as e:
                raise self._error(f"is refused: {e}") from None
            except (RecursionError, MemoryError):
                raise self._error("does not compile: it nests too deep") from None
            except Exception as e:          # noqa: BLE001 (the template's fault, whatever jinja2 makes of it)
                raise self._error(f"does not compile: {type(e).__name__}: {shown(str(e), 300)}") from None
        return self._compiled

    def _error(self, what: str) -> TokenizerError:
        return TokenizerError(f"the chat template {what}", **self.origin)

    def render(self, messages, add_generation_prompt: bool = False, *, tools=None, documents=None, **kwargs) -> str:
        """The conversation as the template writes it. `messages`: a list of {"role": ..., "content":
        ...} (content a str or a list of parts; an assistant's tool_calls without content);
        `tools`: JSON schemas of functions; `documents`: dicts; `kwargs`: more variables for the
        template (e.g. enable_thinking=False), over the special tokens of the same names."""
        template = self._template()
        sandbox = _sandbox()
        conversation = _conversation(messages, sandbox.MAX_NESTING)
        variables = {**self.special_tokens, **_plain(kwargs, "the template's variables", sandbox.MAX_NESTING)}
        variables.update(messages=conversation, tools=_tools(tools, sandbox.MAX_NESTING),
                         documents=_documents(documents, sandbox.MAX_NESTING),
                         add_generation_prompt=add_generation_prompt)
        try:
            return sandbox.render(template, variables, self.time_limit_s or sandbox.TIME_LIMIT_S)
        except sandbox.InputTooLarge as e:
            raise InputError(f"the conversation is too large for the chat template's sandbox: {e}") from None
        except sandbox.Refused as e:
            raise self._error(f"refuses this conversation: {shown(e.message, 500)}{_line(sandbox, e, template)}") from None
        except sandbox.LimitExceeded as e:
            raise self._error(f"was stopped: {e}{_line(sandbox, e, template)}") from None
        except sandbox.jinja2.exceptions.SecurityError as e:
            raise self._error(f"tried what the sandbox forbids: {shown(str(e), 300)}{_line(sandbox, e, template)}") from None
        except (RecursionError, MemoryError) as e:
            raise self._error(f"was stopped: {type(e).__name__}{_line(sandbox, e, template)}") from None
        except Exception as e:              # noqa: BLE001 (the template's error on this conversation)
            raise self._error(f"failed on this conversation: {type(e).__name__}: {shown(str(e), 300)}"
                              f"{_line(sandbox, e, template)}") from None

    # --- what the engine reads from a template, by rendering it -----------------------------------

    @property
    def default_system(self) -> str | None:
        """The system message the template puts first when a conversation has none (SmolLM2's "You
        are a helpful AI assistant named SmolLM, ...", Qwen2.5's "You are Qwen, created by Alibaba
        Cloud. ..."), else None.

        Read by rendering: [user] and [system S, user], S a stand-in. When the second is P + S + Q
        and the first is P + D + Q, the template wrote D where a system message goes; D counts
        when it is not empty and [system D, user] renders exactly as [user]. A template that
        folds the system message into the user's turn (Gemma's), writes a date header of its own
        (Llama 3.1's, with an empty message) or refuses the stand-in conversations has none."""
        if self._default_system is _NOT_YET:
            self._default_system = self._find_default_system()
        return self._default_system

    def _find_default_system(self) -> str | None:
        self._template()                    # a template that does not compile says so here
        user = {"role": "user", "content": _USER}
        try:
            alone = self.render([user], add_generation_prompt=True)
            marked = self.render([{"role": "system", "content": _SYSTEM}, user], add_generation_prompt=True)
            if marked.count(_SYSTEM) != 1:
                return None
            before, after = marked.split(_SYSTEM)
            if not (alone.startswith(before) and alone.endswith(after) and len(alone) > len(before) + len(after)):
                return None
            default = alone[len(before):len(alone) - len(after)]
            same = self.render([{"role": "system", "content": default}, user], add_generation_prompt=True)
        except InputError:
            return None
        return default if same == alone and default.strip() else None

    def text_after_answer(self) -> str | None:
        """What the template writes right after an assistant's answer, up to the next message
        (ChatML's "<|im_end|>\\n", Gemma's "<end_of_turn>\\n"): read by rendering [user, assistant
        A, user], A a stand-in. None when the template refuses that conversation or changes A."""
        conversation = [{"role": "user", "content": _USER}, {"role": "assistant", "content": _ANSWER},
                        {"role": "user", "content": _NEXT}]
        try:
            text = self.render(conversation)
        except InputError:
            return None
        if text.count(_ANSWER) != 1 or text.count(_NEXT) != 1 or text.index(_NEXT) < text.index(_ANSWER):
            return None
        return text[text.index(_ANSWER) + len(_ANSWER):text.index(_NEXT)]


def _line(sandbox, error: BaseException, template) -> str:
    line = sandbox.template_line(error, template)
    return f" (template line {line})" if line is not None else ""


# --- the template's data: plain, as transformers makes it --------------------------------------------
def _plain(value, where: str, nesting: int):
    """`value` as plain data: str, int, float, bool, None, lists, tuples and dicts of them (the
    subclasses of str, int and float as their base type, NumPy scalars as Python's)."""
    kind = type(value)
    if value is None or kind in (str, int, float, bool):
        return value
    if nesting < 0:
        raise InputError(f"{where} nests too deep")
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k, where, nesting - 1): _plain(v, where, nesting - 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, where, nesting - 1) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v, where, nesting - 1) for v in value)
    import numpy as np
    if isinstance(value, np.generic):
        return _plain(value.item(), where, nesting)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), where, nesting - 1) for f in dataclasses.fields(value)}
    raise InputError(f"{where}: a {kind.__name__} is not plain data (str, numbers, bool, None, lists, dicts)")


def _conversation(messages, nesting: int) -> list[dict]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, (list, tuple)):
        raise InputError("messages must be a list of {'role': ..., 'content': ...}, "
                         f"got {type(messages).__name__}")
    if not messages:                    # transformers refuses one too
        raise InputError("an empty conversation: give at least one message")
    conversation = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InputError(f"message {i} must be a dict with 'role' and 'content', got {type(message).__name__}")
        message = {k: v for k, v in message.items() if v is not None}     # transformers drops them
        if not isinstance(message.get("role"), str):
            got = "nothing" if "role" not in message else type(message["role"]).__name__
            raise InputError(f"message {i}: 'role' must be a str, got {got}")
        content = message.get("content")
        if not (isinstance(content, (str, list, tuple)) or (content is None and message.get("tool_calls"))):
            got = "nothing" if content is None else type(content).__name__
            raise InputError(f"message {i}: 'content' must be a str (or a list of parts), got {got}")
        reasoning = next((message[k] for k in _REASONING if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        conversation.append(_plain(message, f"message {i}", nesting))
    return conversation


def _tools(tools, nesting: int) -> list | None:
    if tools is None:
        return None
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, (list, tuple)):
        raise InputError(f"tools must be a list of JSON schemas (dicts), got {type(tools).__name__}")
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise InputError(f"tool {i} must be a JSON schema (a dict), got {type(tool).__name__}")
    return _plain(list(tools), "tools", nesting)


def _documents(documents, nesting: int) -> list | None:
    if documents is None:
        return None
    if not isinstance(documents, (list, tuple)) or not all(isinstance(d, Mapping) for d in documents):
        raise InputError("documents must be a list of dicts with 'title' and 'text' keys")
    return _plain(list(documents), "documents", nesting)
