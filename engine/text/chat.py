"""Chat templates: a conversation -> the prompt text a chat model was trained on.

    template = ChatTemplate(tok.chat_template)        # the Jinja source from the GGUF or tokenizer_config
    template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    # '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n'
    # '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'

Models ship their template as Jinja source, which transformers renders with jinja2
(`apply_chat_template`). The engine depends on NumPy alone: jinja2 (and MarkupSafe) would be two
more packages for every page to fetch and load in Pyodide, and a general interpreter is not
needed for the family in use. This module recognises ChatML templates (OpenAI's Chat Markup
Language, as SmolLM2 writes it), with or without a default system message that is put first when
the conversation does not start with one, and renders them in Python. It recognises them by their
tokens, not their text: the Jinja source is split into tags, each tag into tokens (names,
operators, string literals decoded, adjacent literals joined by "+" folded), and the result
compared with the known form. So spacing inside tags, whitespace control, quote style, "\\n"
written as an escape or as a newline, comments and how the literals are cut may vary; anything
else, including any text outside the tags, is refused with a TokenizerError rather than rendered
differently from transformers.

The known form (SmolLM2-Instruct's tokenizer.chat_template, spread over lines here: the real one
has nothing between its tags; without the `if loop.first` part it is the plain ChatML template):

    {% for message in messages %}
      {% if loop.first and messages[0]['role'] != 'system' %}
        {{ '<|im_start|>system\\n' + DEFAULT_SYSTEM + '<|im_end|>\\n' }}
      {% endif %}
      {{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}
    {% endfor %}
    {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}
"""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from ..errors import InputError, TokenizerError

_TAG = re.compile(r"\{([%{#])([-+]?)(.*?)([-+]?)([%}#])\}", re.DOTALL)
_TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"""
                    r"""|(?P<num>\d+)|(?P<op>==|!=|<=|>=|[-+*/%~<>()\[\].,|:=]))""", re.DOTALL)
_SYSTEM = "\ue000system\ue000"          # stands for the default system message while matching


def _tokens(code: str, template: str) -> tuple:
    """A tag's content as tokens: ("str", decoded value) for literals, the text for the rest;
    literals joined by "+" folded into one."""
    out, position = [], 0
    code = code.strip()
    while position < len(code):
        m = _TOKEN.match(code, position)
        if m is None:
            raise _unknown(template, f"cannot read {code[position:position + 20]!r}")
        position = m.end()
        if m.group("str") is not None:
            try:                        # Jinja's literals are Python's, except that they may span lines
                value = ast.literal_eval(m.group("str").replace("\r", "\\r").replace("\n", "\\n"))
            except (ValueError, SyntaxError):
                raise _unknown(template, f"cannot read the string {m.group('str')!r}") from None
            if len(out) >= 2 and out[-1] == "+" and isinstance(out[-2], tuple):
                out[-2:] = [("str", out[-2][1] + value)]
            else:
                out.append(("str", value))
        else:
            out.append(m.group().strip())
    return tuple(out)


def _items(template: str) -> list[tuple[str, tuple]]:
    """The template as ("block" | "output", tokens) items; comments dropped."""
    items, last = [], 0
    for m in _TAG.finditer(template):
        if template[last:m.start()]:
            raise _unknown(template, f"it has text outside tags ({template[last:m.start()][:30]!r})")
        last = m.end()
        opening, closing = m.group(1), m.group(5)
        if (opening, closing) not in (("%", "%"), ("{", "}"), ("#", "#")):
            raise _unknown(template, f"unbalanced tag {m.group()[:30]!r}")
        if opening != "#":
            items.append(("block" if opening == "%" else "output", _tokens(m.group(3), template)))
    if template[last:]:
        raise _unknown(template, f"it has text outside tags ({template[last:][:30]!r})")
    return items


class _Unknown(Exception):
    """Why a template is not the known form; ChatTemplate words it, naming where the template came from."""


def _unknown(template: str, why: str) -> _Unknown:
    return _Unknown(f"this chat template is not one the engine implements (ChatML, as SmolLM2's): {why}; "
                    f"template starts {template[:80]!r}")


_DEFAULT_SYSTEM_PART = ("{% if loop.first and messages[0]['role'] != 'system' %}"
                        "{{ '<|im_start|>system\\n' + '" + _SYSTEM + "' + '<|im_end|>\\n' }}{% endif %}")
_MESSAGE = "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
_CHATML = ("{% for message in messages %}{SYSTEM}" + _MESSAGE + "{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _known_forms() -> list[tuple[list, bool]]:
    with_system = _items(_CHATML.replace("{SYSTEM}", _DEFAULT_SYSTEM_PART))
    plain = _items(_CHATML.replace("{SYSTEM}", ""))
    return [(with_system, True), (plain, False)]


_FORMS = _known_forms()


class ChatTemplate:
    """A recognised chat template; render(messages, add_generation_prompt) gives what
    transformers' apply_chat_template(messages, tokenize=False, ...) gives. `end_of_turn`: the
    token its form closes each turn with (generation stops there)."""

    end_of_turn = "<|im_end|>"                  # ChatML's, the one form recognised

    def __init__(self, template: str, *, file: str | None = None, field: str = "chat_template"):
        """`file` and `field`: where the template came from (a GGUF's tokenizer.chat_template, a
        tokenizer_config.json's chat_template), for the error when it is not one the engine renders."""
        if not isinstance(template, str):
            raise TokenizerError(f"a chat template is Jinja source text, got {type(template).__name__}",
                                 file=file, field=field)
        self.template = template
        self.default_system: str | None = None
        try:
            items = _items(template)
            for form, has_system in _FORMS:
                if len(items) != len(form):
                    continue
                system = _match(items, form)
                if system is not False:
                    self.default_system = system if has_system else None
                    return
            raise _unknown(template, "its tags differ from the ChatML form")
        except _Unknown as e:
            raise TokenizerError(str(e), file=file, field=field) from None

    def __repr__(self) -> str:
        return f"ChatTemplate(ChatML, default_system={self.default_system!r})"

    def render(self, messages, add_generation_prompt: bool = False) -> str:
        if isinstance(messages, (str, bytes, Mapping)) or not hasattr(messages, "__iter__"):
            raise InputError("messages must be a list of {'role': ..., 'content': ...}, "
                             f"got {type(messages).__name__}")
        messages = list(messages)
        if not messages:                # transformers refuses one too
            raise InputError("an empty conversation: give at least one message")
        parts = []
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise InputError(f"message {i} must be a dict with 'role' and 'content', got {type(message).__name__}")
            for key in ("role", "content"):
                if not isinstance(message.get(key), str):
                    got = "nothing" if key not in message else type(message[key]).__name__
                    raise InputError(f"message {i}: {key!r} must be a str, got {got}")
            if i == 0 and self.default_system is not None and message["role"] != "system":
                parts.append(f"<|im_start|>system\n{self.default_system}<|im_end|>\n")
            parts.append(f"<|im_start|>{message['role']}\n{message['content']}<|im_end|>\n")
        if add_generation_prompt:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)


def _match(items: list, form: list):
    """The default system message if `items` has the form (None if the form has none), else False."""
    system = None
    for (kind, tokens), (want_kind, want) in zip(items, form):
        if kind != want_kind or len(tokens) != len(want):
            return False
        for token, wanted in zip(tokens, want):
            if isinstance(wanted, tuple) and isinstance(token, tuple) and _SYSTEM in wanted[1]:
                before, after = wanted[1].split(_SYSTEM)
                value = token[1]
                if not (value.startswith(before) and value.endswith(after) and len(value) >= len(before + after)):
                    return False
                system = value[len(before):len(value) - len(after)]
            elif token != wanted:
                return False
    return system
