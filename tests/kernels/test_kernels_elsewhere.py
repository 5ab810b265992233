"""The simd kernels in a Pyodide page that is not ours: where they are fetched from, why they
cannot be had, and the backend choice that falls back to NumPy saying so.

What runs only in a browser (the fetch itself, WebAssembly.validate) is checked in Chromium by
tests/web/test_kernels_elsewhere.py; here the same functions run their Python paths with
`sys.platform` set to Pyodide's and the library's state restored afterwards."""
from __future__ import annotations

import asyncio
import sys
import warnings

import pytest

from engine import device, runtime
from engine.backends.simd import library


@pytest.fixture
def pyodide_like(monkeypatch, tmp_path):
    """The library as in a Pyodide page without the kernels: nothing loaded, nothing at its path,
    no site known. The loaded native library and the site come back afterwards."""
    monkeypatch.setattr(library, "_library", None)
    monkeypatch.setattr(library, "_reason", None)
    monkeypatch.setattr(library, "_tried", False)
    monkeypatch.setattr(library, "PYODIDE_PATH", str(tmp_path / "engine_kernels.so"))
    monkeypatch.delenv("ENGINE_SIMD_LIBRARY", raising=False)
    monkeypatch.delenv("ENGINE_SIMD_FLAVOUR", raising=False)
    monkeypatch.setitem(runtime._site, "url", None)
    monkeypatch.setattr(sys, "platform", "emscripten")
    yield


def test_kernel_urls_try_relaxed_then_simd(monkeypatch):
    monkeypatch.delenv("ENGINE_SIMD_FLAVOUR", raising=False)
    assert library.kernel_urls("https://example.org/site") == [
        ("relaxed", "https://example.org/site/kernels/engine_kernels.relaxed.wasm"),
        ("simd", "https://example.org/site/kernels/engine_kernels.simd.wasm")]
    monkeypatch.setenv("ENGINE_SIMD_FLAVOUR", "simd")            # a forced build: only that one
    assert library.kernel_urls("http://127.0.0.1:8000/") == [
        ("simd", "http://127.0.0.1:8000/kernels/engine_kernels.simd.wasm")]
    monkeypatch.setenv("ENGINE_SIMD_FLAVOUR", "avx")
    with pytest.raises(ValueError, match="ENGINE_SIMD_FLAVOUR"):
        library.kernel_urls("http://127.0.0.1:8000/")


def test_known_site(monkeypatch):
    monkeypatch.setitem(runtime._site, "url", None)
    assert library.known_site() is None
    runtime.set_site("http://127.0.0.1:8000")
    assert library.known_site() == "http://127.0.0.1:8000/"


def test_without_a_site_the_reason_says_to_pass_one(pyodide_like):
    reason = device.unavailable_reason("simd")
    assert "no site is known" in reason and "site=URL" in reason
    assert asyncio.run(library.ensure_kernels()) == reason
    # not remembered: a site given later is tried (here: the reason is asked for again)
    assert library._tried is False
    assert "simd" not in device.available()


def test_numpy_fallback_warns_with_the_reason(pyodide_like, monkeypatch):
    """In Pyodide NumPy is the last resort: picking it says why simd (and webgpu) could not be."""
    monkeypatch.setitem(device.PREFERENCE, "emscripten", ["simd", "numpy"])     # no GPU probing here
    with pytest.warns(RuntimeWarning, match=r"running on numpy.*simd: .*no site is known"):
        assert device.best_available() == "numpy"
    with pytest.warns(RuntimeWarning, match=r"simd: .*site=URL"):
        assert device.best_for_pipeline("simd") == "numpy"
    assert device.best_for_pipeline(None) is None                # tasks that pick for themselves
    with pytest.warns(RuntimeWarning, match=r"running on numpy.*simd: "):
        assert device.best_for_quantized() == "numpy"


def test_no_warning_when_simd_loads(monkeypatch):
    """Natively (kernels compiled here) and in a page where they load, the choice is silent."""
    if library.unavailable_reason() is not None:
        pytest.skip(f"the native kernels do not build here: {library.unavailable_reason()}")
    monkeypatch.setitem(device.PREFERENCE, "native", ["simd", "numpy"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert device.best_available() == "simd"
        assert device.best_for_quantized() == "simd"
        assert device.best_for_pipeline("simd") == "simd"
    assert asyncio.run(library.ensure_kernels()) is None          # natively: already loaded, nothing fetched


def test_threads_in_a_page_without_a_pool(pyodide_like, monkeypatch):
    """A Pyodide page with no pool registered (any page but ours): one thread, and why."""
    from engine import threads
    monkeypatch.setattr(threads, "_provider", None)
    assert threads.get_num_threads() == 1
    threads.set_num_threads(4)                                   # nothing to resize: no error
    assert threads.get_num_threads() == 1
    assert threads.describe().startswith("1 thread (") and "cross-origin isolated" in threads.describe()
