"""engine.nn: modules and functional ops with torch.nn's names."""
from . import functional  # noqa: F401
from .cache import KVCache, causal_mask  # noqa: F401
from .layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv1d, Conv2d, Dropout, Embedding, Flatten,  # noqa: F401
                     Identity, LayerNorm, Linear, MaxPool2d, ReLU, ReLU6, RMSNorm, Sigmoid, SiLU, Softmax, Tanh)
from .module import Module, ModuleList, Sequential  # noqa: F401
from .utils import fuse_conv_bn_eval  # noqa: F401
