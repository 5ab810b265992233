"""Byte-level BPE GGUFs and the pre-tokenizer `tokenizer.ggml.pre` names: a small vocabulary
(SmolLM2's first tokens and the merges among them) written with each name transformers gives a
split of its own (the Llama 3, Tekken, Qwen 2, Qwen 3.5 and GPT-4o regexes), a name only
llama.cpp knows and none, each against transformers loading the same file; the table of names
against transformers' own; llama.cpp's readings against `tokenizers` running its regexes."""
import json

import pytest

from engine.text import Tokenizer, gguf_pre
from tests.text.corpus import corpus
from tests.helpers import need_import
from tests.text.gguf_files import byte_level_subset, write_gguf

TEXTS = corpus()
FIELDS = ("ids", "tokens", "offsets", "word_ids", "type_ids", "attention_mask", "special_tokens_mask")
# one name for each split transformers distinguishes, one it leaves GPT-2's, and none at all
NAMES = ["llama-bpe", "tekken", "deepseek-r1-qwen", "qwen35", "llama4", "deepseek-llm", None]


@pytest.fixture(scope="module")
def subset(smollm2_metadata):
    return byte_level_subset(smollm2_metadata, 6000)


@pytest.fixture(scope="module", params=NAMES, ids=lambda name: str(name))
def pair(request, subset, tmp_path_factory, transformers_module):
    """(ours, transformers') for the small vocabulary written with `pre` = the name."""
    from tests.text.conftest import transformers_gguf_tokenizer
    tokens, types, merges = subset
    path = tmp_path_factory.mktemp("splits") / f"{request.param}.gguf"
    fields = {"tokenizer_model": "gpt2", "token_list": tokens, "token_types": types, "token_merges": merges,
              "eos_token_id": 0, "bos_token_id": 1}
    if request.param is not None:
        fields["tokenizer_pre"] = request.param
    write_gguf(path, "llama", **fields)
    return Tokenizer.from_gguf(path), transformers_gguf_tokenizer(transformers_module, path)


def test_encodings_equal_transformers(pair):
    ours, theirs = pair
    backend = theirs.backend_tokenizer
    rows = []
    for text in TEXTS:
        mine = ours.encode(text)
        if mine.ids != theirs(text)["input_ids"]:
            rows.append((text, "ids", mine.ids))
        expected = backend.encode(text)
        wrong = [field for field in FIELDS if getattr(mine, field) != getattr(expected, field)]
        if wrong:
            rows.append((text, wrong, getattr(mine, wrong[0])))
        if ours.decode(mine.ids, False) != theirs.decode(mine.ids):
            rows.append((text, "decoded", ours.decode(mine.ids, False)))
    assert not rows, f"{len(rows)} differences:\n" + "\n".join(f"  {t!r:.100}: {what}: {got!r:.150}"
                                                             for t, what, got in rows[:12])


def test_the_names_and_splits_are_transformers(transformers_module):
    """gguf_pre.TRANSFORMERS_SPLITS is transformers' own table, name for name and regex for regex."""
    mapping = need_import("transformers.integrations.gguf.gguf_tokenizer_mapping", "transformers' GGUF table")
    assert gguf_pre.TRANSFORMERS_SPLITS == mapping.GGUF_PRE_TOKENIZER_SPLITS
    assert set(gguf_pre.TRANSFORMERS_SPLITS) <= gguf_pre.LLAMA_CPP_NAMES


# llama.cpp's regexes (src/llama-vocab.cpp) for the families whose reading this engine implements
LLAMA_CPP_REGEXES = {
    "llama-bpe": "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
                 "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "qwen2": "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
             "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "qwen35": "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
              "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
}


@pytest.mark.parametrize("name", list(LLAMA_CPP_REGEXES))
def test_llama_cpp_readings(name, subset, reference):
    """reference="llama.cpp": its regex (contractions in ASCII only), and for the Llama 3 family a
    word that is a token stays whole (ignore_merges), as `tokenizers` runs them."""
    tokens, _, merges = subset              # no token types: no added tokens on either side
    metadata = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": name, "tokenizer.ggml.tokens": tokens,
                "tokenizer.ggml.merges": merges}
    ours = Tokenizer.from_gguf(metadata, reference="llama.cpp")
    config = json.loads(_tokenizer_json(tokens, merges))
    config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA_CPP_REGEXES[name]}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    config["model"]["ignore_merges"] = name == "llama-bpe"
    theirs = reference.Tokenizer.from_str(json.dumps(config))
    for text in TEXTS:
        assert ours.encode(text).ids == theirs.encode(text).ids, text
    # where the readings part: contractions outside ASCII; a word that is a token no merge makes
    transformers_reading = Tokenizer.from_gguf(metadata)
    words = [[w for w, _ in tok.pre_tokenizer.pre_tokenize([("it'ſt", 0)])] for tok in (ours, transformers_reading)]
    assert words == [["it", "'Å¿t"], ["it", "'Å¿", "t"]]
    metadata["tokenizer.ggml.tokens"] = tokens + ["Ġxqzj"]
    ours, transformers_reading = Tokenizer.from_gguf(metadata, reference="llama.cpp"), Tokenizer.from_gguf(metadata)
    assert (len(ours.encode(" xqzj").ids) == 1) == (name == "llama-bpe")
    assert len(transformers_reading.encode(" xqzj").ids) > 1
    # and where the file does not say, the Llama 3 family adds BOS for llama.cpp
    metadata["tokenizer.ggml.bos_token_id"] = 5
    ours, transformers_reading = Tokenizer.from_gguf(metadata, reference="llama.cpp"), Tokenizer.from_gguf(metadata)
    assert (ours.encode("x").ids[0] == 5) == (name == "llama-bpe") and transformers_reading.encode("x").ids[0] != 5


def _tokenizer_json(tokens: list[str], merges: list[str]) -> str:
    from engine.text.pre_tokenizers import BYTE_CHARS
    alphabet = set(BYTE_CHARS.values())
    vocab = {}
    for i, token in enumerate(tokens):
        vocab[token if set(token) <= alphabet else "".join(BYTE_CHARS[b] for b in token.encode())] = i
    return json.dumps({"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
                       "post_processor": None, "decoder": None,
                       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                                 "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                                 "ignore_merges": False, "vocab": vocab, "merges": merges}})
