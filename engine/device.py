"""The one place that picks a backend. Nothing else branches on the device."""
from __future__ import annotations

import importlib

from .errors import BackendError

# name -> module implementing it (a module with a `BACKEND` object)
BACKENDS = {"numpy": "engine.backends.numpy"}
_loaded: dict = {}
_default = "numpy"


def available() -> list[str]:
    return list(BACKENDS)


def get_backend(name: str | None = None):
    """The backend object for `name` (None: the default), loaded on first use."""
    name = _default if name is None else str(name)
    backend = _loaded.get(name)
    if backend is None:
        if name not in BACKENDS:
            raise BackendError(f"unknown device {name!r}; available: {', '.join(available())}")
        backend = _loaded[name] = importlib.import_module(BACKENDS[name]).BACKEND
    return backend


def default_device() -> str:
    return _default


def set_default_device(name: str) -> None:
    global _default
    get_backend(name)
    _default = name
