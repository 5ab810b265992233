"""The chat card's models in headless Chromium: the picker loads another registry model only
when chosen (dropping the one before in the worker) and answers as the engine does natively;
a base model (no chat template) turns the card into a completion box; a GGUF opened by URL from
another origin is described from its header, then loads by Range; one the model code cannot
run is refused from its header, before its weights download, and the page keeps working; with
Qwen2.5 the card's tool demo runs the calculator the model calls.
(The 1.5B model is never loaded here: too large for a test.)"""
from __future__ import annotations

import os
import shutil

import pytest

from tests.tiny_gguf import write_gguf
from tests.web.test_chat_card import PARIS, ask

QWEN, GEMMA, SMOL = "Qwen2.5-Coder-0.5B-Instruct", "gemma-3-270m", "SmolLM2-135M-Instruct"
QUESTION, PROMPT, TOKENS = "What is the capital of France?", "The capital of France is", 12
PICKER, LOADED = "[data-testid=chat-model]", "[data-testid=chat-model]:not([disabled])[data-loaded='{}']"


@pytest.fixture(scope="module")
def native_qwen(qwen05_gguf) -> str:
    """Qwen's greedy answer natively, as the card asks: with its default system message (the card
    fills it in)."""
    import engine
    qwen = engine.pipeline("text-generation", model=str(qwen05_gguf), capacity=256)
    system = qwen.template.default_system
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": QUESTION}]
    return qwen.chat(messages, max_new_tokens=TOKENS)


@pytest.fixture(scope="module")
def native_gemma(gemma270_gguf) -> str:
    """Gemma's greedy completion natively."""
    import engine
    return engine.pipeline("text-generation", model=str(gemma270_gguf), capacity=256)(PROMPT, max_new_tokens=TOKENS)


def set_max_tokens(page, n: int) -> None:
    page.evaluate("document.querySelector('.chat-settings').open = true")
    page.fill("[data-testid=chat-max-tokens]", str(n))


def complete(page, prompt: str, timeout: float = 300_000) -> str:
    """Type a prompt into the completion box, press Enter, wait for the continuation; its text."""
    page.fill("[data-testid=chat-input]", prompt)
    page.press("[data-testid=chat-input]", "Enter")
    page.wait_for_function("document.querySelector('[data-testid=chat-send]').disabled", timeout=10_000)
    page.wait_for_function("!document.querySelector('[data-testid=chat-send]').disabled", timeout=timeout)
    assert page.is_hidden("[data-testid=chat-error]"), page.text_content("[data-testid=chat-error]")
    return page.text_content("[data-testid=chat-continuation]")


def choose(page, model: str, timeout: float = 300_000) -> None:
    page.select_option(PICKER, model)
    page.wait_for_selector(LOADED.format(model), state="attached", timeout=timeout)


def pipelines(s) -> list:
    """The worker's loaded pipelines, and how many text-generation pipelines are still alive."""
    return s.run("import gc\nfrom engine.web import worker\n"
                 "[list(worker._state['pipelines']), "
                 "sum(type(o).__name__ == 'TextGeneration' for o in gc.get_objects())]")


@pytest.mark.slow
def test_pick_a_chat_model_and_a_base_model(dev_server, session_factory, native_qwen, native_gemma):
    s = session_factory(dev_server.url)
    page = s.open("index.html#chat")
    page.wait_for_selector(LOADED.format(SMOL), state="attached", timeout=120_000)
    page.wait_for_function(f"document.querySelector('{PICKER}').options.length === 4 && "
                           f"[...document.querySelector('{PICKER}').options].every((o) => / [MG]B /.test(o.text))")
    options = page.eval_on_selector(PICKER, "(el) => [...el.options].map((o) => [o.value, o.text])")
    assert [value for value, _ in options] == [SMOL, QWEN, "Qwen2.5-Coder-1.5B-Instruct", GEMMA]
    assert "98 MB · Apache-2.0" in options[0][1] and "491 MB · Apache-2.0" in options[1][1]
    assert "1.1 GB" in options[2][1] and "Gemma Terms of Use" in options[3][1]
    assert not [r for r in s.requests if "/models/Qwen" in r and "manifest" not in r]    # not chosen yet
    assert not [r for r in s.requests if "/models/gemma" in r and "manifest" not in r]

    set_max_tokens(page, TOKENS)
    choose(page, QWEN)
    assert page.text_content("#chat-card [data-model]") == QWEN
    assert page.input_value("[data-testid=chat-system]").startswith("You are Qwen")
    assert ask(page, QUESTION) == native_qwen
    assert "tokens/s" in page.eval_on_selector(PICKER, "(el) => el.selectedOptions[0].text")
    assert int(page.get_attribute("[data-testid=chat-log]", "data-heap-bytes")) > 500e6
    assert pipelines(s) == [["text-generation"], 1]                  # SmolLM2's pipeline is gone

    # the card's tool demo: the model calls the calculator, the page runs it, its result goes back
    page.click("[data-testid=chat-new]")                              # a fresh conversation
    page.wait_for_function("document.querySelectorAll('[data-testid=chat-assistant]').length === 0")
    page.check("[data-testid=chat-tools]")
    set_max_tokens(page, 60)
    ask(page, "What is 12.5 plus 30?")
    calls, results = page.locator("[data-testid=chat-tool-call]"), page.locator("[data-testid=chat-tool]")
    assert calls.count() >= 1 and calls.first.text_content().startswith("calculator("), calls.all_text_contents()
    assert results.count() == calls.count() and results.first.text_content() == "42.5"
    page.uncheck("[data-testid=chat-tools]")
    set_max_tokens(page, TOKENS)

    choose(page, GEMMA)
    assert page.is_visible("[data-testid=chat-mode]") and page.is_visible("[data-testid=chat-completion]")
    assert page.eval_on_selector("[data-testid=chat-log]", "(el) => el.hidden")
    assert "no chat template" in page.text_content("[data-testid=chat-mode]")
    assert complete(page, PROMPT) == native_gemma
    assert pipelines(s) == [["text-generation"], 1]                  # Qwen's is gone too
    assert not [r for r in s.requests if "1.5B" in r and "manifest" not in r]
    assert s.foreign_requests() == [] and s.console_errors == []


def test_a_gguf_by_url_from_another_origin(dev_server, session_factory, serve_folder, gemma270_gguf, native_gemma,
                                           tmp_path):
    folder = tmp_path / "other"
    folder.mkdir()
    try:
        os.link(gemma270_gguf, folder / "gemma.gguf")                # the 253 MB without a copy
    except OSError:
        shutil.copy(gemma270_gguf, folder / "gemma.gguf")
    bert = write_gguf(folder / "tiny-bert.gguf", "bert")             # 4 MiB of weights after a 192-byte header
    other = serve_folder(folder)                                     # CORS and Range, another port
    s = session_factory(dev_server.url)
    page = s.open("index.html#chat")
    page.wait_for_selector(LOADED.format(SMOL), state="attached", timeout=120_000)
    requests = []
    s.context.on("request", lambda request: requests.append(request))

    def ranges(name: str) -> list:
        return [r.all_headers().get("range") for r in requests if r.url.endswith(name) and r.method == "GET"]

    # refused from its header: no request past the first window (64 KiB of a 4 MiB file)
    page.fill("[data-testid=chat-url]", other.url + "tiny-bert.gguf")
    page.click("[data-testid=chat-url-open]")
    page.wait_for_selector("[data-testid=chat-url-info][data-refused=true]", timeout=60_000)
    error = page.text_content("[data-testid=chat-error]")
    assert "general.architecture is 'bert'" in error and "supported: llama" in error and "tiny-bert.gguf" in error
    assert page.get_attribute("[data-testid=chat-url-info]", "data-architecture") == "bert"
    asked = ranges("tiny-bert.gguf")
    assert asked == ["bytes=0-65535"] and bert.stat().st_size > 4 << 20, asked

    # a supported one: described, then loaded by Range, then it completes (a base model)
    set_max_tokens(page, TOKENS)
    page.fill("[data-testid=chat-url]", other.url + "gemma.gguf")
    page.click("[data-testid=chat-url-open]")
    page.wait_for_selector(LOADED.format(other.url + "gemma.gguf"), state="attached", timeout=300_000)
    info = page.text_content("[data-testid=chat-url-info]")
    assert "architecture gemma3" in info and "253 MB" in info and "no chat template" in info
    assert complete(page, PROMPT) == native_gemma
    gemma = ranges("gemma.gguf")
    assert len(gemma) > 2 and all(r and r.startswith("bytes=") for r in gemma)     # by Range, never whole

    # the registry's model again: the page still chats
    choose(page, SMOL)
    assert not page.eval_on_selector("[data-testid=chat-log]", "(el) => el.hidden")     # chatting again
    assert page.is_hidden("[data-testid=chat-mode]") and page.is_hidden("[data-testid=chat-completion]")
    page.click("[data-testid=chat-new]")
    assert ask(page, QUESTION) == PARIS
    assert pipelines(s) == [["text-generation"], 1]
    assert s.console_errors == []
