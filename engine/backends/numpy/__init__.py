"""The reference backend: storage is a flat NumPy array, kernels are NumPy calls."""
from .backend import BACKEND  # noqa: F401
