"""The tokenizers of real GGUFs, built from their metadata alone, against transformers loading the
same file: SmolLM2-135M (byte-level BPE, pre "smollm"), Qwen2.5-Coder-0.5B-Instruct (byte-level,
"qwen2", 151,936 tokens) and gemma-3-270m (SentencePiece with byte fallback, 262,144 tokens).
Ids with and without special tokens on tests/text/corpus.py, the whole encodings, decoding,
vocabulary and special tokens, streaming. Nothing expected is written here: every answer is
transformers' (or its `tokenizers` backend's) at test time, and a failure lists the texts."""
import random
import time

import pytest

import engine
from engine.text import Tokenizer
from tests.text.corpus import FIELDS, corpus, encoding_mismatches, failures, id_mismatches

MODELS = {"smollm2": ("smollm2_gguf", "smollm2_reference"),
          "qwen05": ("qwen05_gguf", "qwen05_reference"),
          "gemma270": ("gemma270_gguf", "gemma270_reference")}
TEXTS = corpus()


@pytest.fixture(scope="module", params=list(MODELS))
def pair(request):
    """(ours, transformers') for one model; made once each for the module."""
    path_fixture, reference_fixture = MODELS[request.param]
    theirs = request.getfixturevalue(reference_fixture)
    return Tokenizer.from_gguf(request.getfixturevalue(path_fixture)), theirs


def test_ids_equal_transformers(pair):
    ours, theirs = pair
    rows = id_mismatches(ours, theirs, TEXTS)
    assert not rows, failures(rows, "ids")


def test_encodings_equal_the_backend(pair):
    """Tokens, offsets, word ids, masks: as transformers' `tokenizers` backend gives them; a pair too."""
    ours, theirs = pair
    backend = theirs.backend_tokenizer
    rows = [row for text in TEXTS for row in encoding_mismatches(ours, backend, text)]
    mine, expected = ours.encode(TEXTS[3], TEXTS[30]), backend.encode(TEXTS[3], TEXTS[30])
    assert [getattr(mine, f) for f in FIELDS] == [getattr(expected, f) for f in FIELDS]
    assert not rows, failures(rows, "encodings")


def test_decode_equals_transformers(pair):
    """decode(encode(text)) as transformers decodes the ids, special tokens kept and skipped; then
    random ids (byte tokens among them: broken UTF-8 decodes as transformers decodes it)."""
    ours, theirs = pair
    rows = []
    for text in TEXTS:
        ids = ours.encode(text).ids
        for skip in (False, True):
            mine, expected = ours.decode(ids, skip), theirs.decode(ids, skip_special_tokens=skip)
            if mine != expected:
                rows.append((f"{text} (skip_special_tokens={skip})", mine, expected))
    rng = random.Random(7)
    size = ours.get_vocab_size()
    byte_ids = [i for i in (ours.token_to_id(f"<0x{b:02X}>") for b in range(256)) if i is not None]
    for _ in range(200):
        ids = [rng.choice(byte_ids) if byte_ids and rng.random() < 0.5 else rng.randrange(size)
               for _ in range(rng.randrange(1, 12))]
        for skip in (False, True):
            mine, expected = ours.decode(ids, skip), theirs.decode(ids, skip_special_tokens=skip)
            if mine != expected:
                rows.append((f"ids {ids} (skip_special_tokens={skip})", mine, expected))
    assert not rows, failures(rows, "decoded texts")


def test_vocabulary_and_special_tokens(pair):
    ours, theirs = pair
    backend = theirs.backend_tokenizer
    assert ours.get_vocab() == backend.get_vocab()
    assert ours.get_vocab_size() == backend.get_vocab_size()
    assert ours.special_tokens == {name: getattr(theirs, name) for name in ("bos_token", "eos_token", "unk_token",
                                                                            "pad_token") if getattr(theirs, name)}
    assert ours.chat_template == theirs.chat_template
    for pair_ in (False, True):
        assert ours.num_special_tokens_to_add(pair_) == backend.num_special_tokens_to_add(pair_)
    for i in (0, 1, 2, 3, 255, 1000, ours.get_vocab_size() - 1, ours.get_vocab_size()):
        assert ours.id_to_token(i) == backend.id_to_token(i)


def test_stream_decoding_equals_decode_stream(pair):
    """Step by step what the reference's DecodeStream gives (its None is our ""), on the corpus's
    ids: characters cut across byte-level tokens and spelled in byte-fallback tokens come out
    whole, once complete."""
    from tokenizers.decoders import DecodeStream
    ours, theirs = pair
    backend = theirs.backend_tokenizer
    rows = []
    for text in TEXTS[:150]:
        ids = ours.encode(text).ids
        for skip in (False, True):
            stream, reference = ours.decode_stream(skip), DecodeStream(skip_special_tokens=skip)
            mine = [stream.step(i) for i in ids]
            expected = [reference.step(backend, i) or "" for i in ids]
            if mine != expected or "".join(mine) + stream.flush() != ours.decode(ids, skip):
                rows.append((f"{text} (skip_special_tokens={skip})", mine, expected))
    assert not rows, failures(rows, "streamed pieces")


def test_gemma_byte_fallback_streams_whole_characters(gemma270_gguf):
    """Characters Gemma has no token for are spelled in byte tokens; each comes out of the stream
    whole, none as U+FFFD; a stray byte after a complete character (which rewrites that run as
    U+FFFDs in decode) does not stop the stream."""
    tok = Tokenizer.from_gguf(gemma270_gguf)
    text = "a\x07b \U0001f9d1\u200d\U0001f4bb \U000e0041\U000e0042 \x0b\x0c z"
    ids = tok.encode(text, add_special_tokens=False).ids
    assert sum(token.startswith("<0x") for token in tok.encode(text).tokens) >= 8, "the text must use byte tokens"
    stream = tok.decode_stream()
    pieces = [stream.step(i) for i in ids]
    assert "".join(pieces) + stream.flush() == text and not any("\ufffd" in p for p in pieces)
    euro = [tok.token_to_id(f"<0x{b:02X}>") for b in "€".encode()]
    stray = [tok.token_to_id("<0xFF>"), tok.token_to_id("a")]
    assert tok.decode(euro + stray) == "\ufffd" * 4 + "a"                  # the reference's all-or-nothing run
    stream = tok.decode_stream()
    assert [stream.step(i) for i in euro + stray] == ["", "", "€", "", "\ufffda"]


def test_qwen15_has_the_tokenizer_of_the_05b(qwen05_gguf, qwen15_gguf):
    """Qwen2.5-Coder-1.5B-Instruct's tokenizer metadata equals the 0.5B's key for key, so the 0.5B's
    parity covers it; all but the chat template, whose tools prompt writes its JSON example's
    braces doubled in the 1.5B's (the template is the file's text either way)."""
    def tokenizer_keys(path) -> dict:
        with engine.load_gguf(path) as weights:
            return {key: (value.tolist() if hasattr(value, "tolist") else value)
                    for key, value in weights.metadata.items() if key.startswith("tokenizer.")}
    small, large = tokenizer_keys(qwen05_gguf), tokenizer_keys(qwen15_gguf)
    assert small.keys() == large.keys() and "tokenizer.ggml.merges" in small
    assert [key for key in small if small[key] != large[key]] == ["tokenizer.chat_template"]
    assert Tokenizer.from_gguf(qwen15_gguf).chat_template == large["tokenizer.chat_template"]


@pytest.mark.parametrize("path_fixture", ["gemma270_gguf", "qwen05_gguf"])
def test_build_and_encode_times(request, path_fixture, capsys):
    """Building from the metadata (read first, apart) and encoding 1,000 characters, reported, not
    asserted (a shared machine's timings vary)."""
    import pathlib
    path = request.getfixturevalue(path_fixture)
    start = time.perf_counter()
    with engine.load_gguf(path) as weights:
        metadata = weights.metadata
        read = time.perf_counter() - start
        start = time.perf_counter()
        tok = Tokenizer.from_gguf(metadata)
        built = time.perf_counter() - start
    text = (pathlib.Path(__file__).resolve().parents[2] / "engine" / "text" / "tokenizer.py").read_text()[:1000]
    start = time.perf_counter()
    n = len(tok.encode(text).ids)
    encoded = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n  {path.name}: metadata read in {read:.2f} s, tokenizer built in {built:.2f} s "
              f"({tok.get_vocab_size():,} tokens); 1,000 characters -> {n} tokens in {encoded * 1000:.1f} ms")
    assert n > 100
