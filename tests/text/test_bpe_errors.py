"""Bad byte-level BPE tokenizers, from tokenizer.json or from GGUF metadata, give TokenizerErrors
that name the file and the field or metadata key."""
import copy
import json

import numpy as np
import pytest

from engine.errors import TokenizerError
from engine.text import Tokenizer
from engine.text.patterns import translate_regex
from engine.text.pre_tokenizers import BYTE_CHARS
from tests.helpers import need_import

BYTES = list(BYTE_CHARS.values())

TINY_JSON = {
    "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
    "added_tokens": [{"id": 258, "content": "<|end|>", "special": True, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": {**{c: i for i, c in enumerate(BYTES)}, "ab": 256, "abc": 257, "<|end|>": 258},
              "merges": ["a b", "ab c"]},
}


def variant(change) -> str:
    config = copy.deepcopy(TINY_JSON)
    change(config)
    return json.dumps(config)


@pytest.mark.parametrize("merges", [["a b", "ab c"], [["a", "b"], ["ab", "c"]]])
def test_tiny_json_works(reference, merges):
    """Both spellings of merges: "a b" strings (older files) and ["a", "b"] pairs."""
    config = json.dumps(dict(TINY_JSON, model=dict(TINY_JSON["model"], merges=merges)))
    ours, theirs = Tokenizer.from_str(config), reference.Tokenizer.from_str(config)
    for text in ("abc abcd<|end|> é", "", "  abab"):
        assert ours.encode(text).ids == theirs.encode(text).ids
        assert ours.decode(ours.encode(text).ids) == theirs.decode(theirs.encode(text).ids)


@pytest.mark.parametrize("change, fragments", [
    (lambda c: c["model"]["merges"].append("a €"), ("merge 'a' + '€': '€' is not in the vocabulary",
                                                   "'model.merges[2]'")),
    (lambda c: c["model"]["merges"].append("b c"), ("'bc' is not in the vocabulary", "'model.merges[2]'")),
    (lambda c: c["model"]["merges"].insert(0, "a b c"), ("a merge joins two tokens", "'model.merges[0]'")),
    (lambda c: c["model"]["merges"].append(["a"]), ("a merge joins two tokens", "'model.merges[2]'")),
    (lambda c: c["model"]["merges"].append(7), ('expected "a b" or ["a", "b"], got 7', "'model.merges[2]'")),
    (lambda c: c["model"].pop("merges"), ("missing field", "'model.merges'")),
    (lambda c: c["model"].update(merges={"a": "b"}), ("expected a list", "'model.merges'")),
    (lambda c: c["model"].update(vocab=BYTES), ("expected an object", "'model.vocab'")),
    (lambda c: c["model"].update(dropout=0.1), ("dropout", "not implemented", "'model.dropout'")),
    (lambda c: c["model"].update(unk_token=0), ("expected a string or null", "'model.unk_token'")),
    (lambda c: c["model"].update(fuse_unk="no"), ("expected true or false", "'model.fuse_unk'")),
    (lambda c: c["pre_tokenizer"].update(add_prefix_space="yes"),
     ("expected true or false", "'pre_tokenizer.add_prefix_space'")),
    (lambda c: c.update(pre_tokenizer={"type": "Digits", "individual_digits": 1}),
     ("expected true or false", "'pre_tokenizer.individual_digits'")),
    (lambda c: c.update(pre_tokenizer={"type": "Split", "behavior": "Isolated", "invert": False}),
     ("missing field", "'pre_tokenizer.pattern'")),
    (lambda c: c.update(pre_tokenizer={"type": "Split", "pattern": {"Glob": "*"}, "behavior": "Isolated"}),
     ('expected {"String": text} or {"Regex": pattern}', "'pre_tokenizer.pattern'")),
    (lambda c: c.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": r"\p{Han}+"}, "behavior": "Isolated"}),
     ("cannot use the regex", "\\p{Han}", "only the Unicode classes", "'pre_tokenizer.pattern.Regex'")),
    (lambda c: c.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"}),
     ("cannot use the regex '(a'", "'pre_tokenizer.pattern.Regex'")),
    (lambda c: c.update(pre_tokenizer={"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"}),
     ("unknown value 'Sideways'", "'pre_tokenizer.behavior'")),
    (lambda c: c.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\d+"}, "behavior": "Isolated"}]}),
     ("the escape \\d is not implemented", "'pre_tokenizer.pretokenizers[0].pattern.Regex'")),
])
def test_malformed_fields(change, fragments):
    with pytest.raises(TokenizerError) as caught:
        Tokenizer.from_str(variant(change), file="tiny/tokenizer.json")
    message = str(caught.value)
    assert "tiny/tokenizer.json" in message, message
    for fragment in fragments:
        assert fragment in message, message


def test_unk_token_missing_from_the_vocabulary_is_reported_when_needed():
    tok = Tokenizer.from_str(variant(lambda c: c["model"].update(unk_token="<unk>", vocab={"a": 0, "b": 1, "ab": 2},
                                                                 merges=["a b"])), file="tiny.json")
    assert tok.encode("ab").ids == [2]
    with pytest.raises(TokenizerError, match=r"unk_token '<unk>'.*tiny\.json.*'model\.unk_token'"):
        tok.encode("abc")


@pytest.mark.parametrize("pattern, fragment", [
    (r"\p{Han}", "only the Unicode classes"), (r"\p{Sc}", "only the Unicode classes"),
    (r"\w+", "\\w is not implemented"), (r"^a", "anchor"),
    (r"a$", "anchor"), (r"[a[b]]", "nested"), (r"[a&&b]", "nested"), (r"[z-a]", "bad range"),
    (r"[ab", "unclosed character class"), ("a\\", "lone backslash"),
    (r"\p{L", "unclosed"), (r"\x{41", "unclosed"), (r"\uZZZZ", "bad escape"),
])
def test_regexes_that_are_refused(pattern, fragment):
    with pytest.raises(ValueError) as caught:
        translate_regex(pattern)
    assert fragment in str(caught.value)


def test_regexes_that_translate(reference):
    import re
    for pattern, text in [(r"\p{L}+|\P{N}", "aé1٣ x"), (r"[^\r\n\p{L}\p{N}]?\p{L}+", "!abc\ndef"),
                          (r"(?i:'s|'t)", "'S 't"), (r"(?<name>\x41)\u0042[\]x]", "AB]"), (r"\s+(?!\S)", "a   b"),
                          (r"[]a]+", "]a]"), (r"\.\-\/\#", ".-/#"), (r"[\S]+", "ab c\td"),
                          (r"[\P{L}\s]+", "ab1 2\U0001d400\U0001f600c"), (r"[^\S\n]+", " \t\n \n"),
                          (r"[\x41-\x43\-]+|[-a]", "ABCD-a"), (r"\p{N}\P{N}", "1a22\U0001d7ce\U0001f600")]:
        ours = [m.group() for m in re.finditer(translate_regex(pattern), text)]
        split = reference.pre_tokenizers.Split(reference.Regex(pattern), behavior="removed", invert=True)
        assert ours == [w for w, _ in split.pre_tokenize_str(text)], pattern


# --- GGUF metadata -------------------------------------------------------------------------------------

def tiny_metadata() -> dict:
    tokens = BYTES + ["ab", "abc", "<|end|>"]
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": np.array([1] * 258 + [3], dtype=np.int32),
            "tokenizer.ggml.merges": ["a b", "ab c"], "tokenizer.ggml.eos_token_id": 258,
            "tokenizer.ggml.add_bos_token": False, "tokenizer.chat_template": "{{ x }}"}


def test_tiny_metadata_works():
    tok = Tokenizer.from_gguf(tiny_metadata())
    assert tok.encode("abc ab<|end|>").tokens == ["abc", "Ġ", "ab", "<|end|>"]
    assert tok.special_tokens == {"eos_token": "<|end|>"} and tok.chat_template == "{{ x }}"
    assert tok.decode(tok.encode("abc ab<|end|>").ids) == "abc ab"


def set_key(key, value):
    def change(metadata):
        if value is KeyError:
            del metadata[key]
        else:
            metadata[key] = value
    return change


def set_item(key, index, value):
    def change(metadata):
        metadata[key] = list(metadata[key])
        metadata[key][index] = value
    return change


@pytest.mark.parametrize("change, fragments", [
    (set_key("tokenizer.ggml.model", KeyError), ("missing metadata key", "'tokenizer.ggml.model'")),
    (set_key("tokenizer.ggml.model", "bert"), ("tokenizer model 'bert' is not implemented", "'gpt2'",
                                               "'tokenizer.ggml.model'")),
    (set_key("tokenizer.ggml.model", 2), ("expected a string, got int", "'tokenizer.ggml.model'")),
    (set_key("tokenizer.ggml.pre", "qwen-9"), ("unknown pre-tokenizer 'qwen-9'", "neither transformers nor llama.cpp",
                                               "'tokenizer.ggml.pre'")),
    (set_key("tokenizer.ggml.pre", 2), ("expected a string, got int", "'tokenizer.ggml.pre'")),
    (set_key("tokenizer.ggml.tokens", KeyError), ("missing metadata key", "'tokenizer.ggml.tokens'")),
    (set_key("tokenizer.ggml.tokens", "abc"), ("expected an array of strings, got str", "'tokenizer.ggml.tokens'")),
    (set_key("tokenizer.ggml.tokens", []), ("the vocabulary is empty", "'tokenizer.ggml.tokens'")),
    (set_item("tokenizer.ggml.tokens", 5, b"\xff\xfe"), ("not UTF-8 text", "'tokenizer.ggml.tokens[5]'")),
    (set_item("tokenizer.ggml.tokens", 7, 7), ("expected a string, got int", "'tokenizer.ggml.tokens[7]'")),
    (set_key("tokenizer.ggml.merges", KeyError), ("missing metadata key", "'tokenizer.ggml.merges'")),
    (set_item("tokenizer.ggml.merges", 1, "abc"), ('a merge is two tokens "a b", got \'abc\'',
                                                   "'tokenizer.ggml.merges[1]'")),
    (set_item("tokenizer.ggml.merges", 1, "ab €"), ("'€' is not in the vocabulary", "'tokenizer.ggml.merges[1]'")),
    (set_item("tokenizer.ggml.merges", 0, "b c"), ("'bc' is not in the vocabulary", "'tokenizer.ggml.merges[0]'")),
    (set_key("tokenizer.ggml.token_type", [1, 1, 1]), ("3 entries for 259 tokens", "'tokenizer.ggml.token_type'")),
    (set_item("tokenizer.ggml.token_type", 4, "1"), ("expected an integer, got str",
                                                     "'tokenizer.ggml.token_type[4]'")),
    (set_key("tokenizer.ggml.token_type", 3), ("expected an array of integers", "'tokenizer.ggml.token_type'")),
    (set_key("tokenizer.ggml.eos_token_id", 259), ("token id 259 is outside the vocabulary of 259 tokens",
                                                   "'tokenizer.ggml.eos_token_id'")),
    (set_key("tokenizer.ggml.bos_token_id", "1"), ("expected an integer, got str", "'tokenizer.ggml.bos_token_id'")),
    (set_key("tokenizer.ggml.add_bos_token", True), ("asks for a bos_token but the file gives no bos_token id",
                                                     "'tokenizer.ggml.add_bos_token'")),
    (set_key("tokenizer.ggml.add_eos_token", 1), ("expected true or false, got int", "'tokenizer.ggml.add_eos_token'")),
    (set_key("tokenizer.chat_template", ["{{ x }}"]), ("expected a string, got list", "'tokenizer.chat_template'")),
])
def test_malformed_metadata(change, fragments):
    metadata = tiny_metadata()
    change(metadata)
    with pytest.raises(TokenizerError) as caught:
        Tokenizer.from_gguf(metadata)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    assert caught.value.field == fragments[-1].strip("'")


def test_bad_arguments(tmp_path):
    with pytest.raises(TokenizerError, match="reference must be one of transformers, llama.cpp"):
        Tokenizer.from_gguf(tiny_metadata(), reference="hf")
    with pytest.raises(TokenizerError, match="expected a GGUF path, file or metadata mapping, got int"):
        Tokenizer.from_gguf(42)


def test_file_named_in_errors(tmp_path):
    gguf = need_import("gguf")
    path = tmp_path / "no-merges.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(BYTES)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(TokenizerError) as caught:
        Tokenizer.from_gguf(path)
    assert "no-merges.gguf" in str(caught.value) and caught.value.field == "tokenizer.ggml.merges"


def test_a_chat_template_the_engine_cannot_render_names_the_file(tmp_path):
    # found by the GGUF fuzzer: the error came at apply_chat_template, naming no file (then the
    # engine refused the template; now jinja2 renders it, in a sandbox that stops its output)
    gguf = need_import("gguf")
    path = tmp_path / "odd-template.gguf"
    metadata = tiny_metadata()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(metadata["tokenizer.ggml.tokens"])
    writer.add_token_types([int(t) for t in metadata["tokenizer.ggml.token_type"]])
    writer.add_token_merges(metadata["tokenizer.ggml.merges"])
    writer.add_chat_template("{{ messages[0]['content'] * 1000000 }}")
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file, writer.close):
        step()
    tok = Tokenizer.from_gguf(path)
    with pytest.raises(TokenizerError, match="the chat template was stopped: the result would be longer than") as caught:
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert str(path) in str(caught.value) and caught.value.field == "tokenizer.chat_template"
    assert Tokenizer.from_gguf(tiny_metadata()).chat_template_origin == {"file": None,
                                                                         "field": "tokenizer.chat_template"}
