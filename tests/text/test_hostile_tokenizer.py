"""Hostile tokenizer.json files, classes of finding of the readers' fuzzer (tests/fuzz): JSON too deep
or with numbers Python cannot carry, ids and lengths that overflow NumPy's int64 or allocate what
they claim, split regexes that backtrack exponentially or break `re`, and null where an object must
be. Each is a TokenizerError naming the file and the field."""
from __future__ import annotations

import copy
import json
import time

import pytest

from engine.errors import TokenizerError
from engine.text import Tokenizer
from tests.text.test_tokenizer_errors import TINY

FILE = "hostile/tokenizer.json"


def variant(change) -> str:
    config = copy.deepcopy(TINY)
    change(config)
    return json.dumps(config)


def refused(text: str, *fragments: str) -> TokenizerError:
    start = time.perf_counter()
    with pytest.raises(TokenizerError) as info:
        Tokenizer.from_str(text, file=FILE).encode("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!")
    assert time.perf_counter() - start < 2
    message = str(info.value)
    assert FILE in message
    for fragment in fragments:
        assert fragment in message, message
    return info.value


def nested(section: str, key: str, depth: int, leaf: dict):
    def change(config):
        node = leaf
        for _ in range(depth):
            node = {"type": "Sequence", key: [node]}
        config[section] = node
    return change


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100_000 + "]" * 100_000, "nests JSON containers deeper than 64"),
    (variant(nested("normalizer", "normalizers", 300, {"type": "Lowercase"})), "deeper than 64"),
    ('{"model": {"type": "WordPiece", "vocab": {"a": 1' + "0" * 5000 + "}}}", "does not fit in 64 bits"),
    ('{"model": {"type": "WordPiece", "vocab": {"a": NaN}}}', "NaN is not JSON"),
], ids=["nested-arrays", "nested-sequences", "huge-int", "nan"])
def test_json(text, fragment):
    refused(text, fragment)


def test_sequences_a_few_deep_still_work():
    tok = Tokenizer.from_str(variant(nested("normalizer", "normalizers", 5, {"type": "Lowercase"})), file=FILE)
    assert tok.encode("HELLO").tokens == ["[CLS]", "hello", "[SEP]"]


@pytest.mark.parametrize("change, fragments", [
    (lambda c: c["model"]["vocab"].update(hello=2 ** 63), ("'hello' must be a non-negative integer up to",)),
    (lambda c: c["post_processor"]["special_tokens"]["[CLS]"].update(ids=[2 ** 63]), ("ids[0]", "at most")),
    (lambda c: c["post_processor"]["single"][0]["SpecialToken"].update(type_id=-1), ("must not be negative",)),
    (lambda c: c.update(padding={"strategy": {"Fixed": 10 ** 9}}), ("padding.strategy", "Fixed")),
    (lambda c: c.update(padding={"strategy": "BatchLongest", "pad_to_multiple_of": 2 ** 40}),
     ("padding.pad_to_multiple_of", "at most")),
    (lambda c: c.update(padding={"strategy": "BatchLongest", "pad_id": 2 ** 63}), ("padding.pad_id",)),
], ids=["vocab-id", "special-id", "type-id", "fixed-padding", "pad-multiple", "pad-id"])
def test_numbers_that_overflow_or_allocate(change, fragments):
    refused(variant(change), *fragments)


@pytest.mark.parametrize("pattern", ["(a+)+b", "(a|aa)*b", "(\\s*)*x", "((a*)*)*z", "(?:\\p{L}|a)+!x"])
def test_split_regexes_that_backtrack_exponentially(pattern):
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    refused(variant(lambda c: c.update(pre_tokenizer=split)), "exponential backtracking", "pre_tokenizer.pattern")


@pytest.mark.parametrize("pattern", ["a{4294967296}", "(" * 3000 + ")" * 3000])
def test_split_regexes_that_break_re(pattern):
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    refused(variant(lambda c: c.update(pre_tokenizer=split)), "cannot use the regex")


@pytest.mark.parametrize("pattern", [
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",            # GPT-2
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
], ids=["gpt2", "llama3"])
def test_real_split_regexes_are_accepted(pattern):
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    tok = Tokenizer.from_str(variant(lambda c: c.update(pre_tokenizer=split)), file=FILE)
    assert tok.encode("hello world!!").ids[0] == 1


@pytest.mark.parametrize("change, field", [
    (lambda c: c["post_processor"]["special_tokens"].update({"[CLS]": None}), "post_processor.special_tokens.[CLS]"),
    (lambda c: c["post_processor"]["single"][0].update(SpecialToken=None), "post_processor.single[0].SpecialToken"),
], ids=["special-token", "template-piece"])
def test_null_where_an_object_must_be(change, field):
    assert refused(variant(change), "expected an object, got null").field == field


def test_many_long_added_tokens_are_found_without_compiling_megabytes_of_regex():
    # 1,000 added tokens of 5,000 characters (the fuzzer's case tokenizer:11:222): a flat alternation
    # of them took `re` 3 s to compile; as a prefix tree it is 7 kB of regex
    added = [{"id": 5000 + i, "content": "a" * 5000 + str(i), "special": False, "single_word": False,
              "lstrip": False, "rstrip": False, "normalized": False} for i in range(1000)]
    text = variant(lambda config: config["added_tokens"].extend(added))
    start = time.perf_counter()
    tokenizer = Tokenizer.from_str(text, file=FILE)
    encoding = tokenizer.encode("x " + "a" * 5000 + "123 " + "a" * 5000 + "7")
    assert time.perf_counter() - start < 2
    assert [t for t in encoding.tokens if t.startswith("aaaa")] == ["a" * 5000 + "123", "a" * 5000 + "7"]


def test_the_prefix_tree_finds_what_a_flat_alternation_finds():
    # leftmost-longest, as tokenizers' Aho-Corasick: the prefix-tree regex against the flat one,
    # longest first, on random tokens that share prefixes and hold regex syntax
    import random
    import re

    from engine.text.added_tokens import _alternation
    rng = random.Random(7)
    alphabet = "ab<|>.*é"
    for _ in range(500):
        tokens = sorted({"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
                         for _ in range(rng.randint(1, 40))})
        flat = re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))))
        tree = re.compile(_alternation(tokens))
        for _ in range(5):
            text = "".join(rng.choice(alphabet + " ") for _ in range(60))
            assert [m.span() for m in tree.finditer(text)] == [m.span() for m in flat.finditer(text)]
