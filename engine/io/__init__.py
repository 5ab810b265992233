"""Weights I/O: byte sources (file, memory, HTTP) and the formats read over them."""
from .safetensors import (SafetensorsFile, ShardedSafetensors, TensorInfo,  # noqa: F401
                          load_safetensors, save_safetensors)
from .gguf import GGUFFile, QuantizedTensor, load_gguf  # noqa: F401
from .pth import load_pth, read_pth_arrays  # noqa: F401
from .sources import (ByteSource, BytesSource, FileSource, HttpSource,  # noqa: F401
                      RangeSource, SourceNotFound, open_source)
