"""The simd backend: C kernels (wasm_kernels/) through ctypes, natively and in Pyodide.

Storage is the NumPy backend's (flat NumPy arrays); float32 GEMM, convolutions, softmax,
norms, batch-norm affine, clamp and half-type casts run in C, everything else in NumPy.
Available when the kernel library loads (`unavailable_reason()` says why not).
"""
from .backend import BACKEND  # noqa: F401
from .library import ensure_kernels, flavour, load_library, unavailable_reason, wasm_file_name  # noqa: F401
