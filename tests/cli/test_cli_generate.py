"""`python -m engine generate | chat | tokenize --model SmolLM2-135M-Instruct` on the real GGUF
(on simd where it is available: the fast backend; the pipeline's own tests cover every backend)."""
import json

import pytest

import engine
from test_cli import run

DEVICE = "simd" if "simd" in engine.available_devices() else "numpy"


def test_generate_chat_json(smollm2_gguf):
    r = run("generate", "What is the capital of France?", "--chat", "--json", "--weights", str(smollm2_gguf),
            "--device", DEVICE)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["input"] == "What is the capital of France?" and out["output"] == "The capital of France is Paris."
    assert out["tokens"] == 7 and out["prefill_tok_s"] > 0 and out["decode_tok_s"] > 0


def test_generate_continues_a_plain_prompt_and_stops_at_a_stop_string(smollm2_gguf):
    r = run("generate", "The capital of France is", "--max-new-tokens", "20", "--stop", ".", "--weights",
            str(smollm2_gguf), "--device", DEVICE)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout and "." not in r.stdout
    assert "decode" in r.stderr and "tok/s" in r.stderr


def test_chat_reads_turns_from_stdin(smollm2_gguf):
    r = run("chat", "--weights", str(smollm2_gguf), "--device", DEVICE, "--max-new-tokens", "24",
            input="What is the capital of France?\n/new\nWhat is the capital of France?\n/quit\nignored\n")
    assert r.returncode == 0, r.stderr
    answers = r.stdout.splitlines()
    assert answers == ["The capital of France is Paris."] * 2           # /new: the same answer afresh
    assert "a new conversation" in r.stderr


def test_bad_options_exit_2_with_one_line(smollm2_gguf):
    for args in (["--temperature", "-1"], ["--top-p", "2"], ["--system", "x"], ["--capacity", "1"]):
        r = run("generate", "Hi", "--weights", str(smollm2_gguf), *args)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, args


def test_tokenize_reads_the_tokenizer_from_the_gguf(smollm2_gguf, smollm2_metadata):
    from engine.text import Tokenizer
    r = run("tokenize", "--model", "SmolLM2-135M-Instruct", "--weights", str(smollm2_gguf), "--json", "Hello wörld 🙂")
    assert r.returncode == 0, r.stderr
    want = Tokenizer.from_gguf(smollm2_metadata).encode("Hello wörld 🙂")
    assert json.loads(r.stdout)["ids"] == want.ids


@pytest.mark.slow
def test_bench_llm_json(smollm2_gguf):
    r = run("bench", "llm", "--weights", str(smollm2_gguf), "--device", DEVICE, "--new-tokens", "8", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    engine_run = out["engine"][DEVICE]
    assert engine_run["prompt_tokens"] == 37 and engine_run["new_tokens"] == 8
    assert engine_run["prefill_tok_s"] > 0 and engine_run["decode_tok_s"] > 0
    assert out["torch"]["prompt_tokens"] == 37 and out["torch"]["decode_tok_s"] > 0
