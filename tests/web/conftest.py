"""Browser tests: build the site once, serve it (dev server and nginx), drive Debian's Chromium.

Chromium, nginx and Playwright are installed by scripts/test.sh. When one is missing the
tests skip saying why, except under CI (CI=true), where a missing tool is a failure.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.helpers import need, need_import, shared_site

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
BASE_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--no-first-run", "--disable-quic"]
# WebGPU on a machine without a GPU: SwiftShader's Vulkan (a CPU emulation, which the page never
# picks by itself; tests ask for it with ?backend=webgpu). Without these, no adapter is found.
CHROMIUM_ARGS = BASE_ARGS + ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-vulkan=swiftshader",
                             "--use-webgpu-adapter=swiftshader", "--disable-vulkan-surface"]


@pytest.fixture(scope="session")
def site() -> Path:
    """The built site with the benchmarks' peers (buildtools/peers.py: llama.cpp and ONNX Runtime in
    WebAssembly) for the bench page: the run's one build (tests/helpers.shared_site)."""
    return shared_site()[0]


class Served:
    def __init__(self, url: str, root: Path, stop):
        self.url, self.root, self.stop = url, root, stop


class _WithoutCors:
    """Mixed into the dev server's handler: drops every Access-Control-* header it sends."""

    def send_header(self, name: str, value: str) -> None:
        if not name.lower().startswith("access-control-"):
            super().send_header(name, value)


def start_dev_server(root: Path, isolation: bool = True, cors: bool = True) -> Served:
    """The dev server on a free port. cors=False: every Access-Control-* header is dropped, as a
    host that never heard of CORS would (a fetch from another origin then fails in the browser)."""
    from buildtools.devserver import make_server
    server = make_server(root, port=0, isolation=isolation)
    if not cors:
        server.RequestHandlerClass = type("NoCorsHandler", (_WithoutCors, server.RequestHandlerClass), {})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()
    return Served(f"http://127.0.0.1:{server.server_port}/", root, stop)


def start_nginx(root: Path, tmp: Path) -> Served:
    from buildtools.nginx import nginx_command, render_nginx_conf
    need(shutil.which("nginx") is not None or Path("/usr/sbin/nginx").exists(), "nginx is not installed")
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp.mkdir(parents=True, exist_ok=True)
    conf = tmp / "nginx.conf"
    # pytest's temp folders are readable by root only: let the workers run as root too
    conf.write_text(render_nginx_conf(root, port, tmp, user="root" if os.geteuid() == 0 else None))
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = subprocess.Popen(nginx_command(conf, tmp, binary), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    import time
    import urllib.request
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=1).read()
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {proc.stdout.read().decode()}")
            time.sleep(0.05)

    def stop():
        proc.terminate()
        proc.wait(10)
    return Served(f"http://127.0.0.1:{port}/", root, stop)


@pytest.fixture(scope="session")
def dev_server(site):
    served = start_dev_server(site)
    yield served
    served.stop()


EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def other_origin():
    """examples/ on a second origin (another port): a plain third-party page, served without the
    cross-origin isolation headers, as most hosts serve pages. Its pages load the engine from the
    site origin (dev_server or nginx_server) named in their URL."""
    served = start_dev_server(EXAMPLES, isolation=False)
    yield served
    served.stop()


@pytest.fixture
def serve_folder():
    """A factory for more origins: serve_folder(root, isolation=False, cors=True) -> Served on a
    fresh port, stopped when the test ends. cors=False makes a host that sends no CORS headers."""
    started = []

    def serve(root: Path = EXAMPLES, isolation: bool = False, cors: bool = True) -> Served:
        served = start_dev_server(Path(root), isolation=isolation, cors=cors)
        started.append(served)
        return served
    yield serve
    for served in started:
        served.stop()


@pytest.fixture(scope="session")
def nginx_server(site, tmp_path_factory):
    served = start_nginx(site, tmp_path_factory.mktemp("nginx"))
    yield served
    served.stop()


@pytest.fixture(params=["dev", "nginx"])
def server(request):
    """Each test using this runs against both static servers."""
    return request.getfixturevalue(f"{request.param}_server")


@pytest.fixture(scope="session")
def playwright_driver():
    need(Path(CHROMIUM).exists(), f"Debian chromium is not installed at {CHROMIUM}")
    sync_playwright = need_import("playwright.sync_api", "the browser tests drive Chromium with it").sync_playwright
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_driver):
    b = playwright_driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield b
    b.close()


@pytest.fixture
def browser_without_gpu(playwright_driver):
    """Chromium with no WebGPU adapter (as on most machines without a GPU)."""
    b = playwright_driver.chromium.launch(executable_path=CHROMIUM, args=BASE_ARGS)
    yield b
    b.close()


def open_card(page, tab: str):
    """Click a card's tab (its id in the URL: digit, photo, sentences, chat) and wait until it shows."""
    page.click(f"[role=tab][data-tab={tab}]")
    page.wait_for_selector(f"main > section[data-tab={tab}]:not([hidden])")
    return page


class Session:
    """A fresh browser context (empty caches) that records what the page does."""

    def __init__(self, browser, base_url: str, viewport=None):
        self.context = browser.new_context(viewport=viewport or {"width": 1200, "height": 900})
        self.page = self.context.new_page()
        self.base_url = base_url
        self.console_errors: list[str] = []
        self.responses: list = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.console_errors.append(m.text))
        self.page.on("pageerror", lambda e: self.console_errors.append(f"page error: {e}"))
        self.context.on("request", lambda r: self.requests.append(r.url))
        self.context.on("response", lambda r: self.responses.append(r))

    def open(self, path: str = "index.html", ready: bool = True, timeout: float = 90_000):
        self.page.goto(self.base_url + path)
        if ready:
            self.wait_ready(timeout)
        return self.page

    def open_card(self, tab: str):
        """Open a card with its tab, as a person would (its model starts loading then)."""
        return open_card(self.page, tab)

    def wait_ready(self, timeout: float = 90_000):
        self.page.wait_for_function(
            "document.body.dataset.ready === 'true' || "
            "document.querySelector('[data-testid=engine-status]')?.textContent === 'error'", timeout=timeout)
        status = self.page.text_content("[data-testid=engine-status]")
        assert status == "ready", f"engine status {status!r}: {self.page.text_content('#error-text')}"

    def run(self, source: str):
        """window.engine.run(source) in the inference worker."""
        return self.page.evaluate("(src) => window.engine.run(src)", source)

    def foreign_requests(self) -> list[str]:
        origin = urlsplit(self.base_url).netloc
        return [u for u in self.requests if not u.startswith(("data:", "blob:")) and urlsplit(u).netloc != origin]

    def close(self):
        self.context.close()


@pytest.fixture
def session_factory(browser):
    made = []

    def make(base_url: str, **kw) -> Session:
        s = Session(browser, base_url, **kw)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


@pytest.fixture(scope="module")
def page_session(browser, dev_server):
    """Our page, opened once for a test module whose tests only run code in its worker."""
    s = Session(browser, dev_server.url)
    s.open()
    yield s
    s.close()
