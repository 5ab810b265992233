"""engine.generation: the logits processors against transformers', sampling, and the generator's
mechanics (UTF-8-safe streaming, stop strings, EOS, max_new_tokens, cancel, prefix reuse).

The mechanics run on a scripted causal LM that says a fixed sequence of SmolLM2 token ids (so
multi-byte characters arrive split across byte tokens); the reuse test also runs a real tiny
llama, checking that reusing the cache gives the tokens a fresh cache gives."""
import numpy as np
import pytest

import engine
from engine.errors import InputError
from engine.generation import GenerationConfig, Generator, StopStrings, process, sample
from engine.nn import KVCache
from tests.helpers import need_import

EOS = 2                                         # SmolLM2's <|im_end|>


@pytest.fixture(scope="module")
def tokenizer(smollm2_metadata):
    from engine.text import Tokenizer
    return Tokenizer.from_gguf(smollm2_metadata)


class Scripted:
    """A causal LM whose next token after position p is script[p + 1 - prompt_length] (then
    EOS), whatever it was fed; it records how many tokens each call fed."""

    def __init__(self, script, prompt_length, vocab=49152):
        self.script, self.prompt_length, self.vocab, self.fed = list(script), prompt_length, vocab, []

    def new_cache(self, capacity, allocate=None):
        return KVCache(1, 1, 2, capacity, allocate=allocate and min(allocate, capacity))

    def __call__(self, input_ids, positions, cache, last_only=False, window=None):
        self.fed.append(input_ids.shape[1])
        k = int(positions.numpy()[-1]) + 1 - self.prompt_length
        logits = np.zeros((1, 1, self.vocab), np.float32)
        logits[0, 0, self.script[k] if 0 <= k < len(self.script) else EOS] = 10.0
        return engine.from_numpy(logits)


def run(tokenizer, text, prompt=(1, 5, 6), capacity=256, cancel=None, **options):
    script = tokenizer.encode(text, add_special_tokens=False).ids
    gen = Generator(Scripted(script, len(prompt)), tokenizer, capacity, eos_ids={EOS}, use_graphs=False)
    pieces = list(gen.stream(list(prompt), GenerationConfig.of(options), cancel))
    return pieces, gen


def test_stream_gives_out_whole_characters_only(tokenizer):
    text = "Hé 🙂 東京 ok, naïve café — ¡sí! 👩‍💻"
    pieces, gen = run(tokenizer, text)
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    assert len(pieces) > 5 and gen.stats["stop_reason"] == "eos"
    assert gen.stats["new_tokens"] == len(tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("stop,expected", [
    (["STOP"], "Hello world. "),                           # spread over tokens
    (["world.", "Hello"], ""),                             # the earliest stop wins
    (["STOPS"], "Hello world. STOP here, STOP"),          # a prefix that never completes is given out
    (["P h", "STOP here"], "Hello world. "),            # by where a stop starts, not where it ends
])
def test_stop_strings(tokenizer, stop, expected):
    pieces, gen = run(tokenizer, "Hello world. STOP here, STOP", stop=stop)
    assert "".join(pieces) == expected
    assert gen.stats["stop_reason"] == ("stop" if expected != "Hello world. STOP here, STOP" else "eos")


def test_stop_strings_hold_back_only_what_may_start_one():
    s = StopStrings(["</answer>"])
    assert s.feed("Paris </an") == "Paris "
    assert s.feed("swer> is") == ""                        # found: the text before it was given out
    assert s.hit == "</answer>"
    s = StopStrings(["</answer>"])
    assert s.feed("a <") == "a " and s.feed("b") == "<b" and s.flush() == ""


def test_max_new_tokens_and_length(tokenizer):
    pieces, gen = run(tokenizer, "one two three four five six", max_new_tokens=3)
    assert "".join(pieces) == "one two three" and gen.stats["stop_reason"] == "length"
    assert gen.model.fed == [3, 1, 1]                      # the last token is not fed: nothing needs it


def test_cancel_from_a_callable_and_from_cancel(tokenizer):
    calls = []
    pieces, gen = run(tokenizer, "one two three four five six", cancel=lambda: len(calls.append(1) or calls) > 2)
    assert "".join(pieces) == "one two" and gen.stats["stop_reason"] == "cancelled"
    script = tokenizer.encode("one two three four", add_special_tokens=False).ids
    gen = Generator(Scripted(script, 3), tokenizer, 64, {EOS})
    out = []
    for piece in gen.stream([1, 5, 6]):
        out.append(piece)
        gen.cancel()
    assert out == ["one"] and gen.stats["stop_reason"] == "cancelled"
    assert list(gen.stream([1, 5, 6], GenerationConfig(max_new_tokens=2)))      # usable afterwards


def test_a_new_prompt_feeds_only_what_the_cache_does_not_hold(tokenizer):
    script = tokenizer.encode("alpha beta", add_special_tokens=False).ids
    model = Scripted(script, 4)
    gen = Generator(model, tokenizer, 64, {EOS}, use_graphs=False)
    assert "".join(gen.stream([1, 5, 6, 7])) == "alpha beta"
    held = list(gen.cache.tokens)
    assert held == [1, 5, 6, 7] + script                   # the EOS was never fed
    model.prompt_length, model.fed = len(held) + 3, []
    list(gen.stream(held + [8, 9, 10]))
    assert gen.stats["reused_tokens"] == len(held) and model.fed[0] == 3
    model.prompt_length, model.fed = 4, []
    list(gen.stream([1, 5, 9, 9]))                         # differs from token 2 on
    assert gen.stats["reused_tokens"] == 2 and model.fed[0] == 2
    model.fed = []
    list(gen.stream([1, 5, 9, 9]))                         # the same prompt again: its last token is fed
    assert gen.stats["reused_tokens"] == 3 and model.fed[0] == 1


def test_prefix_reuse_gives_the_tokens_of_a_fresh_cache(tmp_path, tokenizer):
    """On a real (tiny, random) llama: a second prompt that extends the first, generated over the
    reused cache (decode steps replayed as graphs) and over a fresh one (eagerly), gives the same ids."""
    need_import("transformers")
    from models import llama
    from tests.llama_gguf import reference_model, write_gguf
    write_gguf(tmp_path / "t.gguf", reference_model(tied=True, seed=4))
    model = llama.load(tmp_path / "t.gguf", "numpy")
    first, config = [1, 17, 40, 99, 3], GenerationConfig(max_new_tokens=6)
    reused = Generator(model, tokenizer, 48, set())
    answer = list(reused.tokens(first, config))
    second = first + answer + [7, 8, 9]
    again = list(reused.tokens(second, config))
    assert reused.stats["reused_tokens"] == len(first) + len(answer) - 1
    assert reused.steps.graphs                                   # the decode steps were replayed
    assert again == list(Generator(model, tokenizer, 48, set(), use_graphs=False).tokens(second, config))


@pytest.mark.parametrize("device", engine.available_devices())
def test_a_cache_that_grows_gives_the_tokens_and_logits_of_a_preallocated_one(tmp_path, tokenizer, device):
    """The cache allocates rows as the conversation needs them (engine.nn.KVCache.reserve): from 8
    rows, a prompt and 50 new tokens grow it 8 -> 16 -> 32 -> 64, the capacity (on every
    backend, decode steps replayed as graphs, which each growth drops and captures again), with
    the ids and final logits of a cache preallocated whole."""
    need_import("transformers")
    from models import llama
    from tests.llama_gguf import reference_model, write_gguf
    write_gguf(tmp_path / "t.gguf", reference_model(tied=True, seed=5))
    model = llama.load(tmp_path / "t.gguf", device)
    prompt, config = [1, 17, 40, 99, 3, 12], GenerationConfig(max_new_tokens=50)

    def generate(first_rows):
        gen = Generator(model, tokenizer, 64, set())           # the tiny model's whole context
        gen.first_rows = first_rows
        gen.bind(model)
        ids = list(gen.tokens(prompt, config))
        return gen, ids, gen._forward([ids[-1]])

    grown, ids, logits = generate(8)
    whole, expected_ids, expected_logits = generate(64)
    assert grown.cache.allocated == whole.cache.allocated == 64           # 56 positions
    assert len(ids) == 50 and ids == expected_ids
    np.testing.assert_allclose(logits, expected_logits, atol=1e-5, rtol=0)
    assert grown.steps.graphs and grown.steps.enabled == whole.steps.enabled


def test_kv_cache_reserve_doubles_up_to_the_capacity_and_keeps_the_rows():
    cache = KVCache(2, 1, 3, 100, allocate=8)
    rows = engine.from_numpy(np.arange(8 * 3, dtype=np.float32).reshape(1, 1, 8, 3) + 1)        # (1, 1, 8, 3)
    cache.update(1, engine.arange(8), rows, rows * 2)
    assert cache.reserve(8) is False and cache.allocated == 8
    assert cache.reserve(9) is True and cache.allocated == 16
    assert cache.reserve(40) is True and cache.allocated == 64
    assert cache.reserve(65) is True and cache.allocated == 100                 # capped
    assert cache.key[1].shape == (1, 1, 100, 3) and cache.nbytes == 2 * 2 * 100 * 3 * 4
    np.testing.assert_array_equal(cache.key[1].numpy()[:, :, :8], rows.numpy())
    np.testing.assert_array_equal(cache.value[1].numpy()[:, :, :8], rows.numpy() * 2)
    assert not cache.key[1].numpy()[:, :, 8:].any()
    assert cache.mask(engine.tensor([3])).shape == (1, 100)
    with pytest.raises(InputError, match="at most 100 positions"):
        cache.reserve(101)
    with pytest.raises(InputError, match="allocate <= capacity"):
        KVCache(1, 1, 2, 10, allocate=11)


def test_prompts_that_do_not_fit(tokenizer):
    gen = Generator(Scripted([], 3), tokenizer, 8, {EOS})
    with pytest.raises(InputError, match="empty"):
        list(gen.tokens([]))
    with pytest.raises(InputError, match="8"):
        list(gen.tokens(list(range(8))))
    gen = Generator(Scripted(tokenizer.encode("a b c d e f g h", add_special_tokens=False).ids, 5), tokenizer, 8, {EOS})
    assert len(list(gen.tokens([1, 2, 3, 4, 5]))) == 3     # max_new_tokens is cut to the room left


# --- sampling -------------------------------------------------------------------------------------
def transformers_processed(logits, history, config):
    """The same steps through transformers' logits processors, in generate()'s order."""
    torch = need_import("torch")
    g = need_import("transformers.generation.logits_process")
    scores = torch.from_numpy(logits[None].astype(np.float64))
    ids = torch.tensor([history])
    steps = [g.RepetitionPenaltyLogitsProcessor(config.repetition_penalty)] if config.repetition_penalty != 1 else []
    if config.temperature:
        steps += [g.TemperatureLogitsWarper(config.temperature)]
        steps += [g.TopKLogitsWarper(config.top_k)] if config.top_k else []
        steps += [g.TopPLogitsWarper(config.top_p)] if config.top_p < 1 else []
    for step in steps:
        scores = step(ids, scores)
    return scores[0].numpy()


@pytest.mark.parametrize("options", [
    dict(temperature=0.7), dict(temperature=1.3, top_k=40), dict(temperature=0.8, top_p=0.9),
    dict(temperature=1.0, top_k=100, top_p=0.5, repetition_penalty=1.3), dict(repetition_penalty=1.5),
    dict(temperature=0.6, top_p=0.99, repetition_penalty=0.8),
])
def test_processors_match_transformers(options):
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal(1000) * 3).astype(np.float32)
    history = list(rng.integers(0, 1000, 30))
    config = GenerationConfig.of(options)
    ours, theirs = process(logits, history, config), transformers_processed(logits, history, config)
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(theirs))
    finite = np.isfinite(ours)
    np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-12)


def test_presence_and_frequency_penalties_are_openais():
    """OpenAI's formula (their API reference): mu[j] -= c[j] * frequency + (c[j] > 0) * presence,
    c counting the generated tokens only (not the prompt's)."""
    rng = np.random.default_rng(8)
    logits = (rng.standard_normal(50) * 3).astype(np.float32)
    prompt, new = list(rng.integers(0, 50, 20)), list(rng.integers(0, 50, 15))
    config = GenerationConfig.of({"presence_penalty": 0.7, "frequency_penalty": -0.4})
    want = logits.astype(np.float64).copy()
    counts = np.bincount(np.array(new), minlength=50)
    want -= counts * -0.4 + (counts > 0) * 0.7
    np.testing.assert_allclose(process(logits, prompt + new, config, new), want, rtol=1e-12)
    np.testing.assert_array_equal(process(logits, prompt + new, config, ()), logits.astype(np.float64))


def test_sampling_follows_the_distribution_and_the_seed():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    config = GenerationConfig(temperature=1.0, seed=3)
    draws = [sample(logits, [], config, np.random.default_rng(i)) for i in range(4000)]
    freq = np.bincount(draws, minlength=4) / 4000
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.03)
    same = [sample(logits, [], config, np.random.default_rng(9)) for _ in range(5)]
    assert len(set(same)) == 1
    top2 = {sample(logits, [], GenerationConfig(temperature=1.0, top_k=2), np.random.default_rng(i)) for i in range(300)}
    assert top2 == {0, 1}
    top_p = {sample(logits, [], GenerationConfig(temperature=1.0, top_p=0.75), np.random.default_rng(i))
             for i in range(300)}
    assert top_p == {0, 1}                                  # 0.5 < 0.75 <= 0.8
    assert sample(np.array([1.0, 3.0, 3.0]), [], GenerationConfig(), None) == 1        # greedy: the first maximum


@pytest.mark.parametrize("options,word", [
    (dict(temperature=-1), "temperature"), (dict(top_p=0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(top_k=-2), "top_k"), (dict(max_new_tokens=1.5), "max_new_tokens"), (dict(seed="x"), "seed"),
    (dict(stop=[""]), "stop"), (dict(repetition_penalty=0), "repetition_penalty"), (dict(tempreature=1), "unknown"),
])
def test_bad_options_are_input_errors(options, word):
    with pytest.raises(InputError, match=word):
        GenerationConfig.of(options)
