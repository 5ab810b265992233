"""Find and load the C kernels of wasm_kernels/ through ctypes, once per process, when the simd
backend is chosen (engine.device asks `unavailable_reason()`), never from inside an op: `get()`
only hands out what is loaded.

Natively the library is compiled on first use with the system C compiler (cached by
source hash in .cache/native/, see wasm_kernels/build.py). In Pyodide it is a WebAssembly side
module in the file system at PYODIDE_PATH: our page's worker writes it there before Python asks
(or anywhere, then calls `load_library(path)`). In any other Pyodide page this module fetches it,
through engine.runtime's transport, from the site the engine came from
(`engine.runtime.known_site()`, or the `site` given to `ensure_kernels`):
`<site>/kernels/engine_kernels.relaxed.wasm` when the browser validates relaxed SIMD, else
the plain SIMD128 build. `await ensure_kernels(site)` does that in any page; choosing the backend
does it through JSPI (engine.runtime.wait) where the runtime can block.
`ctypes.CDLL` loads both kinds the same way.

Settings (environment variables, read when the library is first needed):
  ENGINE_SIMD_LIBRARY  path of an already built library (native .so, or the .wasm in Pyodide)
  ENGINE_SIMD_FLAVOUR  "simd" (default) or "relaxed": which WebAssembly build to fetch
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
from pathlib import Path

from ... import runtime

ABI = 9                                  # ENGINE_KERNELS_ABI in wasm_kernels/common.h
PYODIDE_PATH = "/lib/engine_kernels.so"
FLAVOURS = {"simd": "engine_kernels.simd.wasm", "relaxed": "engine_kernels.relaxed.wasm"}
SOURCES = Path(__file__).resolve().parents[3] / "wasm_kernels"
THREADS = "ENGINE_THREADS"               # how many threads the native kernels start on (engine.threads)

# the C types of the signatures below
_ptr, _size, _ssize, _int, _float = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_float
POINTER, FLOAT = _ptr, _float
# name -> (restype, argtypes): the C signatures of wasm_kernels/README.md
SIGNATURES = {
    "gemm_f32": (_size, [_size, _size, _size, _size, _ptr, _ssize, _ssize, _ssize, _ptr, _ssize, _ssize, _ssize,
                         _ptr, _ssize, _ssize, _ptr, _ssize, _ssize, _int, _ptr, _size]),
    "gemm_f16w_f32": (_size, [_size, _size, _size, _size, _ptr, _ssize, _ssize, _ssize, _ptr, _ssize, _ssize, _ssize,
                              _ptr, _ssize, _ssize, _ptr, _ssize, _ssize, _int, _ptr, _size]),
    "im2col_f32": (None, [_size, _size, _size, _ptr, _size, _size, _size, _size, _size, _size, _size, _size,
                          _size, _size, _ptr]),
    "conv2d_f32": (_size, [_size, _size, _size, _size, _ptr, _size, _size, _size, _ptr, _size, _size, _size,
                           _size, _size, _size, _size, _size, _size, _ptr, _int, _ptr, _ptr, _size]),
    "depthwise_conv2d_f32": (_size, [_size, _size, _size, _size, _ptr, _size, _size, _ptr, _size, _size, _size,
                                     _size, _size, _size, _size, _size, _ptr, _int, _ptr, _ptr, _size]),
    "softmax_f32": (None, [_size, _size, _size, _ptr, _ssize, _ssize, _ssize, _ptr]),
    "layer_norm_f32": (None, [_size, _size, _ptr, _ssize, _ptr, _ptr, _ptr, _float]),
    "rms_norm_f32": (None, [_size, _size, _ptr, _ssize, _ptr, _ptr, _float]),
    "add_layer_norm_f32": (None, [_size, _size, _ptr, _ssize, _ptr, _ptr, _ssize, _ptr, _ptr, _ptr, _float]),
    "scale_shift_f32": (None, [_size, _size, _size, _ptr, _ptr, _ptr, _int, _ptr]),
    "clamp_f32": (None, [_size, _ptr, _float, _float, _ptr]),
    "activation_f32": (None, [_size, _ptr, _int, _ptr]),
    "rope_f32": (None, [_size, _size, _size, _ptr, _ssize, _ssize, _ptr, _ptr, _ptr]),
    "silu_mul_f32": (None, [_size, _size, _ptr, _ssize, _ptr, _ssize, _ptr]),
    "attention_f32": (_size, [_size] * 7 + [_ptr, _ssize, _ssize, _ssize, _ssize] * 3 + [_ptr, _int, _ssize,
                              _ssize, _ssize, _ssize, _int, _float, _ptr, _ptr, _size]),
    "linear_q_f32": (_size, [_int, _size, _size, _size, _ptr, _ssize, _ptr, _ptr, _ptr, _ptr, _size]),
    "embedding_q_f32": (_size, [_int, _size, _ptr, _size, _size, _ptr, _ptr]),
    "index_copy_f32": (_size, [_size, _size, _size, _ptr, _ssize, _ssize, _ptr, _size, _ptr, _ssize, _ssize]),
    "f16_to_f32": (None, [_size, _ptr, _ptr]),
    "bf16_to_f32": (None, [_size, _ptr, _ptr]),
    "f32_to_bf16": (None, [_size, _ptr, _ptr]),
    "add_f32": (None, [_size, _ptr, _ptr, _ptr]),
    "engine_kernels_abi": (_int, []),
    "engine_kernels_features": (_int, []),
    "engine_threads": (_int, []),
    "engine_set_threads": (_int, [_int]),
    "engine_run_program": (_size, [_ptr, _size]),
}
# the exports a program (wasm_kernels/program.c) calls, by id: their place in this tuple
PROGRAM = tuple(name for name in SIGNATURES if not name.startswith("engine_"))
# exports whose last two arguments are a scratch buffer and its size in floats: they return 0,
# or the size they need (and then write nothing)
SCRATCH = frozenset({"gemm_f32", "gemm_f16w_f32", "conv2d_f32", "depthwise_conv2d_f32", "attention_f32", "linear_q_f32"})


# On wasm32 every integer and pointer argument is one 32-bit word, which is what ctypes
# passes for a Python int (or None) when a function has no argtypes; and argtypes cost
# ~35 us per call in Pyodide against ~1.4 us without. So there only the float arguments
# are converted by hand; natively (64-bit pointers) argtypes do the conversion.
WORD_ARGUMENTS = all(ctypes.sizeof(t) == 4 for t in (_ptr, _size, _ssize, _int))


def _bind(fn, restype, argtypes):
    fn.restype = restype
    if not WORD_ARGUMENTS:
        fn.argtypes = argtypes
        return fn
    floats = [i for i, t in enumerate(argtypes) if t is _float]
    if not floats:
        return fn

    def call(*args):
        args = list(args)
        for i in floats:
            args[i] = _float(args[i])
        return fn(*args)
    call.__name__ = fn.__name__
    return call


def physical_cores() -> int:
    """The physical cores this process may run on (Linux: its affinity mask, SMT siblings once),
    at least 1; elsewhere os.cpu_count()."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
    cores = set()
    for cpu in allowed:
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology/"
        try:
            with open(topology + "core_id") as core, open(topology + "physical_package_id") as package:
                cores.add((package.read().strip(), core.read().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))          # no topology here (some containers): one per CPU
    return max(1, len(cores))


def default_threads() -> int:
    """$ENGINE_THREADS when set (a positive whole number), else physical_cores()."""
    value = os.environ.get(THREADS, "").strip()
    if not value:
        return physical_cores()
    if not value.isdigit() or int(value) < 1:
        from ...errors import InputError
        raise InputError(f"${THREADS} must be a positive whole number of threads, got {value!r}")
    return int(value)


class Library:
    """The loaded kernels: one ctypes function per export, its C signature bound once."""

    def __init__(self, path):
        self.path = os.fspath(path)
        cdll = ctypes.CDLL(self.path)
        missing = [name for name in SIGNATURES if not hasattr(cdll, name)]
        if missing:
            raise OSError(f"{self.path} lacks the exports {', '.join(missing)}: built from other sources?")
        for name, (restype, argtypes) in SIGNATURES.items():
            setattr(self, name, _bind(getattr(cdll, name), restype, argtypes))
        abi = self.engine_kernels_abi()
        if abi != ABI:
            raise OSError(f"{self.path} implements kernel ABI {abi}, this engine needs {ABI}: rebuild it "
                          "(python wasm_kernels/build.py)")
        self.features = self.engine_kernels_features()
        if not runtime.in_browser():         # the native pool; in Pyodide the page's worker sizes its own
            self.engine_set_threads(default_threads())

    def resident(self, array) -> None:
        """`array` is a weight (constant while it lives): a library with a heap of its own
        (heap.HeapLibrary) copies it there once; here it is used where it lies."""

    def written(self, view) -> None:
        """`view` was written in place by an eager op: a library that keeps copies of arrays
        elsewhere (heap.HeapLibrary) makes them again; here there are none."""

    @property
    def flavour(self) -> str:
        """"native", or the WebAssembly build: "simd" or "relaxed"."""
        if not self.features & 1:
            return "native"
        return "relaxed" if self.features & 4 else "simd"

    def __repr__(self) -> str:
        return f"<engine kernels {self.flavour} from {self.path}>"


class Recording:
    """Stands in for the loaded Library inside `recording()`: every export called goes through
    and is recorded as (name, function, arguments, result)."""

    def __init__(self, library: Library):
        self.library, self.calls = library, []

    def __getattr__(self, name):
        fn = getattr(self.library, name)
        if name not in SIGNATURES:
            return fn

        def record(*args):
            result = fn(*args)
            self.calls.append((name, fn, args, result))
            return result
        return record


@contextlib.contextmanager
def recording():
    """The C calls the kernels make inside the block, as a list of (name, function, args, result)."""
    global _library
    loaded = get()
    _library = Recording(loaded)
    try:
        yield _library.calls
    finally:
        _library = loaded


_library: Library | None = None
_reason: str | None = None
_tried = False

NO_SITE = ("the WebAssembly kernels are not in this page, and no site is known to fetch them from: pass "
           "site=URL (engine.pipeline / engine.pipeline_async) or call engine.runtime.set_site(URL)")
WAIT_HINT = "await engine.pipeline_async(...)` or `await engine.backends.simd.ensure_kernels()"


class _Retry(OSError):
    """Not available yet, for a reason that may pass (no site known, no way to block): asked again
    on the next use instead of being remembered."""


def flavour() -> str:
    """Which WebAssembly build the page should fetch: $ENGINE_SIMD_FLAVOUR, default "simd"."""
    value = os.environ.get("ENGINE_SIMD_FLAVOUR", "simd")
    if value not in FLAVOURS:
        raise ValueError(f"ENGINE_SIMD_FLAVOUR must be one of {', '.join(FLAVOURS)}, got {value!r}")
    return value


def wasm_file_name(name: str | None = None) -> str:
    return FLAVOURS[name or flavour()]


def load_library(path) -> Library:
    """Load the kernels from `path` and make them the ones the simd backend uses."""
    global _library, _reason, _tried
    _library, _reason, _tried = Library(path), None, True
    return _library


def use(loaded) -> None:
    """Make `loaded` (a Library, or one with its exports such as heap.HeapLibrary) the kernels the
    simd backend calls."""
    global _library, _reason, _tried
    _library, _reason, _tried = loaded, None, True


def kernel_urls(site: str) -> list[tuple[str, str]]:
    """(flavour, URL) of the site's kernel builds, in the order to try them: relaxed SIMD first
    (the faster, where the browser validates it), then SIMD128; only $ENGINE_SIMD_FLAVOUR's
    build when that is set."""
    base = site if site.endswith("/") else site + "/"
    names = [flavour()] if os.environ.get("ENGINE_SIMD_FLAVOUR") else ["relaxed", "simd"]
    return [(name, f"{base}kernels/{FLAVOURS[name]}") for name in names]


def known_site() -> str | None:
    """The site the engine's files come from (engine.runtime.set_site), or None."""
    return runtime.known_site()


def _needs_fetch() -> bool:
    return runtime.in_browser() and not os.environ.get("ENGINE_SIMD_LIBRARY") and not os.path.exists(PYODIDE_PATH)


async def fetch_kernels(site: str, path: str = PYODIDE_PATH) -> str:
    """In Pyodide: fetch the site's kernel build that this browser accepts (WebAssembly.validate),
    through engine.runtime's transport, and write it to `path`; its flavour ("relaxed" or
    "simd"). A FetchError naming every URL tried and why each failed when none will do."""
    import js                                 # the device layer: WebAssembly.validate is the browser's
    from ...errors import FetchError
    transport, failures = runtime.transport(), []
    for name, url in kernel_urls(site):
        try:
            status, headers, data = await transport.get(url)
        except (ConnectionError, FetchError) as e:
            reason = str(e)
            if not isinstance(e, runtime.Unexplained) and "TypeError" in reason:     # the browser says nothing
                host = url.split("/")[2] if url.count("/") >= 2 else url
                reason += (f" (the browser gives no reason; the likely cause is that {host} does not allow "
                           f"cross-origin requests (CORS) from this page, or is not reachable)")
            failures.append(f"{url}: {reason}")
            continue
        if not 200 <= status < 300:
            failures.append(f"{url}: HTTP {status}")
            continue
        module = js.Uint8Array.new(len(data))
        module.assign(data)
        if not js.WebAssembly.validate(module):
            kind = headers.get("content-type") or "no Content-Type"
            failures.append(f"{url}: not a WebAssembly module this browser accepts ({kind}, {len(data)} bytes)")
            continue
        partial = f"{path}.part"
        with open(partial, "wb") as f:        # never a half-written library at `path`
            f.write(data)
        os.replace(partial, path)
        return name
    raise FetchError("the simd kernels could not be fetched: " + "; ".join(failures))


async def ensure_kernels(site: str | None = None) -> str | None:
    """Make the simd kernels loadable here: None when they are, else why not (the reason
    engine.device.unavailable_reason("simd") gives from then on).

    In a Pyodide page without them (any page but ours), fetches them from `site` (default: the
    known site, engine.runtime.known_site()) without blocking, so it works with or without JSPI.
    Natively and where they are already here it only loads them."""
    global _tried, _reason
    if _library is not None:
        return None
    if _needs_fetch():
        from ...errors import FetchError
        site = site or known_site()
        if site is None:
            return NO_SITE
        try:
            await fetch_kernels(site)
        except FetchError as e:
            _tried, _reason = True, str(e)
            return _reason
        _tried = False                        # loaded below, whatever an earlier try said
    return unavailable_reason()


def _fetch_blocking() -> None:
    """The backend chosen in a Pyodide page without the kernels: fetch them through JSPI."""
    from ...errors import FetchError, NeedsAwait
    site = known_site()
    if site is None:
        raise _Retry(NO_SITE)
    try:
        runtime.wait(fetch_kernels(site), WAIT_HINT)
    except NeedsAwait as e:
        raise _Retry(str(e)) from None
    except FetchError as e:
        raise OSError(str(e)) from None


def _default_path() -> str:
    configured = os.environ.get("ENGINE_SIMD_LIBRARY")
    if configured:
        return configured
    if runtime.in_browser():
        if not os.path.exists(PYODIDE_PATH):
            _fetch_blocking()
        return PYODIDE_PATH
    build_py = SOURCES / "build.py"
    if not build_py.exists():
        raise OSError(f"the C kernel sources are not here ({SOURCES}); set ENGINE_SIMD_LIBRARY to a built library")
    spec = importlib.util.spec_from_file_location("_engine_kernels_build", build_py)
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    try:
        return os.fspath(build.native_library())
    except build.BuildError as e:
        raise OSError(str(e)) from None


def _load_default() -> None:
    global _library, _reason, _tried
    _tried = True
    try:
        _library = Library(_default_path())
    except _Retry as e:                      # no site yet, or cannot block here: asked again next time
        _tried, _reason = False, str(e)
    except OSError as e:                     # no compiler, no file, wrong ABI: the backend is unavailable
        _reason = str(e)


def unavailable_reason() -> str | None:
    """None when the kernels load here, else why not: what choosing the simd backend asks, so it
    loads them (compiles them natively, fetches them in a Pyodide page without them) on its
    first call."""
    if not _tried:
        _load_default()
    return None if _library is not None else _reason


def load() -> Library:
    """Load the kernels now, as choosing the simd backend does (engine.device.get_backend("simd")),
    and return them; a BackendError saying why when they cannot be had here."""
    reason = unavailable_reason()
    if reason is not None:
        from ...errors import BackendError
        raise BackendError(f"the simd kernels are not available: {reason}")
    return _library


def get() -> Library:
    """The loaded kernels: the ops call this, and it never loads anything (the backend's choice
    did: engine.device.get_backend("simd"), or load())."""
    if _library is None:
        from ...errors import BackendError
        why = _reason if _tried else "they load when the simd backend is chosen (engine.device.get_backend)"
        raise BackendError(f"the simd kernels are not available: {why}")
    return _library
