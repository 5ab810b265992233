"""Interrupted work in Chromium: switching backend, clearing the drawing or failing a switch while
a job runs never leaves the worker wedged; every later request gets its answer. (The chat's
Stop, New chat and backend switch mid-answer: tests/web/test_chat_card.py.)"""
from __future__ import annotations

from tests.web.test_page import PREDICTION, draw

BUSY = "import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass\n'done'"
BACKEND = "[data-testid=backend-select]"


def busy(page, seconds: float) -> None:
    """A job of `seconds` in the worker (window.busy resolves to "done" when it ends)."""
    page.evaluate("(src) => { window.busy = window.engine.run(src); }", BUSY.format(seconds=seconds))


def test_switching_backend_while_jobs_run(dev_server, session_factory):
    s = session_factory(dev_server.url)
    page = s.open()
    # during a model call: the switch waits for it, the drawing made meanwhile is answered on numpy
    busy(page, 2)
    page.select_option(BACKEND, "numpy")
    draw(page, "7")
    assert page.evaluate("window.busy") == "done"
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '7' && "
                           "document.querySelector('[data-testid=digit-backend]').textContent === 'numpy'",
                           timeout=30_000)
    assert "backend=numpy" in page.url
    # during a model's download: the photo is classified on the backend chosen meanwhile. The
    # weights are held until the switch is asked for, so a fast download cannot finish first.
    held, released = [], []

    def hold(route):
        (route.continue_() if released else held.append(route))

    s.context.route("**/models/efficientnet_lite0/*.safetensors", hold)
    s.open_card("photo")
    page.click("[data-sample]")
    page.wait_for_function("true")          # lets the route handler run for requests made so far
    page.select_option(BACKEND, "simd")
    released.append(True)
    for route in held:
        route.continue_()
    page.wait_for_function("document.querySelectorAll('[data-testid=image-top5] li').length === 5", timeout=120_000)
    assert page.text_content("[data-testid=image-backend]") == "simd"
    assert s.run("from engine.web import worker\n{t: p.device for t, p in worker._state['pipelines'].items()}") == {
        "digit-classification": "simd", "image-classification": "simd"}
    # a switch that cannot happen: refused, nothing moved, said on the page, the worker answers
    error = page.evaluate("() => window.engineClient.setBackend('cuda').then(() => 'no error', e => e.message)")
    assert "BackendError: backend 'cuda' cannot be used here: unknown device 'cuda'" in error, error
    page.evaluate("""() => { const select = document.querySelector('[data-testid=backend-select]');
        select.add(new Option('cuda', 'cuda')); select.value = 'cuda';
        select.dispatchEvent(new Event('change')); }""")
    page.wait_for_function("document.querySelector('#backend-note').textContent.includes('could not switch to cuda')")
    assert page.input_value(BACKEND) == "simd" and "still on simd" in page.text_content("#backend-note")
    s.open_card("digit")
    page.click("[data-testid=digit-clear]")
    page.locator("[data-testid=digit-canvas]").scroll_into_view_if_needed()
    draw(page, "3")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3' && "
                           "document.querySelector('[data-testid=digit-backend]').textContent === 'simd'",
                           timeout=15_000)
    assert s.console_errors == []


def test_clearing_while_predictions_run_then_drawing_again(dev_server, session_factory):
    """Clear pressed again and again while answers are in flight behind a busy worker: no stale
    answer shows, and the next drawing gets its own."""
    s = session_factory(dev_server.url)
    page = s.open()
    busy(page, 1.5)
    for digit in ("7", "1", "3"):
        draw(page, digit)
        page.wait_for_timeout(200)                      # past the debounce: its request is queued
        page.click("[data-testid=digit-clear]")
    assert page.evaluate("window.busy") == "done"
    page.wait_for_timeout(500)                          # the stale answers have arrived by now
    assert page.text_content(PREDICTION) == "–"
    draw(page, "1")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '1'", timeout=15_000)
    assert s.console_errors == []
