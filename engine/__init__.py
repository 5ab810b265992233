"""A Python tensor engine that runs neural networks natively and in the browser."""
from . import dtypes
from .device import available as available_devices, default_device, get_backend, set_default_device
from .dtypes import (bfloat16, bool_, float16, float32, float64, int8, int16, int32, int64, uint8)
from .errors import EngineError
from .functions import *  # noqa: F401,F403  (torch.* level functions)
from .functions import __all__ as _function_names
from .formats import load_ctranslate2, load_pth, save_safetensors
from .site import load_gguf, load_gguf_async, load_pth_async, load_safetensors, load_safetensors_async
from .tasks import pipeline, pipeline_async
from . import nn, registry  # noqa: E402  (as with torch: engine.nn.functional after `import engine`)
from .tensor import Tensor, from_numpy, tensor
from .threads import get_num_threads, set_num_threads
from .weights import Weights

bool = bool_  # noqa: A001 - torch spells it engine.bool

__version__ = "0.1.0"


def __getattr__(name: str):
    """`engine.text` (the tokenizers) is imported on first use: an image model never needs it, and
    its import takes ~0.2 s of a page's start in Pyodide."""
    if name == "text":
        import importlib
        return importlib.import_module(".text", __name__)
    if name in ("api", "chat", "embeddings"):    # the OpenAI-shaped API (engine/api.py)
        import importlib
        api = importlib.import_module(".api", __name__)
        return api if name == "api" else getattr(api, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
