"""How many threads the C kernels run on, with torch's names: `set_num_threads(n)`,
`get_num_threads()`, and `describe()` ("2 threads", "1 thread (why)").

The kernels split their own work (wasm_kernels/pool.c); Python never does. Natively the count is
the C library's pthread pool (`engine_set_threads`), sized when the library loads:
$ENGINE_THREADS, else the machine's physical cores that this process may run on (SMT siblings
count once: two threads on one core share its vector units and gain little on these kernels).
It is one count for the process, as torch's; the numpy backend's BLAS keeps its own.

In Pyodide the kernels of the page's worker run on a pool of Web Workers, which the module that
drives them registers here as a provider (`register(provider)`): an object with
`get_num_threads()`, `set_num_threads(n)` (returns the count in effect) and `describe()`. Without
one (any Pyodide page but ours, and ours when it is not cross-origin isolated) it is 1 thread,
`set_num_threads` changes nothing, and `describe()` / `unavailable_reason()` say why.
"""
from __future__ import annotations

from . import runtime
from .backends.simd.library import default_threads, physical_cores  # noqa: F401  (part of this module's API)
from .errors import InputError

_provider = None


def _check(n, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"{what} must be a positive whole number of threads, got {n!r}")
    return n


def register(provider) -> None:
    """In Pyodide: `provider` runs the kernels' threads from now on (None: back to 1 thread)."""
    global _provider
    _provider = provider


def _native_library():
    from .backends.simd import library
    return None if library.unavailable_reason() is not None else library.get()


def set_num_threads(n: int) -> None:
    """Run the kernels on n threads (the calling one included), as torch.set_num_threads."""
    n = _check(n, "set_num_threads")
    if runtime.in_browser():
        if _provider is not None:
            _provider.set_num_threads(n)
        return
    lib = _native_library()
    if lib is not None:
        lib.engine_set_threads(n)


def get_num_threads() -> int:
    """The threads the kernels run on now, as torch.get_num_threads."""
    if runtime.in_browser():
        return _provider.get_num_threads() if _provider is not None else 1
    lib = _native_library()
    return lib.engine_threads() if lib is not None else 1


def unavailable_reason() -> str | None:
    """None when the kernels can run on more than one thread here, else why not."""
    if runtime.in_browser():
        return None if _provider is not None else _why_one_thread()
    from .backends.simd import library
    reason = library.unavailable_reason()
    return None if reason is None else f"the simd kernels are not available: {reason}"


def _why_one_thread() -> str:
    """In Pyodide without a provider: threads need shared memory, which needs cross-origin
    isolation, and a pool of workers that only the engine's own page starts."""
    if not runtime.cross_origin_isolated():
        return ("this page is not cross-origin isolated (no SharedArrayBuffer), so the kernels run on one "
                "thread (no thread pool)")
    return "the kernels run on one thread: no thread pool was started in this page"


def describe() -> str:
    """"2 threads", or "1 thread (why)" when more are not possible here."""
    if runtime.in_browser() and _provider is not None:
        return _provider.describe()
    n = get_num_threads()
    reason = unavailable_reason()
    text = f"{n} thread{'s' if n != 1 else ''}"
    return f"{text} ({reason})" if reason and n == 1 else text
