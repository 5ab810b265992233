"""The real GGUFs of the registry's Qwen2.5 and Gemma 3 entries (PyPI parts, joined into the
build cache): greedy decoding equal to transformers loading the same file (dequantized to
float32), token for token, on five prompts each.

- Qwen2.5-Coder-0.5B-Instruct chats: the prompts go through the file's own chat template (equal
  to transformers' apply_chat_template: tests/text/test_chat_template.py), 48 new tokens.
- Gemma 3 270M is a base model: plain completion of text, 48 new tokens.
- Qwen2.5-Coder-1.5B-Instruct (1.1 GB): one prompt, 16 tokens, in the slow tier.

Both sides stop at the same end ids (the file's eos/eot and the template's turn end). The engine
runs on simd, the default for quantized models, which rounds activations to 14 bits per block of
32 (wasm_kernels/README.md) and so may flip a near tie late in an answer: where it differs from
transformers, the test asks that transformers' own top two logits were that close there. NumPy's
reference kernels (float32 products of the quantized weights, as transformers' dequantized ones;
~2 s a token for the 0.5B) answer the first prompt in the slow tier; the tiny random files of
tests/models/test_decoder_families.py check every backend's logits to 1e-4."""
from __future__ import annotations

import numpy as np
import pytest

import engine
from engine.generation import GenerationConfig
from tests.helpers import need_import

torch = need_import("torch")
transformers = need_import("transformers")
need_import("gguf", "transformers reads a GGUF with it")

QWEN_PROMPTS = ["Write a Python function that reverses a string.",
                "What is a binary search? Answer in two sentences.",
                "How do I read a file line by line in Python?",
                "What does the HTTP status code 404 mean?",
                "Explain recursion to a beginner."]
GEMMA_PROMPTS = ["The capital of France is",
                 "Once upon a time, in a small village by the sea,",
                 "def fibonacci(n):\n",
                 "The three primary colors are",
                 "Water boils at 100 degrees Celsius because"]
NEW_TOKENS = 48
NUMPY_TOKENS = 8          # numpy: the first prompt's first tokens (slow tier)
SIMD_TIE = 0.05           # simd's logit error on these models stays below it (see the docstring)


class Reference:
    """transformers' float32 model of a GGUF, greedy with its KV cache."""

    def __init__(self, path):
        need_import("accelerate", "transformers loads a GGUF with it")
        transformers.utils.logging.disable_progress_bar()
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, local_files_only=True, dtype=torch.float32).eval()

    def greedy(self, ids: list[int], new_tokens: int, end_ids) -> tuple[list[int], list[float]]:
        """(the new ids, transformers' top-1 minus top-2 logit at each)."""
        out, margins, past = [], [], None
        feed = torch.tensor([ids])
        with torch.no_grad():
            for _ in range(new_tokens):
                result = self.model(feed, past_key_values=past, use_cache=True)
                past, logits = result.past_key_values, result.logits[0, -1].numpy()
                top = np.sort(logits)[-2:]
                token = int(logits.argmax())
                if token in end_ids:
                    break
                out.append(token)
                margins.append(float(top[1] - top[0]))
                feed = torch.tensor([[token]])
        return out, margins


def engine_greedy(pipe, ids: list[int], new_tokens: int) -> list[int]:
    pipe.reset()
    return list(pipe.generator.tokens(ids, GenerationConfig(max_new_tokens=new_tokens)))


def assert_same_answer(ours: list[int], theirs: list[int], margins: list[float], device: str, tokenizer):
    if ours == theirs:
        return
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    shown = (f"{device}: the answers part at token {first}: ours {tokenizer.decode(ours)!r}, "
             f"transformers' {tokenizer.decode(theirs)!r}")
    assert device == "simd" and first < len(margins) and margins[first] < SIMD_TIE, shown


class Pipes(dict):
    """A text-generation pipeline of the file per device, made when first asked for."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.first = "simd" if "simd" in engine.available_devices() else "numpy"

    def __contains__(self, device):
        return device in engine.available_devices()

    def __missing__(self, device):
        self[device] = engine.pipeline("text-generation", device=device, weights=self.path, capacity=512)
        return self[device]


def greedy_cases(path, prompt_ids):
    """(the file's Pipes, [(prompt ids, transformers' greedy ids, their margins)]) for the prompts
    that `prompt_ids(pipe)` gives as ids."""
    pipes = Pipes(path)
    pipe, reference = pipes[pipes.first], Reference(path)
    return pipes, [(ids, *reference.greedy(ids, NEW_TOKENS, pipe.generator.eos_ids)) for ids in prompt_ids(pipe)]


@pytest.fixture(scope="module")
def qwen05(qwen05_gguf):
    return greedy_cases(qwen05_gguf, lambda pipe: [pipe.prompt_ids(prompt) for prompt in QWEN_PROMPTS])


DEVICES = ["simd", pytest.param("numpy", marks=pytest.mark.slow)]


def check_greedy(pipes, cases, device):
    if device not in pipes:
        pytest.skip(f"{device} is not available here: {engine.available_devices()}")
    pipe = pipes[device]
    if device == "numpy":
        cases = [(ids, theirs[:NUMPY_TOKENS], margins) for ids, theirs, margins in cases[:1]]
    for ids, theirs, margins in cases:
        assert len(theirs) >= 8, pipe.tokenizer.decode(theirs)          # a real answer, not an instant stop
        ours = engine_greedy(pipe, ids, NEW_TOKENS if device != "numpy" else NUMPY_TOKENS)
        assert_same_answer(ours, theirs, margins, device, pipe.tokenizer)


@pytest.mark.parametrize("device", DEVICES)
def test_qwen_0_5b_chat_greedy_equals_transformers(qwen05, device):
    check_greedy(*qwen05, device)


def test_qwen_0_5b_chat_answer_reads_as_an_answer(qwen05):
    pipes, _ = qwen05
    pipe = pipes[pipes.first]
    pipe.reset()
    answer = pipe.chat("What is 2 + 3? Reply with the number only.", max_new_tokens=8)
    assert answer.strip() == "5" and pipe.stats["stop_reason"] == "eos"


def completion_ids(pipe) -> list[list[int]]:
    ids = [pipe.tokenizer.encode(prompt).ids for prompt in GEMMA_PROMPTS]
    assert all(i[0] == pipe.tokenizer.token_to_id("<bos>") for i in ids)       # Gemma's files add <bos>
    return ids


@pytest.fixture(scope="module")
def gemma(gemma270_gguf):
    return greedy_cases(gemma270_gguf, completion_ids)


@pytest.mark.parametrize("device", DEVICES)
def test_gemma_270m_completion_greedy_equals_transformers(gemma, device):
    check_greedy(*gemma, device)


def test_gemma_is_a_base_model_that_completes_and_refuses_to_chat(gemma):
    pipes, cases = gemma
    pipe = pipes[pipes.first]
    assert pipe.template is None
    with pytest.raises(engine.errors.InputError, match="base model: its file has no chat template"):
        pipe.chat("Hello")
    pipe.reset()
    _, theirs, _ = cases[0]                                             # GEMMA_PROMPTS[0]'s continuation
    assert pipe(GEMMA_PROMPTS[0], max_new_tokens=8) == pipe.tokenizer.decode(theirs[:8])


@pytest.mark.slow
def test_qwen_1_5b_chat_greedy_equals_transformers(qwen15_gguf):
    device = "simd" if "simd" in engine.available_devices() else "numpy"
    pipe = engine.pipeline("text-generation", device=device, weights=qwen15_gguf, capacity=256)
    ids = pipe.prompt_ids(QWEN_PROMPTS[0])
    theirs, margins = Reference(qwen15_gguf).greedy(ids, 16, pipe.generator.eos_ids)
    assert len(theirs) == 16
    assert_same_answer(engine_greedy(pipe, ids, 16), theirs, margins, device, pipe.tokenizer)
