"""Tokens chosen on the device (engine.sampler, the "select_token" kernel): the WGSL kernel against
its NumPy reference (engine.selection), the reference against the host's samplers (engine.generation
and Whisper's filters), the GPU's sampled tokens against the CPU sampler's distribution, and decode
loops on webgpu that submit once and read back 16 bytes per step with the tokens of the numpy
backend (a tiny llama, a tiny random Whisper)."""
from __future__ import annotations

import numpy as np
import pytest

import engine
from engine import selection
from engine.generation import GenerationConfig, Generator, process, sample
from engine.sampler import Rules, TokenSelector
from engine.speech.decoding import SpecialTokens, TimestampRules, _sample, _sample_on_device
from tests.helpers import need_import

# multilingual Whisper's special tokens (a 51865-token vocabulary)
SPECIALS = SpecialTokens(eot=50257, sot=50258, translate=50358, transcribe=50359, sot_lm=50360, sot_prev=50361,
                         no_speech=50362, no_timestamps=50363, n_vocab=51865)
BEGIN = SPECIALS.timestamp_begin

LLM_RULES = [Rules(), Rules(repetition_penalty=1.3), Rules(temperature=0.7), Rules(temperature=1.0, top_k=5),
             Rules(temperature=0.9, top_p=0.8), Rules(temperature=1.2, top_k=40, top_p=0.95, repetition_penalty=1.1,
                                                       presence_penalty=0.4, frequency_penalty=0.2)]


def whisper_rules(temperature=0.0, max_initial=50):
    return Rules(temperature, suppress=(220, 50257 - 1, 50358, 50359), suppress_first=(220, SPECIALS.eot),
                 timestamps=(BEGIN, SPECIALS.eot, SPECIALS.no_timestamps, max_initial))


def run_steps(device, rules, logits_seq, seen=(), seed=0):
    """select_token over a sequence of logits on `device`: the answers and the final state."""
    vocab = logits_seq[0].size
    selector = TokenSelector(vocab, device)
    selector.start(rules, seen, np.random.default_rng(seed))
    ids = engine.tensor([[0]], dtype=engine.int64, device=device)
    positions = engine.tensor([5], dtype=engine.int64, device=device)
    outs = [selector.select(engine.tensor(l, device=device), ids, positions).numpy() for l in logits_seq]
    return np.array(outs), selector.state.numpy(), selector.marks.numpy(), int(ids.numpy()[0, 0]), \
        int(positions.numpy()[0])


@pytest.mark.parametrize("rules", LLM_RULES + [whisper_rules(), whisper_rules(0.8), whisper_rules(0.0, -1)],
                         ids=lambda r: f"T{r.temperature}-k{r.top_k}-p{r.top_p}-{'whisper' if r.timestamps else 'llm'}")
def test_kernel_equals_its_numpy_reference(gpu, rules):
    rng = np.random.default_rng(1)
    vocab = SPECIALS.n_vocab if rules.timestamps else 1000
    logits = [(rng.standard_normal(vocab) * 3).astype(np.float32) for _ in range(12)]
    if rules.timestamps:                          # timestamps likely enough to open and close pairs
        for l in logits[::2]:
            l[BEGIN:BEGIN + 200] += 6.0
    got = run_steps("webgpu", rules, logits, seen=[3, 4, 5])
    want = run_steps("numpy", rules, logits, seen=[3, 4, 5])
    np.testing.assert_array_equal(got[0][:, 0], want[0][:, 0])                 # the tokens
    np.testing.assert_allclose(got[0][:, 1], want[0][:, 1], rtol=1e-4, atol=1e-4)   # their log-probabilities
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_array_equal(g, w)                                    # state, marks, ids, position
    assert got[4] == 5 + len(logits)


@pytest.mark.parametrize("config", [GenerationConfig(), GenerationConfig(repetition_penalty=1.3),
                                    GenerationConfig(presence_penalty=0.5, frequency_penalty=0.3),
                                    GenerationConfig(temperature=0.8, top_k=10, top_p=0.9, repetition_penalty=1.2)])
def test_reference_chooses_as_the_host_sampler(config):
    """The reference kernel with the host's uniform draws picks the host sampler's tokens
    (engine.generation.sample), step after step with the history it keeps in marks."""
    rng = np.random.default_rng(7)
    vocab, prompt = 300, [1, 2, 3, 2]
    rules = Rules(config.temperature, config.top_k, config.top_p, config.repetition_penalty,
                  config.presence_penalty, config.frequency_penalty)
    marks, state = rules.marks(vocab, prompt), np.array([0, -1, -1, -1, 0, 0, 0, 0], np.int32)
    conf = rules.config(vocab)
    draws = np.random.default_rng(5)
    conf[selection.CONFIG:] = draws.random(selection.UNIFORMS)
    host_rng, history, new = np.random.default_rng(5), list(prompt), []
    ids, positions = np.zeros((1, 1), np.int64), np.zeros(1, np.int64)
    for _ in range(40):
        logits = (rng.standard_normal(vocab) * 2).astype(np.float32)
        logits[history[-1]] += 3.0                      # make repeats tempting, so penalties matter
        want = sample(logits, history, config, host_rng, new)
        got = int(selection.select_token(logits, marks, state, conf, ids, positions)[0])
        assert got == want
        history.append(want)
        new.append(want)


def test_reference_applies_whispers_filters():
    """The reference's suppression and timestamp rules leave the argmax and log-probability the
    host's filters (suppress, suppress_blank, TimestampRules) give, over a sequence of states."""
    rng = np.random.default_rng(2)
    rules = whisper_rules(max_initial=50)
    apply = TimestampRules(SPECIALS, 50).apply
    marks, state = rules.marks(SPECIALS.n_vocab), np.array([0, -1, -1, -1, 0, 0, 0, 0], np.int32)
    conf = rules.config(SPECIALS.n_vocab)
    ids, positions = np.zeros((1, 1), np.int64), np.zeros(1, np.int64)
    sampled, last_timestamp = [], None
    for step in range(30):
        logits = (rng.standard_normal(SPECIALS.n_vocab) * 2).astype(np.float32)
        logits[BEGIN + rng.integers(0, 1500, 40)] += rng.uniform(2, 8)
        host = logits.copy()
        host[list(rules.suppress)] = -np.inf
        if not sampled:
            host[list(rules.suppress_first)] = -np.inf
        apply(host, sampled, last_timestamp)
        want = int(np.argmax(host))
        out = selection.select_token(logits, marks, state, conf, ids, positions)
        assert int(out[0]) == want, step
        shifted = host[np.isfinite(host)].max()
        logprob = host[want] - shifted - np.log(np.exp(host[np.isfinite(host)] - shifted).sum())
        assert out[1] == pytest.approx(logprob, abs=1e-5)
        sampled.append(want)
        if want >= BEGIN:
            last_timestamp = want
    assert any(t >= BEGIN for t in sampled) and any(t < BEGIN for t in sampled)


def test_sampled_tokens_follow_the_cpu_samplers_distribution(gpu):
    """2,000 tokens drawn on the GPU from one position's logits (temperature, top-k, top-p) against
    the CPU sampler's probabilities (engine.generation.process): total variation distance <= 0.04
    (the sampling noise of 2,000 draws over ~15 tokens is ~0.03), nothing outside the kept set."""
    vocab, draws = 64, 2000
    rng = np.random.default_rng(11)
    logits = (rng.standard_normal(vocab) * 2).astype(np.float32)
    config = GenerationConfig(temperature=0.8, top_k=20, top_p=0.9)
    kept = process(logits, [], config)
    p = np.exp(kept - kept[np.isfinite(kept)].max())
    p /= p.sum()
    rules = Rules(config.temperature, config.top_k, config.top_p)
    selector = TokenSelector(vocab, "webgpu")
    ids = engine.tensor([[0]], dtype=engine.int64, device="webgpu")
    positions = engine.tensor([0], dtype=engine.int64, device="webgpu")
    x = engine.tensor(logits, device="webgpu")
    counts = np.zeros(vocab)
    selector.start(rules, (), np.random.default_rng(3))
    for n in range(draws):
        selector.refill(n)
        counts[int(selector.select(x, ids, positions).numpy()[0])] += 1
    assert counts[p == 0].sum() == 0
    assert 0.5 * np.abs(counts / draws - p).sum() <= 0.04
    greedy = TokenSelector(vocab, "webgpu")
    greedy.start(Rules(), ())
    assert int(greedy.select(x, ids, positions).numpy()[0]) == int(np.argmax(logits))


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    need_import("transformers")
    from tests.llama_gguf import reference_model, write_gguf
    path = tmp_path_factory.mktemp("llama") / "t.gguf"
    write_gguf(path, reference_model(tied=True, seed=5))
    return path


@pytest.mark.parametrize("config", [GenerationConfig(max_new_tokens=30),
                                    GenerationConfig(max_new_tokens=30, temperature=0.9, top_k=20, top_p=0.9,
                                                     repetition_penalty=1.2, seed=3)], ids=["greedy", "sampled"])
def test_llama_decodes_on_the_device_with_numpys_tokens_one_submission_a_step(gpu, tiny_llama, config):
    from models import llama
    prompt = [1, 17, 40, 99, 3, 12]
    want = list(Generator(llama.load(tiny_llama, "numpy"), None, 64, set()).tokens(prompt, config))
    gen = Generator(llama.load(tiny_llama, "webgpu"), None, 64, set())
    assert gen.selects_on_device(config)
    first = list(gen.tokens(prompt, config))
    gen.reset()
    again = list(gen.tokens(prompt, config))         # the steps' graphs captured: every step replays
    assert first == again == want
    assert gen.stats["selected_on_device"]
    assert gen.stats["submits_per_step"] == 1 and gen.stats["read_bytes_per_step"] == 16
    assert gen.stats["recorded_per_step"] == 0


def test_options_that_need_the_logits_choose_on_the_host(gpu, tiny_llama):
    from models import llama
    gen = Generator(llama.load(tiny_llama, "webgpu"), None, 64, set())
    assert not gen.selects_on_device(GenerationConfig(logprobs=2))
    ids = list(gen.tokens([1, 17, 40], GenerationConfig(max_new_tokens=5, logprobs=2)))
    assert len(gen.logprobs) == len(ids) and not gen.stats["selected_on_device"]


def test_whisper_decodes_on_the_device_as_on_the_host(gpu):
    """A tiny random Whisper: _sample_on_device's tokens and sum of log-probabilities equal the
    host filters' (greedy and sampled with the same seed), one submission and 16 bytes a step."""
    need_import("torch")                                # the reference model's dependency
    from engine.speech.decoder import DecoderSession
    from tests.models.test_whisper import TINY, ours, reference_model, state_of
    state = state_of(reference_model(TINY))
    mel = np.random.default_rng(3).standard_normal((TINY.n_mels, 2 * TINY.n_audio_ctx)).astype(np.float32)
    initial = [SPECIALS.sot, SPECIALS.sot + 1, SPECIALS.transcribe]
    suppress = (220, 50358, 50359)
    filters = [lambda l, s, t: l.__setitem__(list(suppress), -np.inf), TimestampRules(SPECIALS, 50).apply]
    rules = Rules(0.0, suppress=suppress, timestamps=(BEGIN, SPECIALS.eot, SPECIALS.no_timestamps, 50))
    results = {}
    for device in ("numpy", "webgpu"):
        model = ours(state, device)
        session = DecoderSession(model)
        session.set_audio(model.encode(mel))
        for temperature in (0.0, 0.7):
            session.rewind(0)
            first = session.feed(initial, rows=(-1,))[0]
            rng = np.random.default_rng(9)
            if device == "numpy":
                got = _sample(session, first, initial, filters, temperature, rng, 20, TINY.n_text_ctx, SPECIALS, None)
            else:
                assert session.selects_on_device()
                session.traffic.clear()
                got = _sample_on_device(session, first, initial, Rules(temperature, **{
                    k: getattr(rules, k) for k in ("suppress", "timestamps")}), rng if temperature else None, 20,
                    TINY.n_text_ctx, SPECIALS, None)
            results[device, temperature] = got
    for temperature in (0.0, 0.7):
        host, dev = results["numpy", temperature], results["webgpu", temperature]
        assert dev[0] == host[0] and dev[1] == pytest.approx(host[1], abs=1e-3)   # same draws, float32 here
        assert len(dev[0]) >= 5
    traffic = session.traffic                           # the second (sampled) run: graphs captured
    assert traffic["submits"] == traffic["steps"] and traffic["read_bytes"] == 16 * traffic["steps"]
    assert traffic["recorded"] == 0


def test_one_api_call_a_step_where_submit_and_wait_join(gpu, tiny_llama, monkeypatch):
    """Where the api joins a submission with a wait (the browser's bridge: submit_then_mapped), the
    device layer holds a step's submission for the wait on the step before: one api call a decode
    step, with the same tokens. Natively, through wgpu with that method added."""
    from models import llama
    from engine.backends.webgpu.gpu import NativeApi
    calls = {"submit": 0, "mapped": 0, "submit_then_mapped": 0}

    def counted(name, method):
        def call(self, *args):
            calls[name] += 1
            return method(self, *args)
        return call

    submit, mapped = NativeApi.submit, NativeApi.mapped

    def submit_then_mapped(self, dispatches, read, wait, wait_mapping, wait_bytes):
        mapping = submit(self, dispatches, read)
        return mapping, mapped(self, wait, mapping if wait is read[1] else wait_mapping, wait_bytes)
    config = GenerationConfig(max_new_tokens=24, temperature=0.8, top_k=30, seed=2)
    prompt = [1, 17, 40, 99, 3, 12]
    gen = Generator(llama.load(tiny_llama, "webgpu"), None, 64, set())
    want = list(gen.tokens(prompt, config))                   # graphs captured, every step launched directly
    monkeypatch.setattr(NativeApi, "submit_then_mapped", counted("submit_then_mapped", submit_then_mapped),
                        raising=False)
    monkeypatch.setattr(NativeApi, "submit", counted("submit", submit))
    monkeypatch.setattr(NativeApi, "mapped", counted("mapped", mapped))
    gen.reset()
    got = list(gen.tokens(prompt, config))
    assert got == want
    steps = len(got) - 1
    # every step's submission but the first went with the wait on the step before; only the last
    # step's wait (no step after it to launch) went alone: steps + 1 calls for `steps` steps
    assert calls["submit_then_mapped"] == steps - 1 and calls["mapped"] == 1
    assert gen.stats["submits_per_step"] == 1 and gen.stats["read_bytes_per_step"] == 16
