"""The C kernels of the simd backend and their build (see README.md, build.py)."""
