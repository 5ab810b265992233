"""Layers with torch.nn's names, arguments and state-dict keys."""
from __future__ import annotations

from .. import dtypes
from ..functions import full
from . import functional as F
from .module import Module


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


class Linear(Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=dtypes.float32):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = self.param(out_features, in_features, dtype=dtype)
        self.bias = self.param(out_features, dtype=dtype) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)                # (..., in) -> (..., out)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv1d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding=0,
                 dilation: int = 1, groups: int = 1, bias: bool = True, dtype=dtypes.float32):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv1d: channels {in_channels}->{out_channels} not divisible by groups={groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.weight = self.param(out_channels, in_channels // groups, kernel_size, dtype=dtype)
        self.bias = self.param(out_channels, dtype=dtype) if bias else None

    def forward(self, x):
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, groups={self.groups}")


class Conv2d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", dtype=dtypes.float32):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: channels {in_channels}->{out_channels} not divisible by groups={groups}")
        if padding_mode != "zeros":
            raise NotImplementedError(f"Conv2d(padding_mode={padding_mode!r}); only 'zeros' is supported")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = _pair(kernel_size), _pair(stride), _pair(dilation)
        self.padding = padding if isinstance(padding, str) else _pair(padding)
        self.weight = self.param(out_channels, in_channels // groups, *self.kernel_size, dtype=dtype)
        self.bias = self.param(out_channels, dtype=dtype) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, groups={self.groups}")


class BatchNorm2d(Module):
    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, dtype=dtypes.float32):
        super().__init__()
        if not track_running_stats:
            raise NotImplementedError("BatchNorm2d(track_running_stats=False) needs batch statistics (training)")
        self.num_features, self.eps = num_features, eps
        self.weight = self.param(num_features, dtype=dtype) if affine else None
        self.bias = self.param(num_features, dtype=dtype) if affine else None
        self.register_buffer("running_mean", self.param(num_features, dtype=dtype))
        self.register_buffer("running_var", full((num_features,), 1.0, dtype=dtype))
        self.register_buffer("num_batches_tracked", full((), 0, dtype=dtypes.int64))

    def forward(self, x):
        if x.ndim != 4:
            raise ValueError(f"BatchNorm2d expects (N, C, H, W), got {x.shape}")
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, eps=self.eps)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}"


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 dtype=dtypes.float32):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = full(self.normalized_shape, 1.0, dtype=dtype) if elementwise_affine else None
        self.bias = self.param(*self.normalized_shape, dtype=dtype) if elementwise_affine and bias else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 dtype=dtypes.float32):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = full(self.normalized_shape, 1.0, dtype=dtype) if elementwise_affine else None

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, dtype=dtypes.float32):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = self.param(num_embeddings, embedding_dim, dtype=dtype)

    def forward(self, ids):
        return F.embedding(ids, self.weight)                      # (...) -> (..., embedding_dim)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class _Pool(Module):
    def __init__(self, kernel_size, stride=None, padding=0, **kwargs):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.kwargs = kernel_size, stride, padding, kwargs

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool2d(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        super().__init__(kernel_size, stride, padding, dilation=dilation, ceil_mode=ceil_mode)

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, **self.kwargs)


class AvgPool2d(_Pool):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__(kernel_size, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                         divisor_override=divisor_override)

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, **self.kwargs)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class Dropout(Module):
    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)


class Identity(Module):
    def forward(self, x):
        return x


class Softmax(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)


def _activation(name: str, fn, doc: str):
    cls = type(name, (Module,), {"forward": lambda self, x: fn(x), "__doc__": doc})
    return cls


ReLU = _activation("ReLU", F.relu, "max(x, 0)")
ReLU6 = _activation("ReLU6", F.relu6, "min(max(x, 0), 6)")
SiLU = _activation("SiLU", F.silu, "x * sigmoid(x)")
Sigmoid = _activation("Sigmoid", F.sigmoid, "1 / (1 + exp(-x))")
Tanh = _activation("Tanh", F.tanh, "tanh(x)")


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)
