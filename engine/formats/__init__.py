"""Weights formats: pure parsers of bytes. Each reads a `ByteSource` (`sources`: a file, memory,
an HTTP range source natively) and knows nothing of where its bytes come from; none imports
engine.site, which fetches, verifies and caches a site's model folders and opens them with these.

- `safetensors` (with `safetensors_header`, its header's checks), read and written;
- `gguf`: GGUF versions 2 and 3, quantized tensors kept in their blocks;
- `pth`: PyTorch checkpoints, zip and legacy, without torch and without running pickle code
  (`pickle_check` walks each pickle's opcodes first, `pickled` gives its globals inert stand-ins,
  `module_tree` reads a whole module's records);
- `ctranslate2`: CTranslate2's model.bin;
- `describe`: `python -m engine inspect`, from the headers alone.

A file by path opens with `engine.load_safetensors` and `engine.load_gguf` (engine.site: a site's
model folder or a URL too), or with the readers here.
"""
from .ctranslate2 import CTranslate2File, load_ctranslate2  # noqa: F401
from .gguf import GGUFFile, QuantizedTensor  # noqa: F401
from .pth import ModuleCheckpoint, ModuleRecord, load_pth, read_module_checkpoint, read_pth_arrays  # noqa: F401
from .safetensors import SafetensorsFile, ShardedSafetensors, TensorInfo, save_safetensors  # noqa: F401
from .sources import (ByteSource, BytesSource, FileSource, HttpSource,  # noqa: F401
                      RangeSource, SourceNotFound, is_url, open_source, set_url_opener)
