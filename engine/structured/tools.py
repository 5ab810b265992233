"""Tool calls: OpenAI's `tools` and `tool_choice` on a model whose chat template writes them.

The format is the one Qwen2.5's template asks for (Hermes' format, which other templates that
write `<tool_call>` share): the tools' JSON schemas go into the system message, and the model
answers a call as

    <tool_call>
    {"name": "get_time", "arguments": {"zone": "UTC"}}
    </tool_call>

The call's JSON is constrained to the tools' names and each one's `parameters` schema
(schema.py). tool_choice: "auto" (the model may call: once it writes <tool_call>, what follows is
constrained), "required" (it must, from its first token), {"type": "function", "function":
{"name"}} (that one), "none" (no tools in the prompt, no calls). The calls come back as OpenAI's
`tool_calls`, arguments a JSON string; an assistant message's tool_calls and `role: "tool"`
results go back through the template.
"""
from __future__ import annotations

import json
import re
import uuid

from ..errors import InputError
from .schema import compile_schema

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def supports(template) -> bool:
    """Whether a chat template writes tools in the format this module reads."""
    source = getattr(template, "template", "") or ""
    return "tools" in source and OPEN in source


def check(tools, tool_choice) -> tuple[list[dict], str | None]:
    """(the tools' function schemas, the one name tool_choice forces or "required"/"auto"/"none")."""
    if not isinstance(tools, list) or not tools:
        raise InputError("tools must be a non-empty list of {'type': 'function', 'function': {...}}")
    functions = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise InputError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name', 'parameters'}}}}")
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise InputError(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '.' or '-', got {name!r}")
        if name in (f["name"] for f in functions):
            raise InputError(f"tools[{i}]: a second function named {name!r}")
        functions.append(function)
    choice = "auto" if tool_choice is None else tool_choice
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
        if name not in [f["name"] for f in functions]:
            raise InputError(f"tool_choice names {name!r}, which is not among the tools")
        choice = name
    elif choice not in ("auto", "none", "required"):
        raise InputError(f"tool_choice must be 'auto', 'none', 'required' or {{'type': 'function', "
                         f"'function': {{'name'}}}}, got {tool_choice!r}")
    return functions, choice


def call_schema(functions: list[dict], only: str | None = None) -> dict:
    """The JSON Schema of one call: {"name": one of the functions, "arguments": its parameters}."""
    options = []
    for f in functions:
        if only not in (None, "auto", "required") and f["name"] != only:
            continue
        parameters = f.get("parameters", {"type": "object", "properties": {}})
        options.append({"type": "object", "properties": {"name": {"const": f["name"]}, "arguments": parameters},
                        "required": ["name", "arguments"]})
    return options[0] if len(options) == 1 else {"anyOf": options}


def compile_calls(functions: list[dict], only: str | None = None):
    """call_schema compiled, each function's parameters refused by name where unsupported."""
    for f in functions:
        if only in (None, "auto", "required") or f["name"] == only:
            compile_schema(f.get("parameters", {"type": "object", "properties": {}}),
                           f"tools.{f['name']}.parameters")
    return compile_schema(call_schema(functions, only), "tools")


def parse(text: str, names) -> tuple[str | None, list[dict]]:
    """(the content outside the calls, or None; the calls to functions of `names` as OpenAI's
    tool_calls). A whole answer that is one call's JSON without the tags is a call too (small
    models write it so; tool_choice "auto" constrains it as one from its first token)."""
    found = [(match, _call(match.group(1), names)) for match in _CALL.finditer(text)]
    calls = [call for _, call in found if call is not None]
    if not found:
        bare = _call(text.strip(), names)
        return (None, [bare]) if bare is not None else (text, [])
    content = _CALL.sub("", text).strip() if calls else text
    return (content or None), calls


def _call(text: str, names) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("name") not in names or not isinstance(value.get("arguments"), dict):
        return None
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": value["name"], "arguments": json.dumps(value["arguments"], ensure_ascii=False)}}


def messages_for_template(messages: list[dict]) -> list[dict]:
    """OpenAI's messages as the template reads them: an assistant's tool_calls with arguments as
    objects (OpenAI sends JSON strings), a tool result's content as text."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            fixed = []
            for call in calls:
                function = dict(call.get("function") or {})
                if isinstance(function.get("arguments"), str):
                    try:
                        function["arguments"] = json.loads(function["arguments"])
                    except ValueError as e:
                        raise InputError(f"a tool call's arguments are not JSON: {e}") from None
                fixed.append({**call, "function": function})
            message = {**message, "tool_calls": fixed}
        out.append(message)
    return out
