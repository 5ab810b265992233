"""SentencePiece vocabularies in GGUFs (tokenizer.ggml.model "llama": Llama 2, Mistral, Phi-3,
Gemma; "gemma4"), in small files written here, against transformers loading the same file: the
pipelines of each architecture, merges implied by scores (ties, scores in no order, a token
listed twice), byte fallback with and without byte tokens, add_bos/add_eos, control and
user-defined tokens. Then the components they are made of, on other settings, against
`tokenizers` through tokenizer.json. Nothing expected is written here but what the module
docstrings state and what a reference answers at test time."""
import json
import random

import pytest

from engine.text import Tokenizer
from tests.text.corpus import FIELDS, corpus, encoding_mismatches, failures, id_mismatches
from tests.text.gguf_files import (BYTE_TOKENS, CONTROL, NORMAL, USER_DEFINED, sentencepiece_vocabulary,
                                   write_gguf)

TEXTS = corpus()
SPECIALS = {"bos_token_id": 1, "eos_token_id": 2, "unk_token_id": 0}
# Gemma's first tokens and their types; GemmaTokenizer adds <pad> <eos> <bos> <unk> <mask> as
# new special tokens when the vocabulary lacks them, as every Gemma vocabulary has them
GEMMA_HEAD = (("<pad>", CONTROL), ("<eos>", CONTROL), ("<bos>", CONTROL), ("<unk>", CONTROL), ("<mask>", CONTROL),
              ("[multimodal]", USER_DEFINED), ("<unused0>", CONTROL), ("<unused1>", CONTROL), ("\n", USER_DEFINED),
              ("\n\n", USER_DEFINED), ("  ", USER_DEFINED), ("   ", USER_DEFINED), ("\t", USER_DEFINED),
              ("<start_of_turn>", CONTROL), ("<end_of_turn>", CONTROL))
GEMMA_SPECIALS = {"bos_token_id": 2, "eos_token_id": 1, "unk_token_id": 3, "pad_token_id": 0}


def llama_file(**changes) -> dict:
    tokens, scores, types = sentencepiece_vocabulary()
    return {"architecture": "llama", "tokenizer_model": "llama", "token_list": tokens, "token_scores": scores,
            "token_types": types, **SPECIALS, **changes}


def with_scores(order) -> dict:
    """A Llama file whose learned pieces (after the 3 control and 256 byte tokens) get other
    scores: order(n), n of them."""
    fields = llama_file()
    scores = list(fields["token_scores"])
    scores[259:] = [float(score) for score in order(len(scores) - 259)]
    return dict(fields, token_scores=scores)


def listed_twice() -> dict:
    """Tokens listed a second time, with other scores: the later listing is the token."""
    fields = llama_file()
    tokens, scores = fields["token_list"], fields["token_scores"]
    again = [tokens[262], tokens[270], tokens[259], "a", "▁t"]
    return dict(fields, token_list=tokens + again, token_scores=scores + [5.0, -3.0, -1e9, 7.0, 0.5],
                token_types=fields["token_types"] + [NORMAL] * len(again))


def without_byte_tokens() -> dict:
    tokens, scores, types = sentencepiece_vocabulary(byte_tokens=False)
    return {"architecture": "llama", "tokenizer_model": "llama", "token_list": tokens, "token_scores": scores,
            "token_types": types, **SPECIALS}


def with_added_tokens(architecture: str) -> dict:
    fields = llama_file(architecture=architecture, pad_token_id=2)
    extra = [("<|user|>", CONTROL), ("<|end|>", CONTROL), ("<think>", USER_DEFINED), ("▁▁▁", USER_DEFINED),
             ("<0x41>x", USER_DEFINED)]
    return dict(fields, token_list=fields["token_list"] + [t for t, _ in extra],
                token_scores=fields["token_scores"] + [0.0] * len(extra),
                token_types=fields["token_types"] + [k for _, k in extra])


def gemma_file(architecture: str = "gemma3", **changes) -> dict:
    """Gemma's layout; scores that follow no order (Gemma's merges follow the vocabulary's)."""
    tokens, _, types = sentencepiece_vocabulary(head=GEMMA_HEAD)
    scores = [-1000.0] * len(GEMMA_HEAD) + [float(-i % 7) for i in range(len(tokens) - len(GEMMA_HEAD))]
    return {"architecture": architecture, "tokenizer_model": "llama", "token_list": tokens, "token_scores": scores,
            "token_types": types, **GEMMA_SPECIALS, "add_bos_token": True, **changes}


def gemma4_file() -> dict:
    """tokenizer.ggml.model "gemma4": Gemma's pipeline over listed merges (one way to make each
    learned piece), and never a BOS."""
    fields = gemma_file()
    tokens = fields["token_list"]
    present = set(tokens)
    merges = []
    for token in tokens[len(GEMMA_HEAD) + 256:]:
        cut = next((k for k in range(1, len(token)) if token[:k] in present and token[k:] in present), None)
        if cut is not None:
            merges.append(f"{token[:cut]} {token[cut:]}")
    return dict(fields, tokenizer_model="gemma4", token_merges=merges)


CASES = {
    "llama": lambda: llama_file(),
    "mistral-eos": lambda: llama_file(architecture="mistral", add_bos_token=False, add_eos_token=True),
    "phi3": lambda: with_added_tokens("phi3"),
    "llama-added-tokens": lambda: with_added_tokens("llama"),
    "scores-shuffled": lambda: with_scores(lambda n: random.Random(n).sample(range(-n, 0), n)),
    "scores-tied": lambda: with_scores(lambda n: [-(i // 5) for i in range(n)]),
    "scores-equal": lambda: with_scores(lambda n: [0] * n),
    "listed-twice": listed_twice,
    "no-byte-tokens": without_byte_tokens,
    "gemma3": lambda: gemma_file(),
    "gemma2": lambda: gemma_file("gemma2", add_bos_token=False, add_eos_token=True),
    "gemma4": gemma4_file,
}


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, tmp_path_factory, transformers_module):
    """(ours, transformers') for one file, written once for the module."""
    from tests.text.conftest import transformers_gguf_tokenizer
    fields = CASES[request.param]()
    path = tmp_path_factory.mktemp("sentencepiece") / f"{request.param}.gguf"
    write_gguf(path, fields.pop("architecture"), **fields)
    return Tokenizer.from_gguf(path), transformers_gguf_tokenizer(transformers_module, path)


def test_ids_equal_transformers(pair):
    ours, theirs = pair
    rows = id_mismatches(ours, theirs, TEXTS)
    assert not rows, failures(rows, "ids")


def test_encodings_and_decoding_equal_transformers(pair):
    ours, theirs = pair
    backend = theirs.backend_tokenizer
    rows = []
    for text in TEXTS:
        rows += encoding_mismatches(ours, backend, text)
        ids = ours.encode(text).ids
        for skip in (False, True):
            if ours.decode(ids, skip) != theirs.decode(ids, skip_special_tokens=skip):
                rows.append((f"{text} (decoded, skip_special_tokens={skip})", ours.decode(ids, skip),
                             theirs.decode(ids, skip_special_tokens=skip)))
    mine, expected = ours.encode(TEXTS[3], TEXTS[40]), backend.encode(TEXTS[3], TEXTS[40])
    assert [getattr(mine, f) for f in FIELDS] == [getattr(expected, f) for f in FIELDS]
    assert ours.get_vocab() == backend.get_vocab()
    assert ours.num_special_tokens_to_add(True) == backend.num_special_tokens_to_add(True)
    assert not rows, failures(rows, "encodings or decoded texts")


def test_stream_decoding_equals_decode_stream(pair):
    from tokenizers.decoders import DecodeStream
    ours, theirs = pair
    rows = []
    for text in TEXTS[:120]:
        ids = ours.encode(text).ids
        stream, reference = ours.decode_stream(), DecodeStream(skip_special_tokens=False)
        mine = [stream.step(i) for i in ids]
        expected = [reference.step(theirs.backend_tokenizer, i) or "" for i in ids]
        if mine != expected or "".join(mine) + stream.flush() != ours.decode(ids, False):
            rows.append((text, mine, expected))
    assert not rows, failures(rows, "streamed pieces")


def test_what_transformers_builds(tmp_path, transformers_module):
    """The facts engine/text/gguf.py states about the pipelines, read off transformers' backends."""
    from tests.text.conftest import transformers_gguf_tokenizer
    built = {}
    for name, fields in (("llama", llama_file()), ("phi3", llama_file(architecture="phi3")), ("gemma3", gemma_file())):
        write_gguf(tmp_path / f"{name}.gguf", fields.pop("architecture"), **fields)
        config = json.loads(transformers_gguf_tokenizer(transformers_module, tmp_path / f"{name}.gguf")
                            .backend_tokenizer.to_str())
        built[name] = config
        assert {k: config["model"][k] for k in ("type", "byte_fallback", "fuse_unk", "ignore_merges")} == \
            {"type": "BPE", "byte_fallback": True, "fuse_unk": True, "ignore_merges": False}
    strip = {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    assert built["llama"]["normalizer"] is None
    assert built["llama"]["pre_tokenizer"] == {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                                               "split": False}
    assert built["llama"]["decoder"]["decoders"][-1] == strip and built["llama"]["model"]["unk_token"] is None
    assert [n["type"] for n in built["phi3"]["normalizer"]["normalizers"]] == ["Prepend", "Replace"]
    assert built["phi3"]["pre_tokenizer"] is None and built["phi3"]["decoder"]["decoders"][-1] == strip
    assert built["gemma3"]["normalizer"] == {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    assert built["gemma3"]["pre_tokenizer"]["type"] == "Split" and built["gemma3"]["model"]["unk_token"] == "<unk>"
    assert [d["type"] for d in built["gemma3"]["decoder"]["decoders"]] == ["Replace", "ByteFallback", "Fuse"]
    assert "▁▁" in built["gemma3"]["model"]["vocab"] and "  " not in built["gemma3"]["model"]["vocab"]


def test_build_time_of_a_gemma_sized_vocabulary(capsys):
    """262,144 tokens with scores, as Gemma 3's (metadata given as a mapping: the reader's time apart)."""
    import time

    import numpy as np
    tokens, scores, types = sentencepiece_vocabulary()
    extra = 262_144 - len(tokens)
    metadata = {"general.architecture": "gemma3", "tokenizer.ggml.model": "llama",
                "tokenizer.ggml.tokens": tokens + [f"▁piece{i}" for i in range(extra)],
                "tokenizer.ggml.scores": np.array(scores + [-1.0 - i for i in range(extra)], np.float32),
                "tokenizer.ggml.token_type": np.array(types + [NORMAL] * extra, np.int32),
                "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1}
    start = time.perf_counter()
    tok = Tokenizer.from_gguf(metadata)
    built = time.perf_counter() - start
    text = TEXTS[10] * 3
    start = time.perf_counter()
    tok.encode(text[:1000])
    encoded = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n  262,144-token SentencePiece vocabulary built in {built:.2f} s; 1,000 characters encoded in "
              f"{encoded * 1000:.1f} ms")
    assert tok.get_vocab_size() == 262_144


# --- the components on other settings, against `tokenizers` -----------------------------------------------

def small_sentencepiece_json(**parts) -> str:
    """A tokenizer.json over the learned vocabulary (merges from its scores, written out), with
    `parts` (normalizer, pre_tokenizer, decoder, model options) as given."""
    tokens, scores, _ = sentencepiece_vocabulary(merges=120)
    vocab = {token: i for i, token in enumerate(tokens)}
    merges = sorted(((token[:k], token[k:], -scores[i]) for i, token in enumerate(tokens)
                     for k in range(1, len(token)) if token[:k] in vocab and token[k:] in vocab),
                    key=lambda m: m[2])
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
             "vocab": vocab, "merges": [[a, b] for a, b, _ in merges]}
    model.update(parts.pop("model", {}))
    added = [{"id": 1, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}]
    return json.dumps({"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": None,
                       "post_processor": None, "decoder": None, "model": model, **parts})


def metaspace(scheme, split=True, **more):
    return {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split, **more}


def replace(pattern, content):
    return {"type": "Replace", "pattern": pattern, "content": content}


def strip(start, stop):
    return {"type": "Strip", "content": " ", "start": start, "stop": stop}


def decoders(*steps):
    return {"type": "Sequence", "decoders": list(steps)}


SENTENCEPIECE_DECODER = decoders(replace({"String": "▁"}, " "), {"type": "ByteFallback"}, {"type": "Fuse"})


@pytest.mark.parametrize("parts", [
    {"pre_tokenizer": metaspace(scheme, split)} for scheme in ("always", "never", "first") for split in (True, False)
] + [
    {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True}},
    {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": False, "prepend_scheme": "never"}},
    {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": True, "prepend_scheme": "first"}},
    {"pre_tokenizer": {"type": "Metaspace", "replacement": "▁"}},
    {"normalizer": replace({"String": " "}, "▁"),
     "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}},
    {"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                        replace({"String": " "}, "▁")]}},
    {"normalizer": replace({"String": "th"}, "▁X")},
    {"normalizer": replace({"Regex": r"\s+"}, "▁")},
    {"normalizer": replace({"Regex": r"\p{N}"}, "")},
    {"pre_tokenizer": metaspace("first", False), "model": {"unk_token": "<unk>"}},
    {"pre_tokenizer": metaspace("always"), "model": {"unk_token": "<unk>", "fuse_unk": False}},
], ids=lambda parts: json.dumps(parts, ensure_ascii=False)[:60])
def test_sentencepiece_components(parts, reference):
    text = small_sentencepiece_json(**parts)
    ours, theirs = Tokenizer.from_str(text), reference.Tokenizer.from_str(text)
    for sample in TEXTS[:200]:
        mine, expected = ours.encode(sample), theirs.encode(sample)
        assert [getattr(mine, f) for f in FIELDS] == [getattr(expected, f) for f in FIELDS], sample


@pytest.mark.parametrize("decoder", [
    SENTENCEPIECE_DECODER,
    decoders(replace({"String": "▁"}, " "), {"type": "ByteFallback"}, {"type": "Fuse"}, strip(1, 0)),
    decoders(replace({"String": "▁"}, " "), {"type": "ByteFallback"}, {"type": "Fuse"}, strip(3, 0)),
    decoders(replace({"String": "▁"}, " "), {"type": "ByteFallback"}, strip(0, 1)),
    decoders({"type": "ByteFallback"}, replace({"Regex": "▁+"}, "_")),
    {"type": "ByteFallback"},
])
def test_sentencepiece_decoders(decoder, reference):
    """Decoding ids of texts, and random ids (byte tokens often: runs valid and not, mixed with
    other tokens and "<0x+A>"-like spellings the reference also reads as bytes). (Strip with
    `stop` only without Fuse: the reference panics on an empty token, which Fuse makes of no ids.)"""
    odd = ["<0x+A>", "<0xg0>", "<0x0a>", "<0x1>", "<0xé>", "▁▁▁", " "]
    config = json.loads(small_sentencepiece_json(decoder=decoder, pre_tokenizer=metaspace("first", False)))
    for token in odd:
        config["model"]["vocab"][token] = len(config["model"]["vocab"])
    text = json.dumps(config)
    ours, theirs = Tokenizer.from_str(text), reference.Tokenizer.from_str(text)
    for sample in TEXTS[:150]:
        ids = ours.encode(sample).ids
        assert ours.decode(ids, False) == theirs.decode(ids, skip_special_tokens=False), sample
    rng = random.Random(3)
    byte_ids = [config["model"]["vocab"][b] for b in BYTE_TOKENS]
    size = len(config["model"]["vocab"])
    for _ in range(400):
        ids = [rng.choice(byte_ids) if rng.random() < 0.6 else rng.randrange(size) for _ in range(rng.randrange(0, 10))]
        assert ours.decode(ids, False) == theirs.decode(ids, skip_special_tokens=False), ids


def test_unknown_characters_with_and_without_byte_tokens(reference):
    """models.BPE with byte_fallback where some byte tokens are missing: an unk_token still open
    when byte tokens come follows them, as in the reference."""
    vocab = {"<unk>": 0, "a": 1, "<0xC3>": 2, "<0xA9>": 3, "b": 4}
    for fuse in (True, False):
        config = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
                  "post_processor": None, "decoder": None,
                  "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                            "end_of_word_suffix": None, "fuse_unk": fuse, "byte_fallback": True,
                            "ignore_merges": False, "vocab": vocab, "merges": []}}
        ours, theirs = Tokenizer.from_str(json.dumps(config)), reference.Tokenizer.from_str(json.dumps(config))
        for text in ("1é", "12éa", "a1é2", "é1", "1é2é3b", "aéa", "€é€", "€a", "a€€b€", ""):
            mine, expected = ours.encode(text), theirs.encode(text)
            assert (mine.ids, mine.offsets) == (expected.ids, expected.offsets), (fuse, text)
    config["model"].update(unk_token=None)          # and with no unk_token: the character is dropped
    ours, theirs = Tokenizer.from_str(json.dumps(config)), reference.Tokenizer.from_str(json.dumps(config))
    for text in ("€a", "a€€b€", "1é2", "€€é"):
        mine, expected = ours.encode(text), theirs.encode(text)
        assert (mine.ids, mine.offsets) == (expected.ids, expected.offsets), text


def test_strip_decoder_stop():
    """Strip's `stop` (the reference panics on a token shorter than it, so this is checked here)."""
    from engine.text.decoders import Strip
    assert Strip(" ", 1, 2).decode_chain(["  a  ", " ", "", "a   ", "   "]) == [" a", "", "", "a ", ""]

