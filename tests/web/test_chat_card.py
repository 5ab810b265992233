"""The Chat card in headless Chromium, used like a person: the model downloads when the card
opens, the answer streams in piece by piece while the page stays responsive, Stop and New
chat work mid-answer, a second turn reuses the conversation, a reload downloads no weights; and
the greedy answer in the worker on every backend equals the native one."""
from __future__ import annotations

import time

INPUT = "[data-testid=chat-input]"
ANSWERS = "[data-testid=chat-assistant]"
MODEL = "/models/SmolLM2-135M-Instruct/"
PARIS = "The capital of France is Paris."


def ask(page, text: str, timeout: float = 300_000) -> str:
    """Type a message, press Enter, wait for the answer to finish; its text."""
    before = page.locator(ANSWERS).count()
    page.fill(INPUT, text)
    page.press(INPUT, "Enter")
    page.wait_for_function(f"document.querySelectorAll('{ANSWERS}').length === {before + 1} && "
                           f"!document.querySelector('[data-testid=chat-send]').disabled", timeout=timeout)
    return page.locator(ANSWERS).nth(before).text_content()


def count_pieces(page) -> None:
    page.evaluate("""() => { const client = window.engineClient, chat = client.chat.bind(client);
        window.pieces = [];
        client.chat = (messages, options, onPiece) =>
            chat(messages, options, (text) => { window.pieces.push([performance.now(), text]); onPiece(text); }); }""")


def test_chat_like_a_person(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open()
    assert not [r for r in s.responses if MODEL in r.url], "the model loads only when its card opens"
    s.open_card("chat")
    count_pieces(page)
    assert ask(page, "What is the capital of France?") == PARIS
    pieces = page.evaluate("window.pieces")
    assert "".join(p[1] for p in pieces) == PARIS and len(pieces) >= 5, pieces      # streamed, not all at once
    assert [r for r in s.responses if MODEL in r.url and r.request.method == "GET"], "the weights came by now"
    assert float(page.text_content("[data-testid=chat-ttft]")) > 0
    assert float(page.text_content("[data-testid=chat-tps]")) > 0
    assert page.text_content("[data-testid=chat-tokens]") == "7"
    assert page.text_content("[data-testid=chat-backend]") == "simd"
    assert page.input_value("[data-testid=chat-system]").startswith("You are a helpful AI assistant named SmolLM")
    assert page.is_hidden("#chat-progress") and page.is_hidden("[data-testid=chat-error]")
    heap = int(page.get_attribute("[data-testid=chat-log]", "data-heap-bytes"))
    print(f"\nworker wasm heap after the first answer: {heap / 2**20:.0f} MiB")

    # a second turn: the earlier one is in the worker's cache (only the new tokens are fed)
    assert "Rome" in ask(page, "And of Italy?")
    reused = s.run("from engine.web import worker\nworker.pipeline('text-generation').stats['reused_tokens']")
    assert reused >= 44

    # Stop mid-answer; the page answers while the worker generates; the chat stays usable
    page.click(".chat-settings summary")                     # open the settings
    page.fill("[data-testid=chat-max-tokens]", "300")
    page.fill(INPUT, "Write a long story about a dragon who learns to cook.")
    page.press(INPUT, "Enter")
    page.wait_for_function("window.pieces.length > 3 && "
                           "document.querySelector('[data-testid=chat-assistant]:last-child')?.textContent.length > 0",
                           timeout=120_000)
    start = time.perf_counter()
    page.evaluate("1 + 1")
    assert time.perf_counter() - start < 0.5, "the page must stay responsive while the model generates"
    page.click("[data-testid=chat-stop]")
    page.wait_for_function("!document.querySelector('[data-testid=chat-send]').disabled", timeout=30_000)
    stopped = page.locator(ANSWERS).last
    assert "stopped" in stopped.get_attribute("class") and len(stopped.text_content()) > 0
    assert int(page.text_content("[data-testid=chat-tokens]")) < 300

    page.click("[data-testid=chat-new]")
    page.wait_for_function(f"document.querySelectorAll('{ANSWERS}').length === 0")
    page.fill("[data-testid=chat-max-tokens]", "64")
    assert ask(page, "What is the capital of France?") == PARIS                   # afresh, same answer
    assert s.run("from engine.web import worker\nworker.pipeline('text-generation').stats['reused_tokens']") < 37

    # the context length of the settings: a new, empty cache of that many tokens, a new chat
    capacity = "from engine.web import worker\nworker.pipeline('text-generation').generator.cache.capacity"
    assert s.run(capacity) == 4096 and page.text_content("[data-testid=chat-capacity]") == "4096"
    page.fill("[data-testid=chat-context]", "512")
    page.dispatch_event("[data-testid=chat-context]", "change")
    page.wait_for_function("document.querySelector('[data-testid=chat-capacity]').textContent === '512'")
    assert s.run(capacity) == 512 and page.locator(ANSWERS).count() == 0
    assert ask(page, "What is the capital of France?") == PARIS
    assert s.foreign_requests() == [] and s.console_errors == []


def test_reload_downloads_no_weight_bytes_and_every_backend_answers(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open("index.html#chat")
    assert ask(page, "What is the capital of France?") == PARIS
    after = []
    s.context.on("request", lambda request: after.append(request))
    s.responses.clear()
    page.reload()
    s.wait_ready()
    assert ask(page, "What is the capital of France?") == PARIS
    ranged = [r.url for r in after if MODEL in r.url and "range" in r.all_headers()]
    gguf = [r.url for r in s.responses if MODEL in r.url and ".gguf" in r.url]
    assert ranged == [] and gguf == [], (ranged, gguf)                 # all from the Cache API
    answers = s.run("""
import engine
from engine.web import worker
pipe = worker.pipeline("text-generation")
out = {}
for device in engine.available_devices():
    pipe.to(device)
    out[device] = pipe.chat("What is the capital of France?", max_new_tokens=12)
pipe.to(worker._state["device"])
out
""")
    assert answers == {device: PARIS for device in ("numpy", "simd", "webgpu")}, answers
    assert s.console_errors == []


def test_interrupting_the_chat_never_wedges_it(dev_server, session_factory):
    """Stop while the model downloads (no answer is generated), New chat mid-answer (the old
    conversation does not leak into the new one), a backend switch mid-answer (it waits for the
    answer, which Stop ends): after each, the next message is answered as in a fresh chat."""
    s = session_factory(dev_server.url)
    page = s.open()
    s.open_card("chat")                                         # the model starts loading
    page.fill(INPUT, "What is the capital of France?")
    page.press(INPUT, "Enter")
    page.click("[data-testid=chat-stop]")                       # the 98 MB are still on their way
    page.wait_for_function("!document.querySelector('[data-testid=chat-send]').disabled", timeout=120_000)
    stopped = page.locator(ANSWERS).last
    assert "stopped" in stopped.get_attribute("class") and stopped.text_content() == ""
    assert "new_tokens" not in s.run("from engine.web import worker\nworker.pipeline('text-generation').stats")

    def stats():
        return s.run("from engine.web import worker\nworker.pipeline('text-generation').stats")
    assert ask(page, "What is the capital of France?") == PARIS
    fresh = stats()["prompt_tokens"]

    page.click(".chat-settings summary")
    page.fill("[data-testid=chat-max-tokens]", "300")
    for interruption in ("new chat", "backend"):
        count_pieces(page)
        page.fill(INPUT, "Write a long story about a dragon who learns to cook.")
        page.press(INPUT, "Enter")
        page.wait_for_function("window.pieces.length > 3", timeout=120_000)
        if interruption == "new chat":
            page.click("[data-testid=chat-new]")
        else:
            page.select_option("[data-testid=backend-select]", "numpy")     # waits for the answer...
            page.click("[data-testid=chat-stop]")                           # ...which Stop ends
            page.wait_for_function("location.search.includes('backend=numpy')", timeout=60_000)   # moved
            page.select_option("[data-testid=backend-select]", "simd")
            page.wait_for_function("location.search.includes('backend=simd')", timeout=60_000)
            assert s.run("from engine.web import worker\nworker.pipeline('text-generation').device") == "simd"
            page.click("[data-testid=chat-new]")
        # New chat empties the log in its own task: a message typed before that would be cleared too
        page.wait_for_function(f"document.querySelectorAll('{ANSWERS}').length === 0")
        page.wait_for_function("!document.querySelector('[data-testid=chat-send]').disabled", timeout=60_000)
        assert ask(page, "What is the capital of France?") == PARIS
        assert stats()["prompt_tokens"] == fresh, interruption       # nothing of the story came along
        assert page.locator("[data-testid=chat-user]").count() == 1
        assert int(page.text_content("[data-testid=chat-tokens]")) == 7
    assert s.console_errors == []
