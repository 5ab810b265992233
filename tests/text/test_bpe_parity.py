"""Byte-level BPE (SmolLM2) against the references: transformers' tokenizer of the same GGUF, and
the `tokenizers` package on the tokenizer.json transformers converts it to. Ids, tokens, offsets,
word ids must be identical, decoding too; nothing expected is written down here but the few
facts the module docstrings state (each checked against a reference below)."""
import json
import random

import pytest

from engine.text import Tokenizer, models
from tests.helpers import need_import

CODE = '''def tokenize(text: str) -> list[int]:
\t"""Tabs, then spaces."""
\tif not text:
\t\treturn []
        for i, c in enumerate(text):   # eight spaces
            yield {"i": i, 'c': c} if c != '\\n' else None
\t\t\t
class A(B):\r\n    x = [1, 22, 333, 4444, 55555]  # CRLF
'''

CORPUS = [
    # English, punctuation, contractions (GPT-2's regex has 's 't 're 've 'm 'll 'd, case-sensitive)
    "Hello, world! This is a test.",
    "I can't believe it's not butter — don't you think? We're sure they've gone; I'm, you'll, he'd. IT'S DON'T",
    # code: tabs, indentation, CRLF
    CODE,
    "if (a && b) { c[i] = d->e; } else { return x ** 2 // 3 }\n\n\n    ",
    "SELECT * FROM t WHERE id IN (1,2,3);  -- comment\n<div class=\"x\">&amp;</div>",
    # languages
    "Le cœur a ses raisons que la raison ne connaît point. Où est l'hôtel ? Ça va, garçon !",
    "Größenwahn: Die Straße führt über die Brücke. ÄÖÜ äöü ß ẞ",
    "中文：你好，世界！北京欢迎你。繁體中文：臺灣、電腦。",
    "日本語：こんにちは世界！カタカナ、ひらがな、漢字。ｶﾀｶﾅ ＡＢＣ１２３",
    "العربية: مرحبا بالعالم! السلام عليكم. ٠١٢٣٤٥٦٧٨٩ مُحَمَّد",
    "Русский язык: Привет, мир! Ёлка, йод, ЪЬ. Українська: Ї ї Є є Ґ ґ",
    "Ελληνικά: Καλημέρα κόσμε! हिन्दी: नमस्ते दुनिया! 한국어: 안녕하세요 ภาษาไทย: สวัสดี",
    # emoji: skin tones, ZWJ sequences, flags, keycaps, variation selectors
    "I love it 😍🔥💯 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 🤷🏽‍♀️ ❤️ ☺︎ 1️⃣ 🥲🫠",
    "👩🏾‍💻👩🏾‍💻👩🏾‍💻 x🧑‍🤝‍🧑y",
    # whitespace runs: spaces, tabs, newlines, exotic spaces
    "   leading and trailing   ", "a  b   c    d\t\te\n\nf \n g", " ", "\n", "\t\t\t", "     ",
    "x\u00a0y\u3000z\u2028w\u2029v\u2003u\u202ft\u1680s\u0085r\x0b\x0cq",
    # numbers: runs, spaces before them, other numerals
    "3.14159 2,718 1e-10 0xFF 1_000_000 ½ ² ³ ① Ⅻ ٣ ๓ 〇 ⁴⁵ ₂₃",
    "In 2024, 1234567890 people; call +1 (555) 123-4567 at 10:30pm.  42  apples, 7\t8\n9",
    # special tokens in the text
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "a<|endoftext|>b <|im_end|> c<|im_start|><|im_start|>d",
    "<|im_start|x <|im_end |> <|endoftext|",
    "<repo_name>me/repo<file_sep>a.py<jupyter_code>print(1)<empty_output>",
    # controls, zero-width, private use, replacement character
    "zero\u200bwidth\u200djoiner\ufeffbom\u0000nul\x07bell\ufffdreplacement\u200c\u2060",
    "\ue000private\U000f0000use \U0001d400\U0001d7ff \U00020000\U0002a6d6",
    # empty
    "",
    # long words (the heap merge path)
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 3, "a" * 300, "ab" * 150 + " " * 200 + "!" * 100,
]

FIELDS = ("ids", "tokens", "offsets", "word_ids", "type_ids", "attention_mask", "special_tokens_mask",
          "sequence_ids")


def assert_same(ours, theirs, text) -> None:
    for field in FIELDS:
        assert getattr(ours, field) == getattr(theirs, field), f"{field} differ on {text!r}"


def random_texts(count: int, seed: int = 49152) -> list[str]:
    """Strings of what byte-level BPE splits on: letters, digits and other numbers, spaces of all
    kinds, punctuation, contractions, multi-byte characters, special tokens."""
    pieces = (list("abcXYZ019") + ["'s", "'T", "'ll", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "½", "٣", "²",
              "é", "ß", "中", "ｶ", "😀", "👍🏽", "\u200d", "\u0301", "!", "...", "<|im_end|>", "<|im_start", "Ġ", "Ċ",
              "\x00", "\x85", "\ufffd"])
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 25))) for _ in range(count)]


@pytest.fixture(scope="module")
def ours(smollm2_gguf):
    return Tokenizer.from_gguf(smollm2_gguf)


@pytest.fixture(scope="module")
def converted_json(smollm2_reference) -> str:
    """The tokenizer.json transformers converts the GGUF to."""
    return smollm2_reference.backend_tokenizer.to_str()


@pytest.fixture(scope="module")
def json_pair(converted_json, reference):
    """(ours, reference) built from that tokenizer.json."""
    ours = Tokenizer.from_str(converted_json, file="smollm2/tokenizer.json")
    return ours, reference.Tokenizer.from_str(converted_json)


# --- what transformers' conversion is -------------------------------------------------------------

def test_what_transformers_builds_for_smollm(converted_json):
    """The facts engine/text/gguf.py states about transformers' reading of `smollm`."""
    config = json.loads(converted_json)
    assert config["normalizer"] is None
    assert config["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                       "use_regex": True}
    assert config["decoder"]["type"] == "ByteLevel"
    assert config["post_processor"]["type"] == "TemplateProcessing"
    assert config["post_processor"]["single"] == [{"Sequence": {"id": "A", "type_id": 0}}]
    model = config["model"]
    assert model["type"] == "BPE" and len(model["vocab"]) == 49152 and len(model["merges"]) == 48900
    assert (model["unk_token"], model["byte_fallback"], model["ignore_merges"], model["dropout"]) == (None, False,
                                                                                                      False, None)
    added = config["added_tokens"]
    assert [t["id"] for t in added] == list(range(17)) and added[1]["content"] == "<|im_start|>"
    assert all(t["special"] and not t["normalized"] and not (t["lstrip"] or t["rstrip"] or t["single_word"])
               for t in added)


# --- ids and encodings ----------------------------------------------------------------------------------

def test_gguf_ids_equal_transformers(ours, smollm2_reference):
    backend = smollm2_reference.backend_tokenizer
    for text in CORPUS + random_texts(300):
        mine = ours.encode(text)
        assert mine.ids == smollm2_reference(text)["input_ids"], text
        assert_same(mine, backend.encode(text), text)


def test_tokenizer_json_equals_tokenizers(json_pair):
    ours, theirs = json_pair
    texts = CORPUS + random_texts(600, seed=7)
    for text in texts:
        assert_same(ours.encode(text), theirs.encode(text), text)
    for text, a, b in zip(texts, ours.encode_batch(texts[:40]), theirs.encode_batch(texts[:40])):
        assert_same(a, b, text)
    assert_same(ours.encode(CORPUS[0], CORPUS[5]), theirs.encode(CORPUS[0], CORPUS[5]), "a pair")


def test_gguf_and_json_paths_agree(ours, json_pair, smollm2_gguf, smollm2_metadata):
    import engine
    from_json, _ = json_pair
    assert ours.get_vocab() == from_json.get_vocab()
    assert ours.get_vocab_size() == from_json.get_vocab_size() == 49152
    with engine.load_gguf(smollm2_gguf) as opened:          # an opened GGUF, and its metadata, also do
        others = [Tokenizer.from_gguf(opened), Tokenizer.from_gguf(smollm2_metadata)]
    for text in CORPUS:
        ids = ours.encode(text).ids
        assert ids == from_json.encode(text).ids
        assert all(other.encode(text).ids == ids for other in others)


def test_vocabulary_and_special_tokens(ours, smollm2_reference):
    backend = smollm2_reference.backend_tokenizer
    assert ours.get_vocab() == backend.get_vocab()
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "Ġthe", "Ċ", "not-a-token"):
        assert ours.token_to_id(token) == backend.token_to_id(token)
    for i in (0, 1, 2, 16, 17, 198, 49151, 49152):
        assert ours.id_to_token(i) == backend.id_to_token(i)
    assert ours.special_tokens == {"bos_token": smollm2_reference.bos_token, "eos_token": smollm2_reference.eos_token,
                                   "unk_token": smollm2_reference.unk_token, "pad_token": smollm2_reference.pad_token}
    assert ours.chat_template == smollm2_reference.chat_template


def test_add_special_tokens_false_and_batches(ours, smollm2_reference):
    backend = smollm2_reference.backend_tokenizer
    for text in CORPUS[:6]:
        assert ours.encode(text, add_special_tokens=False).ids == backend.encode(text, add_special_tokens=False).ids
    arrays = ours.encode_batch_arrays(CORPUS[:4])           # padded with the GGUF's pad token, as transformers
    expected = smollm2_reference(CORPUS[:4], padding=True)
    assert arrays["input_ids"].tolist() == expected["input_ids"]
    assert arrays["attention_mask"].tolist() == expected["attention_mask"]


# --- decoding -------------------------------------------------------------------------------------------

def test_decode(ours, smollm2_reference):
    backend = smollm2_reference.backend_tokenizer
    for text in CORPUS:
        ids = ours.encode(text).ids
        assert ours.decode(ids, skip_special_tokens=False) == text         # byte-level BPE loses nothing
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == backend.decode(ids, skip_special_tokens=skip)
        assert ours.decode(ids, skip_special_tokens=False) == smollm2_reference.decode(ids)
    rng = random.Random(3)
    for _ in range(300):             # ids cut anywhere: incomplete and invalid UTF-8 become U+FFFD alike
        ids = [rng.randrange(0, 49160) for _ in range(rng.randrange(0, 12))]
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == backend.decode(ids, skip_special_tokens=skip), ids


def split_characters(tok) -> list[int]:
    """Ids of a text whose multi-byte characters are cut across tokens (checked, not assumed)."""
    text = "Emoji: 🫠🥲🦄🧑‍🤝‍🧑 👩🏾‍💻 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𒀀𒀁"
    encoding = tok.encode(text)
    partial = [i for i, (a, b) in enumerate(encoding.offsets)
               if i + 1 < len(encoding.offsets) and encoding.offsets[i + 1][0] < b]
    assert len(partial) >= 5, "the test text must cut characters across tokens"
    return encoding.ids


def test_stream_decoder_holds_back_incomplete_characters(ours):
    ids = split_characters(ours)
    assert any("\ufffd" in ours.decode([i]) for i in ids), "some token alone must be an incomplete character"
    stream, pieces = ours.decode_stream(), []
    for i in ids:
        pieces.append(stream.step(i))
        assert "\ufffd" not in pieces[-1]
    assert "" in pieces                                 # held back at least once
    assert "".join(pieces) + stream.flush() == ours.decode(ids)


@pytest.mark.parametrize("skip_special_tokens", [False, True])
def test_stream_decoder_equals_decode_stream(ours, smollm2_reference, skip_special_tokens):
    """Step by step what the reference's DecodeStream gives (its None is our "")."""
    from tokenizers.decoders import DecodeStream
    backend = smollm2_reference.backend_tokenizer
    rng = random.Random(11)
    id_lists = [ours.encode(text).ids for text in CORPUS] + [split_characters(ours)]
    id_lists += [[rng.randrange(0, 49152) for _ in range(rng.randrange(1, 20))] for _ in range(50)]
    for ids in id_lists:
        theirs, stream = DecodeStream(skip_special_tokens=skip_special_tokens), ours.decode_stream(skip_special_tokens)
        mine = [stream.step(i) for i in ids]
        assert mine == [theirs.step(backend, i) or "" for i in ids], ids
        assert "".join(mine) + stream.flush() == ours.decode(ids, skip_special_tokens)


def test_stream_decoder_flush_and_lists(ours):
    emoji = ours.encode("🫠").ids
    assert len(emoji) > 1
    stream = ours.decode_stream()
    assert stream.step(emoji[:-1]) == ""                # a list of ids at once, still incomplete
    assert stream.flush() == ours.decode(emoji[:-1]) and "\ufffd" in ours.decode(emoji[:-1])
    assert stream.step(ours.encode("ok").ids) == "ok"   # flush started afresh
    assert stream.flush() == ""
    import numpy as np
    ids = np.array(ours.encode("naïve 😀").ids)           # NumPy ids, as a generation loop has them
    assert stream.step(ids[:2]) + "".join(stream.step(i) for i in ids[2:]) == "naïve 😀"
    with pytest.raises(ValueError, match="id 0 must be an int, got str"):
        ours.decode_stream().step("7")


# --- llama.cpp's reading of `smollm` --------------------------------------------------------------------

# llama.cpp's regexes for `smollm` (src/llama-vocab.cpp), each applied to the pieces of the one before
LLAMA_CPP_SMOLLM = [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"]


def test_llama_cpp_reading_equals_a_digits_split(smollm2_gguf, converted_json, reference):
    """reference="llama.cpp": numbers split off first; the same as llama.cpp's two regexes, and as
    the Digits + ByteLevel tokenizer.json."""
    ours = Tokenizer.from_gguf(smollm2_gguf, reference="llama.cpp")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    digits_split = [{"type": "Digits", "individual_digits": True}, byte_level]
    regex_split = [{"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}
                   for regex in LLAMA_CPP_SMOLLM] + [dict(byte_level, use_regex=False)]
    for steps in (digits_split, regex_split):
        config = json.loads(converted_json)
        config["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": steps}
        theirs = reference.Tokenizer.from_str(json.dumps(config))
        for text in CORPUS + random_texts(300, seed=5):
            assert_same(ours.encode(text), theirs.encode(text), text)
    # where the two readings part (engine/text/gguf.py)
    transformers_reading = Tokenizer.from_gguf(smollm2_gguf)
    assert ours.encode("a  12").tokens == ["a", "ĠĠ", "1", "2"]
    assert transformers_reading.encode("a  12").tokens == ["a", "Ġ", "Ġ", "1", "2"]
    assert ours.encode(" ½").tokens == ["Ġ", "Â½"] and transformers_reading.encode(" ½").tokens == ["ĠÂ", "½"]
    assert ours.encode("In 2024, 3 cats").ids == transformers_reading.encode("In 2024, 3 cats").ids


# --- GGUF variants: flags and token types transformers reads --------------------------------------------

@pytest.fixture(scope="module")
def variant_gguf(smollm2_metadata, tmp_path_factory):
    """A GGUF with SmolLM2's tokenizer and no tensors, changed: add_bos/add_eos on, a USER_DEFINED
    token, a CONTROL token spelled outside the byte alphabet, and BOS a plain token."""
    gguf = need_import("gguf")
    path = tmp_path_factory.mktemp("variant") / "variant.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    tokens = list(smollm2_metadata["tokenizer.ggml.tokens"])
    types = [int(t) for t in smollm2_metadata["tokenizer.ggml.token_type"]]
    tokens += ["<think>", "<｜tool▁call｜>", "Ġ<tool>"]
    types += [4, 3, 4]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(smollm2_metadata["tokenizer.ggml.merges"])
    writer.add_bos_token_id(tokens.index("Hello"))
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_flags_and_token_types(variant_gguf, transformers_module):
    from tests.text.conftest import transformers_gguf_tokenizer
    theirs = transformers_gguf_tokenizer(transformers_module, variant_gguf)
    ours = Tokenizer.from_gguf(variant_gguf)
    backend = theirs.backend_tokenizer
    texts = ["Hello <think> there", "x<｜tool▁call｜>y Ġ<tool> z", "Hello", "", "a<|im_end|>b"] + CORPUS[:8]
    for text in texts:
        assert ours.encode(text).ids == theirs(text)["input_ids"], text
        assert_same(ours.encode(text), backend.encode(text), text)
        assert_same(ours.encode(text, "and a pair"), backend.encode(text, "and a pair"), text)
        ids = ours.encode(text).ids
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == backend.decode(ids, skip_special_tokens=skip)
    assert ours.get_vocab() == backend.get_vocab()
    assert ours.num_special_tokens_to_add(False) == backend.num_special_tokens_to_add(False) == 2


# --- the components on other settings, against `tokenizers` ---------------------------------------------

def small_bpe(**model) -> dict:
    """A tokenizer.json with a small BPE over plain characters (to try the model's options)."""
    vocab = {c: i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
    merges = [("a", "b"), ("ab", "c"), ("c", "d"), ("e", "f"), ("ef", "g"), ("abc", "d"), ("x", "x"), ("xx", "x")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    config = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": vocab, "merges": [" ".join(m) for m in merges]}
    config.update(model)
    return {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None, "model": config}


def with_prefix_and_suffix() -> dict:
    config = small_bpe()
    vocab = {"a": 0, "##b": 1, "##c": 2, "##d</w>": 3, "a##b": 4, "ab": 5, "abc": 6, "b": 7, "c</w>": 8,
             "##c</w>": 9, "abc</w>": 10, "[UNK]": 11}
    config["model"].update(vocab=vocab, merges=["a ##b", "ab ##c</w>", "ab ##c"], continuing_subword_prefix="##",
                           end_of_word_suffix="</w>", unk_token="[UNK]")
    return config


def with_byte_fallback() -> dict:
    config = small_bpe(unk_token="<unk>", byte_fallback=True)
    vocab = config["model"]["vocab"]
    for token in ["<unk>"] + [f"<0x{b:02X}>" for b in "é".encode()]:
        vocab[token] = len(vocab)
    return config


def with_a_merge_listed_twice() -> dict:
    config = small_bpe()
    config["model"]["vocab"]["bc"] = len(config["model"]["vocab"])
    config["model"]["merges"] = ["c d", "a b", "b c", "ab c", "c d"]       # "c d" ranks 4, not 0
    return config


@pytest.mark.parametrize("config", [
    small_bpe(),
    small_bpe(unk_token="z"),
    small_bpe(unk_token="z", fuse_unk=True),
    small_bpe(ignore_merges=True),
    with_prefix_and_suffix(),
    with_byte_fallback(),
    with_a_merge_listed_twice(),
], ids=["plain", "unk", "fuse_unk", "ignore_merges", "prefix_suffix", "byte_fallback", "merge_twice"])
def test_bpe_options(config, reference):
    text = json.dumps(config)
    ours, theirs = Tokenizer.from_str(text), reference.Tokenizer.from_str(text)
    for words in ["abcd abcdx ab abc c d bcd abcdcd", "xxxxxxx xx x", "ABC a1b2c3 ééa aéb", "efg fg abcdefg", "abcabcabcabc",
                  "aébé 12 ab3c", "a" * 40 + "b" * 40 + "cd" * 20, ""]:
        mine, ref = ours.encode(words), theirs.encode(words)
        assert (mine.ids, mine.tokens) == (ref.ids, ref.tokens), words
        if "é" not in words:        # byte-fallback tokens inside a character: offsets not compared
            assert mine.offsets == ref.offsets, words


PRE_TOKENIZER_TEXTS = ["Hello world!  How're you?\n\n  Fine,   thanks 123 4567.", " leading", "trailing  ",
                       "a<|im_end|>b <|im_end|>  c", "x1y22z333 ½½ ٣٤٥", "日本語 テキスト 😀😀 é", "", "   "]


@pytest.mark.parametrize("pre_tokenizer", [
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
    {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                                               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
] + [pytest.param({"type": "Sequence", "pretokenizers": [        # the Split sweep: ~40 s in all
        {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        marks=pytest.mark.slow)
     for pattern in ({"String": " "}, {"Regex": r"\p{N}+|\s"}, {"Regex": r"\p{N}"}, {"Regex": r"(?<w>[a-z]+)\x{2d}?"})
     for behavior in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")
     for invert in (False, True)])
def test_pre_tokenizers(converted_json, reference, pre_tokenizer):
    config = json.loads(converted_json)
    config["pre_tokenizer"] = pre_tokenizer
    text = json.dumps(config)
    ours, theirs = Tokenizer.from_str(text), reference.Tokenizer.from_str(text)
    for sample in PRE_TOKENIZER_TEXTS + CORPUS[2:4] + random_texts(30, seed=13):
        assert_same(ours.encode(sample), theirs.encode(sample), sample)


def test_long_and_short_merge_paths_agree(json_pair, monkeypatch):
    """Words longer than models.LONG_WORD merge through a heap; both paths give the reference's ids."""
    ours, theirs = json_pair
    rng = random.Random(17)
    alphabet = "abcdefghij éèü中😀" + "Ġ" * 3
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(2, 60))) for _ in range(300)]
    expected = [theirs.encode(w).ids for w in words]
    for threshold in (0, 10 ** 9):
        monkeypatch.setattr(models, "LONG_WORD", threshold)
        ours.model.cache.clear()
        assert [ours.encode(w).ids for w in words] == expected
    ours.model.cache.clear()


def test_encode_speed(ours, capsys):
    """Tokens per second on ~10 KB of English and code, first with the word cache empty (reported,
    not asserted: a shared machine's timings vary)."""
    import pathlib
    import time
    root = pathlib.Path(__file__).resolve().parents[2]
    text = ((root / "engine" / "text" / "tokenizer.py").read_text()[:5000]
            + (root / "engine" / "text" / "models.py").read_text()[:5000])
    ours.model.cache.clear()
    start = time.perf_counter()
    n = len(ours.encode(text).ids)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    ours.encode(text)
    warm = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n  BPE encode, {len(text.encode())} bytes -> {n} tokens: {n / cold:,.0f} tokens/s with an empty "
              f"cache, {n / warm:,.0f} tokens/s warm")
    assert n > 1000


@pytest.mark.parametrize("trim_offsets", [True, False])
@pytest.mark.parametrize("add_prefix_space", [True, False])
def test_byte_level_post_processor(converted_json, reference, trim_offsets, add_prefix_space):
    """GPT-2's tokenizer.json form: ByteLevel as pre-tokenizer and post-processor (offset trimming)."""
    config = json.loads(converted_json)
    byte_level = {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
                  "use_regex": True}
    config.update(pre_tokenizer=byte_level, post_processor=byte_level)
    text = json.dumps(config)
    ours, theirs = Tokenizer.from_str(text), reference.Tokenizer.from_str(text)
    for sample in PRE_TOKENIZER_TEXTS + CORPUS[:24] + random_texts(100, seed=23):
        assert_same(ours.encode(sample), theirs.encode(sample), sample)
        assert_same(ours.encode(sample, " a  pair "), theirs.encode(sample, " a  pair "), sample)
    ours.enable_truncation(8, stride=2)
    theirs.enable_truncation(8, stride=2)
    for sample in CORPUS[:4]:
        mine, ref = ours.encode(sample), theirs.encode(sample)
        assert_same(mine, ref, sample)
        assert [o.offsets for o in mine.overflowing] == [o.offsets for o in ref.overflowing]
