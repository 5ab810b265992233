"""engine.structured's schema compiler and byte machine, against the `jsonschema` package as the
judge: every text the machine lets a walk write, finished by its shortest completion, parses and
validates; a mutated text it takes validates too; pretty-printed valid JSON is taken; what is
not supported is refused by name; numbers' bounds are kept exactly (brute force)."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from engine.errors import InputError
from engine.structured import compile_schema, machine, numeric
from tests.helpers import need_import
from engine.bench.structured import SCHEMAS

jsonschema = need_import("jsonschema", "the judge of structured output (the test extra)")

ALPHABET = [*b' \n\t\x1f"{}[],:-.0123456789eEtrufalsn\\abcxyz_AZ', *"é😀".encode()]


def validator(schema):
    return jsonschema.Draft202012Validator(schema)


def walk(node, rng, steps: int):
    """(state, text) after up to `steps` random bytes of ALPHABET that the machine allows."""
    state, text = machine.initial(node), b""
    for _ in range(steps):
        choices = [(b, s) for b in ALPHABET if (s := machine.step(state, b)) is not None]
        if not choices:
            break
        b, state = rng.choice(choices)
        text += bytes((b,))
    return state, text


def takes(node, text: bytes) -> bool:
    state = machine.initial(node)
    for b in text:
        state = machine.step(state, b)
        if state is None:
            return False
    return machine.ends(state)


@pytest.mark.parametrize("name", SCHEMAS)
def test_shortest_text_validates(name):
    node = compile_schema(SCHEMAS[name])
    validator(SCHEMAS[name]).validate(json.loads(node.shortest))
    assert takes(node, node.shortest)


@pytest.mark.parametrize("name", SCHEMAS)
def test_random_walks_finish_as_valid_json(name):
    """Random bytes the machine allows, then machine.rest: always a whole, valid answer."""
    node, check, rng = compile_schema(SCHEMAS[name]), validator(SCHEMAS[name]), random.Random(name)
    for n in range(60):
        state, text = walk(node, rng, rng.randrange(120))
        rest = machine.rest(state)
        whole = text + rest
        assert takes(node, whole), (text, rest)
        value = json.loads(whole)
        check.validate(value)
        if n % 10 == 0:                          # a mutated byte: taken only when still valid
            for _ in range(20):
                at = rng.randrange(len(whole))
                bad = whole[:at] + bytes((rng.choice(ALPHABET),)) + whole[at + 1:]
                if takes(node, bad):
                    check.validate(json.loads(bad))


@pytest.mark.parametrize("name", SCHEMAS)
def test_pretty_printed_answers_are_taken(name):
    node = compile_schema(SCHEMAS[name])
    value = json.loads(node.shortest)
    for indent in (None, 2):
        assert takes(node, json.dumps(value, indent=indent, ensure_ascii=False).encode())


def test_objects_that_name_their_properties_are_closed():
    empty = compile_schema({"type": "object", "properties": {}})
    assert takes(empty, b"{}") and takes(empty, b"{ }") and not takes(empty, b'{"type":"object"}')
    named = compile_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert takes(named, b'{"a":1}') and takes(named, b"{}") and not takes(named, b'{"a":1,"b":2}')
    assert not takes(named, b'{"a":1,"a":2}')                     # each name once
    ints = compile_schema({"type": "object", "additionalProperties": {"type": "integer"}})
    assert takes(ints, b'{"x":1,"y":-2}') and not takes(ints, b'{"x":"1"}')
    closed = compile_schema({"type": "object", "additionalProperties": False})
    assert takes(closed, b"{}") and not takes(closed, b'{"x":1}')


def test_nesting_is_bounded():
    node = compile_schema({"type": "object"})
    deep = b'{"a":' + b"[" * (machine.MAX_NESTING - 1)
    assert takes(node, deep + b"]" * (machine.MAX_NESTING - 1) + b"}")
    assert not takes(node, deep + b"[" + b"]" * machine.MAX_NESTING + b"}")
    tree = compile_schema(SCHEMAS["tree"])
    text = b'{"label":"a","children":[' * 40
    state = machine.initial(tree)
    for b in text:
        state = machine.step(state, b) if state is not None else None
    assert state is None                                   # 80 deep: refused on the way


def test_whitespace_runs_are_bounded_and_strings_are_utf8():
    node = compile_schema({"type": "object"})
    assert not takes(node, b"{" + b" " * (machine.WS_RUN + 1) + b"}")
    assert takes(node, b"{" + b" " * machine.WS_RUN + b"}")
    assert takes(node, '{"é":"😀\\u00e9\\n"}'.encode())
    for bad in (b'{"a":"\xff"}', b'{"a":"\xc3"}', b'{"a":"\xed\xa0\x80"}', b'{"a":"\x01"}', b'{"a":"\x1f"}', b'{"a":"\t"}', b'{"a":"\\x"}'):
        assert not takes(node, bad), bad


@pytest.mark.parametrize("schema, named", [
    ({"type": "string", "pattern": "a+"}, "pattern"),
    ({"type": "string", "format": "email"}, "format"),
    ({"oneOf": [{"type": "string"}]}, "oneOf"),
    ({"type": "integer", "multipleOf": 3}, "multipleOf"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}, "properties/a"),
    ({"$ref": "http://example.com/s.json"}, "$ref"),
    ({"$ref": "#/$defs/missing"}, "points at nothing"),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "required"),
    ({"type": "object", "required": ["b"]}, "required without properties"),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}}, "additionalProperties"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, "no number"),
    ({"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2}, "no integer"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "maxLength"),
    ({"type": "thing"}, "type"),
    ({"type": "string", "minLength": 10**9}, "shortest answer takes 1000000002 bytes"),
    ({"type": "array", "items": {"type": "string", "minLength": 1000}, "minItems": 1000}, "shortest answer"),
    ({"type": "integer", "minimum": 1e30}, "more than 18 digits"),
    ({"anyOf": [{"type": "string"}, {"$ref": "#"}]}, "refers to itself before any value begins"),
    ({"type": "string", "enum": ["a"], "maxLength": 3}, "enum or const beside maxLength"),
    ({"type": "integer", "enum": ["a", True]}, "no value of its enum"),
    ({"enum": [float("nan")]}, "not JSON"),
    ({"$ref": {"a": 1}}, "$ref must be a string"),
    ({"$defs": {"a": {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "required": ["a"]}},
      "$ref": "#/$defs/a"}, "never ends"),
])
def test_what_is_not_supported_is_refused_by_name(schema, named):
    with pytest.raises(InputError, match=named.replace("$", r"\$")):
        compile_schema(schema)


BOUNDS = [dict(minimum=0, maximum=130), dict(minimum=-90, maximum=60), dict(exclusiveMinimum=0, exclusiveMaximum=1000),
          dict(minimum=10, maximum=20), dict(minimum=0.25, maximum=0.5), dict(exclusiveMinimum=0),
          dict(minimum=-5.5), dict(maximum=-3), dict(minimum=1000, maximum=1001)]
UNIVERSE = [b"".join(p) for n in range(1, 5) for p in itertools.product([b"-", b"0", b"1", b"2", b"5", b"9", b"."],
                                                                          repeat=n)]


@pytest.mark.parametrize("kind", ["integer", "number"])
@pytest.mark.parametrize("bounds", BOUNDS, ids=lambda b: ",".join(f"{k}={v}" for k, v in b.items()))
def test_number_bounds_are_kept_exactly(kind, bounds):
    try:
        node = compile_schema({"type": kind, **bounds})
    except InputError:
        return
    check = validator({"type": kind, **bounds})
    for text in UNIVERSE:
        feasible = numeric.feasible(text, node)
        if numeric.complete(text, node):
            assert feasible and check.is_valid(json.loads(text)), text
        if not feasible:                          # no extension of up to 3 more bytes is a number of the node
            assert not any(numeric.complete(text + b"".join(more), node)
                           for n in range(4) for more in itertools.product([b"0", b"1", b"5", b"9", b"."], repeat=n))
            continue
        rest = numeric.completion(text, node)
        assert rest is not None and numeric.complete(text + rest, node), text
        assert check.is_valid(json.loads(text + rest))
        shorter = [text + b"".join(more) for n in range(len(rest))
                   for more in itertools.product([b"0", b"1", b"2", b"5", b"9", b"."], repeat=n)]
        assert not any(numeric.complete(s, node) for s in shorter), (text, rest)


ODD = [None, True, False, 0, -1, 2**63, 1e308, -0.5, "", "string", "#/$defs/x", [], [1, "a"], {}, {"type": 3},
       {"$ref": "#"}, {"enum": []}, {"minimum": "x"}, [{"type": "string"}] * 3, {"anyOf": "x"}, float("nan")]


def _mutate(rng, value, depth=0):
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        out = dict(value)
        roll = rng.random()
        if roll < 0.3:
            out[key] = rng.choice(ODD)
        elif roll < 0.45:
            del out[key]
        elif roll < 0.6:
            out[rng.choice(["minLength", "maxItems", "exclusiveMaximum", "required", "items", "$ref",
                            "additionalProperties", "const", "type", "allOf"])] = rng.choice(ODD)
        else:
            out[key] = _mutate(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and rng.random() < 0.7:
        out = list(value)
        at = rng.randrange(len(out))
        out[at] = _mutate(rng, out[at], depth + 1) if rng.random() < 0.6 else rng.choice(ODD)
        return out
    return rng.choice(ODD) if rng.random() < 0.3 else value


def test_mangled_schemas_are_refused_with_input_errors_or_kept():
    """600 random edits of the 20 schemas: compile_schema raises only InputError; a schema it
    takes (and jsonschema deems a schema) still gives only valid answers."""
    rng = random.Random(36)
    names = sorted(SCHEMAS)
    kept = checked = 0
    for i in range(600):
        schema = _mutate(rng, SCHEMAS[names[i % len(names)]])
        try:
            node = compile_schema(schema)
        except InputError:
            continue
        kept += 1
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError:
            continue
        state, text = walk(node, rng, rng.randrange(40))
        whole = text + machine.rest(state)
        assert takes(node, whole), (schema, whole)
        validator(schema).validate(json.loads(whole))
        checked += 1
    assert kept > 100 and checked > 50, (kept, checked)
