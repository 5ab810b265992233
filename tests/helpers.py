"""Shared test helpers: one comparison with tolerances stated per dtype."""
from __future__ import annotations

import numpy as np

import engine

# (rtol, atol) by the dtype the engine computed in. Half types compute in float32,
# so their results are compared as float32 against torch fed the same values.
TOLERANCES = {
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-12),
    "exact": (0.0, 0.0),          # integers and bools
}


def to_numpy(x) -> np.ndarray:
    try:
        import torch
        if isinstance(x, torch.Tensor):
            x = x.detach()
            return (x.float() if x.dtype in (torch.bfloat16, torch.float16) else x).numpy()
    except ImportError:
        pass
    return x.numpy() if isinstance(x, engine.Tensor) else np.asarray(x)


def assert_close(actual, expected, *, rtol=None, atol=None, dtype=None):
    a, e = to_numpy(actual), to_numpy(expected)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    kind = dtype or ("exact" if a.dtype.kind in "biu" and e.dtype.kind in "biu" else
                     "float64" if a.dtype == np.float64 else "float32")
    r, t = TOLERANCES[kind]
    r, t = (r if rtol is None else rtol), (t if atol is None else atol)
    if kind == "exact":
        np.testing.assert_array_equal(a, e)
    else:
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=r, atol=t, equal_nan=True)


def need(condition: bool, why: str) -> None:
    """Skip (saying why) when a tool the test needs is missing; under CI=true fail instead,
    since CI must install everything (scripts/test.sh)."""
    import os

    import pytest
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must provide it: see scripts/test.sh)")
    pytest.skip(why)


def range_reply(data: bytes, start: int | None, end: int | None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a host that honours Range, for bytes [start, end) of `data`
    (the whole file when start is None): what in-memory fake transports answer."""
    if start is None:
        return 200, {}, data
    if start >= len(data):
        return 416, {"content-range": f"bytes */{len(data)}"}, b""
    last = min(end, len(data)) - 1
    return 206, {"content-range": f"bytes {start}-{last}/{len(data)}"}, data[start:last + 1]
