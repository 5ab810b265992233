"""JSON Schema, compiled into the nodes the byte machine (machine.py) walks.

    root = compile_schema({"type": "object", "properties": {"n": {"type": "integer"}}})

What is supported (JSON Schema 2020-12's words, OpenAI's structured-output subset and a little
more): `type` (one or a list), objects with `properties`, `required` and `additionalProperties`
(false, or a schema for objects without `properties`: objects that name their properties are
closed, as OpenAI's strict mode has them), arrays with `items`, `minItems`, `maxItems`, strings
with `minLength`, `maxLength`, integers and numbers with `minimum`, `maximum`,
`exclusiveMinimum`, `exclusiveMaximum`, booleans, null, `enum`, `const`, `anyOf`, `allOf` of
one schema, `$ref` to `#`, `#/$defs/...` or `#/definitions/...` (recursive ones too), and the
annotations (title, description, default, examples, ...), which constrain nothing. Anything
else (`pattern`, `format`, `oneOf`, `multipleOf`, `uniqueItems`, ...) is refused up front with
an InputError naming the keyword and where it is, so no answer claims a constraint it did not
keep.

Each node knows its shortest serialization (`shortest`), which bounds the tokens a complete
answer needs; recursive references reach it by iterating to a fixed point.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction

from ..errors import InputError
from .numeric import DIGITS, completion

ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
               "readOnly", "writeOnly", "$defs", "definitions", "strict", "additionalItems"}
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
KEYWORDS = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
            "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum",
            "const", "anyOf", "allOf", "$ref"}
MAX_DEPTH = 64                # nesting of the schema itself
MAX_SHORTEST = 1 << 16        # bytes of the shortest answer a schema may ask for (minLength, minItems)


def dumps(value, where: str = "enum") -> bytes:
    """JSON as the machine writes literals: compact, UTF-8 (NaN and infinities are not JSON)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except (ValueError, TypeError, RecursionError) as e:
        raise InputError(f"{where}: a value that is not JSON ({e})") from None


class Node:
    """One schema, compiled. kind: any | object | array | string | integer | number | boolean |
    null | literal | anyof; `shortest`: its shortest JSON text (bytes)."""

    def __init__(self, kind: str, where: str, **fields):
        self.kind, self.where = kind, where
        self.shortest = None
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"Node({self.kind} at {self.where})"


class _Compiler:
    def __init__(self, root):
        self.root, self.by_pointer, self.nodes = root, {}, []

    def ref(self, pointer: str, where: str, depth: int) -> Node:
        if not isinstance(pointer, str):
            raise InputError(f"{where}: $ref must be a string, got {pointer!r:.60}")
        if pointer in self.by_pointer:
            return self.by_pointer[pointer]
        if pointer != "#" and not pointer.startswith(("#/$defs/", "#/definitions/")):
            raise InputError(f"{where}: $ref {pointer!r} is not supported (only '#', '#/$defs/...' and "
                             "'#/definitions/...')")
        target = self.root
        for part in pointer[2:].split("/") if pointer != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise InputError(f"{where}: $ref {pointer!r} points at nothing")
            target = target[part]
        node = self.by_pointer[pointer] = Node("ref", pointer)      # filled in below (recursion lands here)
        real = self.node(target, pointer, depth + 1)
        node.__dict__.update(real.__dict__)
        return self.add(node)                    # its own shortest text, found with the others

    def node(self, schema, where: str, depth: int = 0) -> Node:
        if depth > MAX_DEPTH:
            raise InputError(f"{where}: the schema nests more than {MAX_DEPTH} deep")
        if schema is True or schema == {}:
            return self.add(Node("any", where))
        if not isinstance(schema, dict):
            raise InputError(f"{where}: a schema must be an object (or true), got {schema!r:.60}")
        unknown = sorted(set(schema) - KEYWORDS - ANNOTATIONS)
        if unknown:
            raise InputError(f"{where}: JSON Schema keyword(s) not supported for constrained output: "
                             f"{', '.join(unknown)}")
        if "$ref" in schema:
            others = set(schema) - ANNOTATIONS - {"$ref"}
            if others:
                raise InputError(f"{where}: $ref beside {', '.join(sorted(others))} is not supported")
            return self.ref(schema["$ref"], where, depth)
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            if not isinstance(values, list) or not values:
                raise InputError(f"{where}: enum must be a non-empty list")
            others = sorted(set(schema) - ANNOTATIONS - {"const", "enum", "type"})
            if others:
                raise InputError(f"{where}: enum or const beside {', '.join(others)} is not supported")
            if "const" in schema and "enum" in schema:
                values = [v for v in values if any(_same(v, e) for e in schema["enum"])] \
                    if isinstance(schema["enum"], list) else values
            if "type" in schema:
                kinds = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
                if not isinstance(kinds, list) or any(k not in TYPES for k in kinds):
                    raise InputError(f"{where}: type must be one of {', '.join(TYPES)} or a list of them")
                values = [v for v in values if any(_of_type(v, k) for k in kinds)]
            if not values:
                raise InputError(f"{where}: no value of its enum or const is allowed by the rest of it")
            return self.add(Node("literal", where, texts=tuple(dict.fromkeys(dumps(v, where) for v in values))))
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list) or len(parts) != 1 or set(schema) - ANNOTATIONS - {"allOf"}:
                raise InputError(f"{where}: allOf is supported only with one schema and nothing beside it")
            return self.node(parts[0], f"{where}/allOf/0", depth + 1)
        if "anyOf" in schema:
            parts = schema["anyOf"]
            if not isinstance(parts, list) or not parts:
                raise InputError(f"{where}: anyOf must be a non-empty list of schemas")
            if set(schema) - ANNOTATIONS - {"anyOf"}:
                raise InputError(f"{where}: anyOf beside other keywords is not supported")
            return self.add(Node("anyof", where, options=[self.node(p, f"{where}/anyOf/{i}", depth + 1)
                                                          for i, p in enumerate(parts)]))
        kinds = schema.get("type")
        if kinds is None:
            kinds = [k for k, keys in (("object", ("properties", "required", "additionalProperties")),
                                       ("array", ("items", "minItems", "maxItems")),
                                       ("string", ("minLength", "maxLength")),
                                       ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")))
                     if any(key in schema for key in keys)] or list(TYPES)
            if kinds == list(TYPES):
                return self.add(Node("any", where))
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not isinstance(kinds, list) or not kinds or any(k not in TYPES for k in kinds):
            raise InputError(f"{where}: type must be one of {', '.join(TYPES)} or a list of them, got {kinds!r}")
        options = [self.typed(kind, schema, where, depth) for kind in dict.fromkeys(kinds)]
        return options[0] if len(options) == 1 else self.add(Node("anyof", where, options=options))

    def typed(self, kind: str, schema: dict, where: str, depth: int) -> Node:
        if kind == "object":
            props = schema.get("properties", {})
            required = schema.get("required", [])
            if not isinstance(props, dict) or not isinstance(required, list) or \
                    not all(isinstance(r, str) for r in required):
                raise InputError(f"{where}: properties must be an object and required a list of names")
            named, extra = "properties" in schema, schema.get("additionalProperties")
            if named and extra not in (None, False):
                raise InputError(f"{where}: additionalProperties beside properties is not supported "
                                 "(objects with properties are closed)")
            closed = named or extra is False
            missing = [r for r in required if r not in props]
            if closed and missing:
                raise InputError(f"{where}: required names {missing} that properties does not define")
            if not closed and required:
                raise InputError(f"{where}: required without properties is not supported (name them in properties)")
            names = {name: self.node(s, f"{where}/properties/{name}", depth + 1) for name, s in props.items()}
            other = None if closed else self.node(True if extra in (None, True) else extra,
                                                  f"{where}/additionalProperties", depth + 1)
            return self.add(Node("object", where, props=names, keys={dumps(n)[1:-1]: n for n in names},
                                 required=frozenset(required), other=other))
        if kind == "array":
            items = schema.get("items", True)
            if isinstance(items, list):
                raise InputError(f"{where}: items as a list (tuples) is not supported")
            low, high = _bound(schema, "minItems", where, 0), _bound(schema, "maxItems", where, None)
            if high is not None and high < low:
                raise InputError(f"{where}: maxItems {high} < minItems {low}")
            return self.add(Node("array", where, items=self.node(items, f"{where}/items", depth + 1),
                                 low=low, high=high))
        if kind == "string":
            low, high = _bound(schema, "minLength", where, 0), _bound(schema, "maxLength", where, None)
            if high is not None and high < low:
                raise InputError(f"{where}: maxLength {high} < minLength {low}")
            return self.add(Node("string", where, low=low, high=high))
        if kind in ("integer", "number"):
            return self.add(Node(kind, where, **_number_bounds(schema, where, kind == "integer")))
        return self.add(Node("literal", where, texts=(b"true", b"false") if kind == "boolean" else (b"null",)))

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        return node


def _of_type(value, kind: str) -> bool:
    """Whether a JSON value is of a JSON Schema type (2.0 is an integer, true is not a number)."""
    if isinstance(value, bool):
        return kind == "boolean"
    if isinstance(value, int):
        return kind in ("integer", "number")
    if isinstance(value, float):
        return kind == "number" or (kind == "integer" and value.is_integer())
    return {"string": str, "object": dict, "array": list, "null": type(None)}.get(kind) is type(value)


def _same(a, b) -> bool:
    """JSON equality (1 == 1.0, but true != 1)."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _bound(schema: dict, name: str, where: str, default):
    value = schema.get(name, default)
    if value is not default and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InputError(f"{where}: {name} must be an integer >= 0, got {value!r}")
    return value


def _number_bounds(schema: dict, where: str, integer: bool) -> dict:
    bounds = {}
    for name, key, strict in (("minimum", "lo", False), ("exclusiveMinimum", "lo", True),
                              ("maximum", "hi", False), ("exclusiveMaximum", "hi", True)):
        if name not in schema:
            continue
        value = schema[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{where}: {name} must be a finite number, got {value!r}")
        value = Fraction(value)
        old = bounds.get(key)
        tighter = old is None or (value > old[0] if key == "lo" else value < old[0]) or (value == old[0] and strict)
        if tighter:
            bounds[key] = (value, strict)
    lo, hi = bounds.get("lo"), bounds.get("hi")
    if lo is not None and hi is not None and (lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1]))):
        raise InputError(f"{where}: no number lies within its bounds")
    if integer and lo is not None and hi is not None:
        first = math.floor(lo[0]) + 1 if lo[1] or lo[0] != math.floor(lo[0]) else int(lo[0])
        if first > hi[0] or (first == hi[0] and hi[1]):
            raise InputError(f"{where}: no integer lies within its bounds")
    return {"lo": lo, "hi": hi}


def compile_schema(schema, where: str = "schema") -> Node:
    """The root node of `schema` (a JSON Schema as a dict, or True for any JSON value)."""
    compiler = _Compiler(schema)
    root = compiler.node(schema, where)
    _no_empty_loops(compiler.nodes)
    _shortest(compiler.nodes)
    if root.shortest is None:
        raise InputError(f"{where}: no finite JSON value satisfies it (a required recursion never ends)")
    return root


def any_object(where: str = "response_format json_object") -> Node:
    """Any JSON object (OpenAI's json_object mode)."""
    return compile_schema({"type": "object"}, where)


def _no_empty_loops(nodes) -> None:
    """Refuse an anyOf that reaches itself through anyOfs alone ({"anyOf": [{"$ref": "#"}]}): its
    value would never begin."""
    done: set = set()

    def visit(node, path):
        if node.kind != "anyof" or id(node) in done:
            return
        if id(node) in path:
            raise InputError(f"{node.where}: an anyOf that refers to itself before any value begins")
        path.add(id(node))
        for option in node.options:
            visit(option, path)
        path.discard(id(node))
        done.add(id(node))
    for node in nodes:
        visit(node, set())


def _shortest(nodes) -> None:
    """Each node's shortest JSON text, iterated to a fixed point (recursive $refs)."""
    for _ in range(len(nodes) + 2):
        changed = False
        for node in nodes:
            text = _shortest_of(node)
            if text is not None and (node.shortest is None or len(text) < len(node.shortest)):
                node.shortest, changed = text, True
        if not changed:
            return


def _shortest_of(node: Node) -> bytes | None:
    kind = node.kind
    if kind == "any":
        return b"0"
    if kind == "literal":
        return min(node.texts, key=len)
    if kind == "anyof":
        texts = [o.shortest for o in node.options if o.shortest is not None]
        return min(texts, key=len) if texts else None
    if kind == "string":
        _fits(node, node.low + 2)
        return b'"' + b"a" * node.low + b'"'
    if kind in ("integer", "number"):
        rest = completion(b"", node)
        if rest is None:
            raise InputError(f"{node.where}: its bounds need numbers of more than {DIGITS} digits")
        return rest
    if kind == "array":
        if node.low == 0:
            return b"[]"
        if node.items.shortest is None:
            return None
        _fits(node, (len(node.items.shortest) + 1) * node.low + 1)
        return b"[" + b",".join([node.items.shortest] * node.low) + b"]"
    if kind == "object":
        parts = []
        for name in sorted(node.required):
            value = node.props[name].shortest if name in node.props else (node.other.shortest if node.other else None)
            if value is None:
                return None
            parts.append(dumps(name) + b":" + value)
        _fits(node, sum(map(len, parts)) + len(parts) + 1)
        return b"{" + b",".join(parts) + b"}"
    return None


def _fits(node: Node, size: int) -> None:
    """Refuse a schema whose shortest answer is absurd (before any allocation of that size)."""
    if size > MAX_SHORTEST:
        raise InputError(f"{node.where}: its shortest answer takes {size} bytes, more than the "
                         f"{MAX_SHORTEST} a constrained answer may need")
