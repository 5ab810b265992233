"""engine.structured's constraint on real vocabularies (SmolLM2's 49,152 byte-level tokens and
Qwen2.5's 151,665 in a 151,936-wide head, read from the registry's GGUFs): the mask equals
walking every token on its own, and answers chosen from random logits (greedy and sampled, with
budgets down to the shortest answer) always end as valid JSON within max_tokens."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from engine.structured import Grammar, Trigger, compile_schema, machine
from engine.text import Tokenizer
from tests.helpers import need_import
from engine.bench.structured import SCHEMAS

jsonschema = need_import("jsonschema", "the judge of structured output (the test extra)")


@pytest.fixture(scope="module", params=["smollm2", "qwen"])
def vocab(request):
    """(tokenizer, logits width, end-of-sequence id)"""
    if request.param == "smollm2":
        path, width = request.getfixturevalue("smollm2_gguf"), 49152
    else:
        path, width = request.getfixturevalue("qwen05_gguf"), 151936
    tok = Tokenizer.from_gguf(str(path))
    return tok, width, tok.token_to_id("<|im_end|>")


def brute_force(grammar, state) -> np.ndarray:
    out = np.zeros(grammar.vocab.size, bool)
    for i, piece in enumerate(grammar.vocab.pieces):
        out[i] = bool(piece) and grammar.walk(state, piece) is not None
    return out


PREFIXES = [("person", b'{"name":"'), ("person", b'{"name":"\xc3'), ("person", b'{"name":"ab\xf0\x9f'),
            ("person", b'{"name":"a\\'), ("person", b'{"email":"a\\u00'), ("anything", b'{"k\xe2\x82'),
            ("rating", b'{"stars":4,"review":"a'), ("list", b'[-1'), ("point", b'{"x":1.5e')]


@pytest.mark.parametrize("name, prefix", PREFIXES)
def test_the_mask_inside_strings_and_numbers(vocab, name, prefix):
    tok, width, _ = vocab
    grammar = Grammar(compile_schema(SCHEMAS[name]), tok, width)
    state = grammar.walk(grammar.first, prefix)
    np.testing.assert_array_equal(grammar.mask(state), brute_force(grammar, state))


def test_the_mask_equals_walking_every_token(vocab):
    tok, width, _ = vocab
    rng = random.Random(7)
    for name in ("person", "tags", "shape", "tree", "anything", "rating"):
        grammar = Grammar(compile_schema(SCHEMAS[name]), tok, width)
        state = grammar.first
        for _ in range(6):                                   # states along a random valid walk
            np.testing.assert_array_equal(grammar.mask(state), brute_force(grammar, state), err_msg=name)
            choices = [b for b in b' "{}[],:-0123456789abtrue\xc3\xa9' if machine.step(state, b) is not None]
            if not choices:
                break
            for _ in range(rng.randrange(1, 8)):
                options = [b for b in choices if machine.step(state, b) is not None]
                if not options:
                    break
                state = machine.step(state, rng.choice(options))


def run(grammar, width, eos, budget, pick, rng):
    constraint = grammar.start(budget, [eos])
    out = []
    for _ in range(budget):
        logits = rng.normal(0, 4, width).astype(np.float32)
        logits[eos] += rng.normal(0, 4)
        token = constraint.choose(logits, pick)
        assert constraint.fits(token)
        constraint.advance(token)
        if token == eos:
            break
        out.append(token)
    return b"".join(grammar.vocab.pieces[t] for t in out), constraint


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_answers_from_random_logits_are_valid_within_the_budget(vocab, name):
    tok, width, eos = vocab
    grammar = Grammar(compile_schema(SCHEMAS[name]), tok, width)
    check = jsonschema.Draft202012Validator(SCHEMAS[name])
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    shortest = grammar.cost(grammar.first)
    greedy = lambda logits: int(np.argmax(logits))       # noqa: E731

    def sampled(logits):
        p = np.exp(logits - logits.max())
        return int(rng.choice(p.size, p=p / p.sum()))
    for budget, pick in ((shortest, greedy), (shortest + 7, sampled), (60, greedy), (60, sampled)):
        text, constraint = run(grammar, width, eos, budget, pick, rng)
        check.validate(json.loads(text))
        assert constraint.complete


def test_a_trigger_constrains_only_what_follows_it(vocab):
    tok, width, eos = vocab
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"]}
    grammar = Grammar(compile_schema(schema), tok, width, after=b"\n</tool_call>")
    trigger = Trigger(grammar, b"<tool_call>").start(64, [eos])
    plain = [tok.token_to_id(t) for t in ("Hello", ",")]
    opener = tok.encode("<tool_call>", add_special_tokens=False).ids
    for token in plain + opener:
        one_hot = np.zeros(width, np.float32)
        one_hot[token] = 1
        assert trigger.choose(one_hot, lambda l: int(np.argmax(l))) == token
        trigger.advance(token)
    assert trigger.inner is not None                        # from here on, the call's JSON
    rng = np.random.default_rng(3)
    out = []
    while trigger.inner is not None:
        token = trigger.choose(rng.normal(0, 4, width).astype(np.float32), lambda l: int(np.argmax(l)))
        trigger.advance(token)
        out.append(token)
    text = b"".join(grammar.vocab.pieces[t] for t in out).rstrip()   # its last token may end in whitespace
    assert text.endswith(b"\n</tool_call>")
    jsonschema.validate(json.loads(text[:-len(b"\n</tool_call>")]), schema)
