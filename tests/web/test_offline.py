"""The site offline: after a first visit the service worker (web/sw-core.js) keeps the page and its
runtime, the loader keeps the weights, and the page works with the host gone and the browser offline."""
from __future__ import annotations

from tests.web.conftest import start_dev_server
from tests.web.test_image_card import browser_top5
from tests.web.test_page import PREDICTION, draw


def test_reload_draw_and_classify_offline(site, session_factory):
    host = start_dev_server(site)                 # its own host: this test stops it
    try:
        s = session_factory(host.url)
        page = s.open()
        page.click("[data-sample='chelsea.png']")               # caches the photo model's weights
        assert "cat" in browser_top5(page)[0][0]
        # the first version of the service worker claims this page once it has kept every file
        page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=120_000)
    finally:
        host.stop()
    s.context.set_offline(True)
    s.requests.clear()
    page.reload()
    s.wait_ready()
    assert page.evaluate("navigator.onLine") is False
    page.locator("[data-testid=digit-canvas]").scroll_into_view_if_needed()    # the reload kept the scroll
    draw(page, "3")
    page.wait_for_function(f"document.querySelector('{PREDICTION}').textContent === '3'", timeout=30_000)
    page.evaluate("document.querySelector('[data-testid=image-top5]').innerHTML = ''")
    page.click("[data-sample='chelsea.png']")
    assert "cat" in browser_top5(page)[0][0]
    assert s.console_errors == [], s.console_errors
