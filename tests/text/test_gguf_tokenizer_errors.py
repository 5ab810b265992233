"""GGUF tokenizers the engine refuses: another kind of vocabulary, a pre-tokenizer nobody knows,
a SentencePiece vocabulary without scores or with broken byte tokens, absurd sizes. Each is a
TokenizerError naming the file and the metadata key, never another exception (the byte-level
cases are in test_bpe_errors.py); and mutated SentencePiece metadata gives a tokenizer that
works or such an error."""
import random

import numpy as np
import pytest

from engine.errors import TokenizerError
from engine.text import Tokenizer, gguf
from tests.helpers import need_import
from tests.llama_gguf import changed
from tests.text.gguf_files import BYTE, BYTE_TOKENS, CONTROL, NORMAL, sentencepiece_vocabulary, write_gguf


def sentencepiece_fields(**changes) -> dict:
    tokens, scores, types = sentencepiece_vocabulary(merges=60)
    return {"tokenizer_model": "llama", "token_list": tokens, "token_scores": scores, "token_types": types,
            "bos_token_id": 1, "eos_token_id": 2, "unk_token_id": 0, **changes}


def byte_level_fields(**changes) -> dict:
    from engine.text.pre_tokenizers import BYTE_CHARS
    tokens = list(BYTE_CHARS.values()) + ["ab", "<|end|>"]
    return {"tokenizer_model": "gpt2", "tokenizer_pre": "qwen2", "token_list": tokens, "token_merges": ["a b"],
            "token_types": [NORMAL] * 257 + [CONTROL], **changes}


def with_token(i: int, token: str, kind: int | None = None):
    def change(fields):
        fields["token_list"] = list(fields["token_list"])
        fields["token_list"][i] = token
        if kind is not None:
            fields["token_types"] = list(fields["token_types"])
            fields["token_types"][i] = kind
    return change


def without(key: str):
    return lambda fields: fields.pop(key)


def setting(key: str, value):
    return lambda fields: fields.__setitem__(key, value)


def byte_types_cut(count: int):
    """Only the first `count` byte tokens typed BYTE: the others are plain tokens."""
    def change(fields):
        fields["token_types"] = [NORMAL if kind == BYTE and fields["token_list"][i] in BYTE_TOKENS[count:] else kind
                                 for i, kind in enumerate(fields["token_types"])]
    return change


@pytest.mark.parametrize("fields, change, fragments, key", [
    (byte_level_fields, setting("tokenizer_model", "bert"), ("tokenizer model 'bert' is not implemented",),
     "tokenizer.ggml.model"),
    (sentencepiece_fields, setting("tokenizer_model", "t5"), ("tokenizer model 't5' is not implemented",),
     "tokenizer.ggml.model"),
    (sentencepiece_fields, setting("tokenizer_model", "rwkv"), ("'rwkv' is not implemented",), "tokenizer.ggml.model"),
    (byte_level_fields, setting("tokenizer_pre", "qwen-9"), ("unknown pre-tokenizer 'qwen-9'",), "tokenizer.ggml.pre"),
    (sentencepiece_fields, without("token_scores"), ("missing metadata key",), "tokenizer.ggml.scores"),
    (sentencepiece_fields, lambda f: f.update(token_scores=f["token_scores"][:-1]), ("entries for",),
     "tokenizer.ggml.scores"),
    (sentencepiece_fields, lambda f: f["token_scores"].__setitem__(300, float("nan")),
     ("expected a finite number, got nan",), "tokenizer.ggml.scores[300]"),
    (sentencepiece_fields, with_token(40, "<0xZZ>"), ('a BYTE token must be "<0xNN>"', "'<0xZZ>'"),
     "tokenizer.ggml.tokens[40]"),
    (sentencepiece_fields, with_token(40, "<0x0a>"), ("two upper-case hexadecimal digits",), "tokenizer.ggml.tokens[40]"),
    (sentencepiece_fields, with_token(41, "<0x20>"), ("byte token <0x20> is listed twice (ids 35 and 41)",),
     "tokenizer.ggml.tokens[41]"),
    (sentencepiece_fields, byte_types_cut(200), ("56 are missing (<0xC8> first)",), "tokenizer.ggml.token_type"),
    (sentencepiece_fields, lambda f: f.update(token_merges=["▁ ▁", "x yz"]), ("'yz' is not in the vocabulary",),
     "tokenizer.ggml.merges[1]"),
    (sentencepiece_fields, with_token(300, "a" * 70_000), ("a token of 70,000 characters",), "tokenizer.ggml.tokens[300]"),
    (sentencepiece_fields, setting("add_eos_token", True), (), None),        # fine: an eos id is given
    (sentencepiece_fields, lambda f: (f.pop("eos_token_id"), f.update(add_eos_token=True)),
     ("asks for a eos_token but the file gives no eos_token id",), "tokenizer.ggml.add_eos_token"),
])
def test_refused_files_name_the_file_and_key(tmp_path, fields, change, fragments, key):
    need_import("gguf", "the test writes GGUF files with gguf-py")
    values = fields()
    change(values)
    path = tmp_path / "refused.gguf"
    write_gguf(path, "llama", **values)
    if key is None:
        Tokenizer.from_gguf(path)
        return
    with pytest.raises(TokenizerError) as caught:
        Tokenizer.from_gguf(path)
    message = str(caught.value)
    assert str(path) in message and caught.value.field == key, message
    for fragment in fragments:
        assert fragment in message, message


def metadata(**changes) -> dict:
    tokens, scores, types = sentencepiece_vocabulary(merges=60)
    return {"general.architecture": "llama", "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": np.array(scores, np.float32), "tokenizer.ggml.token_type": np.array(types, np.int32),
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, **changes}


@pytest.mark.parametrize("changes, fragment, key", [
    ({"general.architecture": KeyError}, "missing metadata key", "general.architecture"),
    ({"general.architecture": 3}, "expected a string, got int", "general.architecture"),
    ({"tokenizer.ggml.scores": "high"}, "expected an array of numbers, got str", "tokenizer.ggml.scores"),
    ({"tokenizer.ggml.scores": [1.0, "x"]}, "expected a number, got str", "tokenizer.ggml.scores[1]"),
    ({"tokenizer.ggml.scores": [True] * 3}, "expected a number, got bool", "tokenizer.ggml.scores[0]"),
    ({"tokenizer.ggml.scores": [float("inf")]}, "expected a finite number, got inf", "tokenizer.ggml.scores[0]"),
    ({"tokenizer.ggml.tokens": ["a", None]}, "expected a string, got NoneType", "tokenizer.ggml.tokens[1]"),
    ({"tokenizer.ggml.token_type": np.array([1.5] * 10)}, "expected an integer, got float",
     "tokenizer.ggml.token_type[0]"),
    ({"tokenizer.ggml.token_type": [1, 2 ** 70]}, "out of range", "tokenizer.ggml.token_type[1]"),
])
def test_malformed_sentencepiece_metadata(changes, fragment, key):
    with pytest.raises(TokenizerError) as caught:
        Tokenizer.from_gguf(changed(metadata(), changes, delete=KeyError))
    assert fragment in str(caught.value) and caught.value.field == key, str(caught.value)


def test_absurd_sizes(monkeypatch):
    """More tokens or merges than any real vocabulary (the limits lowered here to try them)."""
    monkeypatch.setattr(gguf, "MAX_TOKENS", 300)
    with pytest.raises(TokenizerError, match="entries; this engine reads at most 300") as caught:
        Tokenizer.from_gguf(metadata())
    assert caught.value.field == "tokenizer.ggml.tokens"
    monkeypatch.undo()
    monkeypatch.setattr(gguf, "MAX_MERGES", 1)
    with pytest.raises(TokenizerError, match="at most 1") as caught:
        Tokenizer.from_gguf(metadata(**{"tokenizer.ggml.merges": ["▁ ▁", "▁▁ ▁▁"]}))
    assert caught.value.field == "tokenizer.ggml.merges"


def test_what_only_transformers_reads(tmp_path):
    """reference="llama.cpp" is refused where its reading is not implemented, naming the key."""
    need_import("gguf", "the test writes GGUF files with gguf-py")
    with pytest.raises(TokenizerError, match="not implemented for SentencePiece") as caught:
        Tokenizer.from_gguf(metadata(), reference="llama.cpp")
    assert caught.value.field == "tokenizer.ggml.model"
    fields = byte_level_fields(tokenizer_pre="tekken")
    write_gguf(tmp_path / "tekken.gguf", "llama", **fields)
    Tokenizer.from_gguf(tmp_path / "tekken.gguf")
    with pytest.raises(TokenizerError, match="pre-tokenizer 'tekken' as llama.cpp reads it is not implemented") as caught:
        Tokenizer.from_gguf(tmp_path / "tekken.gguf", reference="llama.cpp")
    assert caught.value.field == "tokenizer.ggml.pre" and "tekken.gguf" in str(caught.value)


def test_tokenizer_json_metaspace_contradiction():
    """The reference refuses add_prefix_space: false beside any prepend_scheme but "never"."""
    import json
    config = {"version": "1.0", "added_tokens": [], "normalizer": None, "post_processor": None, "decoder": None,
              "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": False},
              "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}
    with pytest.raises(TokenizerError, match="add_prefix_space: false contradicts prepend_scheme") as caught:
        Tokenizer.from_str(json.dumps(config), file="t.json")
    assert caught.value.field == "pre_tokenizer.add_prefix_space"


def _mutated(rng: random.Random) -> dict:
    values = metadata(**{"general.architecture": rng.choice(["llama", "gemma3", "phi3", "mistral"])})
    for _ in range(rng.randrange(1, 3)):
        key = rng.choice(list(values))
        value = values[key]
        roll = rng.random()
        if roll < 0.1:
            del values[key]
        elif isinstance(value, (list, np.ndarray)) and len(value) and roll < 0.8:
            items = list(value)
            i = rng.randrange(len(items))
            items[i] = rng.choice([items[(i + 1) % len(items)], "", "<0x41>", "\x00", "▁" * 40, -1, 7, 2 ** 70,
                                   float("nan"), None, b"\xff", "  ", "<0xFF>", "<bos>"])
            values[key] = items if rng.random() < 0.5 else items[:rng.randrange(len(items))]
        else:
            values[key] = rng.choice([None, "", "llama", "gemma4", 0, -5, 10 ** 9, True, [], ["x"], 1.5])
    return values


def test_mutated_sentencepiece_metadata_gives_tokenizers_or_tokenizer_errors():
    """A tokenizer that works (encodes, decodes, streams) or a TokenizerError, nothing else."""
    rng = random.Random(2026)
    built = refused = 0
    for case in range(300):
        values = _mutated(rng)
        try:
            tok = Tokenizer.from_gguf(values)
        except TokenizerError:
            refused += 1
            continue
        built += 1
        try:
            ids = tok.encode("Hello wörld 😀 <s> \x00 ▁▁").ids
            tok.decode(ids, False)
            stream = tok.decode_stream()
            "".join(stream.step(i) for i in ids) + stream.flush()
        except TokenizerError:
            pass
    assert built > 20 and refused > 20, (built, refused)
