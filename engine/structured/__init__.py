"""Structured output: answers constrained token by token to a JSON Schema or to a tool call.

    grammar = pipe.grammar({"type": "object", "properties": {...}})   # engine.tasks.text_generation
    pipe.chat(messages, grammar=grammar)                               # always parses and validates

schema.py compiles a schema (refusing what it cannot keep, by name), machine.py walks JSON byte
by byte, constraint.py maps that onto the model's vocabulary, tools.py reads and writes tool calls.
"""
from .constraint import Ban, Grammar, Trigger
from .schema import any_object, compile_schema

__all__ = ["Ban", "Grammar", "Trigger", "any_object", "compile_schema"]
