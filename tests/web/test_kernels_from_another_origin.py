"""In Chromium: the simd kernels fetched from another origin by the engine's own fetch
(engine.backends.simd.library.fetch_kernels), as a page that is not ours gets them: through the
dev server's CORS headers, from a page that stays cross-origin isolated; a host that sends no
CORS headers gets a reason naming the URL and CORS. (Pyodide under Node.js runs the whole
ensure_kernels path: tests/kernels/test_kernels_fetched.py; a foreign page end to end:
test_library_page.py.)"""
from __future__ import annotations


CHECK = """
import os
import js
from engine.backends.simd import library
flavour = await library.fetch_kernels({other!r}, "/tmp/other.so")
lib = library.Library("/tmp/other.so")
try:
    await library.fetch_kernels({no_cors!r}, "/tmp/no_cors.so")
    failed = None
except Exception as e:
    failed = f"{{type(e).__name__}}: {{e}}"
[flavour, lib.flavour, lib.engine_kernels_abi() == library.ABI, failed, os.path.exists("/tmp/no_cors.so"),
 js.crossOriginIsolated is True]
"""


def test_kernels_from_another_origin(site, dev_server, serve_folder, session_factory):
    other = serve_folder(site, isolation=False)                 # the same site on another port
    no_cors = serve_folder(site, isolation=False, cors=False)
    s = session_factory(dev_server.url)
    s.open()
    flavour, loaded, abi_ok, failed, written, isolated = s.run(CHECK.format(other=other.url, no_cors=no_cors.url))
    assert flavour == loaded == "relaxed" and abi_ok           # Chromium validates relaxed SIMD
    assert failed.startswith("FetchError: ") and f"{no_cors.url}kernels/engine_kernels.relaxed.wasm" in failed
    assert "CORS" in failed and written is False
    assert isolated                                             # fetching from elsewhere keeps the page isolated
    assert s.console_errors == [] or all("CORS" in e or "Failed to load" in e for e in s.console_errors)
