"""Bad tokenizer files and bad inputs give engine errors that say what and where."""
import copy
import json

import pytest

from engine.errors import EngineError, InputError, TokenizerError
from engine.text import Tokenizer

TINY = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": i, "content": content, "special": True, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False} for i, content in enumerate(["[UNK]", "[CLS]", "[SEP]"])],
    "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                   "strip_accents": None, "lowercase": True},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}},
                                  {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                       "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                       "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [1], "tokens": ["[CLS]"]},
                                          "[SEP]": {"id": "[SEP]", "ids": [2], "tokens": ["[SEP]"]}}},
    "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100,
              "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "world": 4, "##s": 5, "!": 6}},
}


def variant(change) -> str:
    config = copy.deepcopy(TINY)
    change(config)
    return json.dumps(config)


def refused(json_text: str, *fragments: str) -> TokenizerError:
    with pytest.raises(TokenizerError) as caught:
        Tokenizer.from_str(json_text, file="models/tiny/tokenizer.json")
    message = str(caught.value)
    assert "models/tiny/tokenizer.json" in message, message
    for fragment in fragments:
        assert fragment in message, message
    return caught.value


def test_tiny_tokenizer_works():
    tok = Tokenizer.from_str(json.dumps(TINY))
    assert tok.encode("Hello worlds!").tokens == ["[CLS]", "hello", "world", "##s", "!", "[SEP]"]
    assert tok.encode("hello?").ids == [1, 3, 0, 2]
    assert tok.decode([1, 3, 4, 5, 6, 2]) == "hello worlds!"


def test_errors_are_engine_errors():
    assert issubclass(TokenizerError, InputError) and issubclass(TokenizerError, EngineError)


def test_not_json():
    error = refused('{"model": {"type": "WordPiece",', "not valid JSON", "line 1")
    assert error.file == "models/tiny/tokenizer.json"
    refused("[1, 2]", "expected a JSON object")


def test_missing_or_null_model():
    refused(variant(lambda c: c.pop("model")), "missing field", "'model'")
    refused(variant(lambda c: c.update(model=None)), "needs a model", "'model'")


@pytest.mark.parametrize("section, path", [("normalizer", "normalizer.type"), ("pre_tokenizer", "pre_tokenizer.type"),
                                           ("post_processor", "post_processor.type"), ("decoder", "decoder.type"),
                                           ("model", "model.type")])
def test_unknown_component_type(section, path):
    error = refused(variant(lambda c: c[section].update(type="Frobnicate")),
                    f"unknown {section} type 'Frobnicate'", f"'{path}'", "this engine implements")
    assert error.field == path


def test_unknown_type_inside_a_sequence():
    def change(c):
        c["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Precompiled"}]}
    refused(variant(change), "unknown normalizer type 'Precompiled'", "'normalizer.normalizers[1].type'")


def test_missing_type():
    refused(variant(lambda c: c["decoder"].pop("type")), "missing field", "'decoder.type'")


@pytest.mark.parametrize("change, fragments", [
    (lambda c: c["model"].update(vocab=["[UNK]", "hello"]), ("expected an object, got a list", "'model.vocab'")),
    (lambda c: c["model"]["vocab"].update(bad="3"), ("'bad' must be a non-negative integer", "'model.vocab'")),
    (lambda c: c["model"].update(max_input_chars_per_word="100"), ("expected an integer", "max_input_chars_per_word")),
    (lambda c: c["normalizer"].update(lowercase="yes"), ("expected true or false", "'normalizer.lowercase'")),
    (lambda c: c["added_tokens"][0].pop("content"), ("missing field", "'added_tokens[0].content'")),
    (lambda c: c.update(added_tokens=[3]), ("expected an object", "'added_tokens[0]'")),
    (lambda c: c.update(truncation={"max_length": 8, "strategy": "Sideways"}), ("'Sideways'", "'truncation.strategy'")),
    (lambda c: c.update(truncation={"max_length": -1}), ("must not be negative", "'truncation.max_length'")),
    (lambda c: c.update(padding={"strategy": {"Fixed": "8"}}), ("BatchLongest", "'padding.strategy'")),
    (lambda c: c["post_processor"]["single"].append({"SpecialToken": {"id": "[MASK]", "type_id": 0}}),
     ("'[MASK]' is not listed", "'post_processor.single[3].SpecialToken.id'")),
    (lambda c: c["post_processor"]["single"].append({"Sequence": {"id": "B", "type_id": 1}}),
     ("sequence 'B' in the single template", "'post_processor.single[3].Sequence.id'")),
    (lambda c: c["post_processor"]["single"].append({"Oops": {}}), ("SpecialToken", "'post_processor.single[3]'")),
    (lambda c: c["post_processor"]["special_tokens"]["[CLS]"].update(ids=[1, 2]),
     ("2 ids but 1 tokens", "'post_processor.special_tokens.[CLS].ids'")),
])
def test_malformed_fields(change, fragments):
    refused(variant(change), *fragments)


def test_missing_unk_token_is_reported_when_needed():
    tok = Tokenizer.from_str(variant(lambda c: c["model"].update(unk_token="<unk>")), file="tiny.json")
    assert tok.encode("hello").ids == [1, 3, 2]
    with pytest.raises(TokenizerError, match=r"unk_token '<unk>'.*tiny\.json.*'model\.unk_token'"):
        tok.encode("goodbye")


def test_unreadable_files(tmp_path):
    with pytest.raises(TokenizerError, match=r"cannot read.*nowhere\.json"):
        Tokenizer.from_file(tmp_path / "nowhere.json")
    with pytest.raises(TokenizerError, match=r"not UTF-8.*latin\.json"):
        Tokenizer.from_buffer(b'{"model": "caf\xe9"}', file="latin.json")
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(TINY))
    assert Tokenizer.from_file(path).encode("hello").ids == [1, 3, 2]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_str(json.dumps(TINY))


@pytest.mark.parametrize("call, fragments", [
    (lambda t: t.encode(123), ("the text must be a str, got int",)),
    (lambda t: t.encode(b"bytes"), ("got bytes",)),
    (lambda t: t.encode("a", pair=["b"]), ("the pair text must be a str, got list",)),
    (lambda t: t.encode_batch(["fine", None, "fine"]), ("text 1 must be a str, got NoneType",)),
    (lambda t: t.encode_batch(["fine", ("a", 2)]), ("text 1 (second of its pair) must be a str, got int",)),
    (lambda t: t.encode_batch("one string"), ("expected a list of texts, got one str",)),
    (lambda t: t.encode_batch(7), ("expected a list of texts, got int",)),
    (lambda t: t.encode_batch([]), ("empty batch",)),
    (lambda t: t.encode_batch_arrays([]), ("empty batch",)),
    (lambda t: t.encode_batch_arrays(["ok", 3.5]), ("text 1 must be a str, got float",)),
    (lambda t: t.encode_batch_arrays(["ok"], max_length=1), ("no room for the 2 special tokens",)),
    (lambda t: t.encode_batch_arrays(["ok"], max_length=-3), ("max_length must be a non-negative int",)),
    (lambda t: t.enable_truncation(8, strategy="middle"), ("truncation strategy must be one of",)),
    (lambda t: t.enable_padding(direction="up"), ("padding direction",)),
    (lambda t: t.decode([1, "2"]), ("id 1 must be an int, got str",)),
])
def test_bad_inputs(tok, call, fragments):
    with pytest.raises(InputError) as caught:
        call(tok)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_empty_and_blank_texts_are_valid(tok):
    for text in ("", " ", "\n\t\u3000"):
        assert tok.encode(text).tokens == ["[CLS]", "[SEP]"]
    arrays = tok.encode_batch_arrays(["", "hello world"])
    assert arrays["input_ids"].tolist() == [[1, 2, 0, 0], [1, 3, 4, 2]]
    assert arrays["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert arrays.truncated == [False, False]
