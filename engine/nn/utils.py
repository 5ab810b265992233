"""Module utilities with torch.nn.utils' names."""
from __future__ import annotations

import numpy as np

from .layers import BatchNorm2d, Conv2d


def fuse_conv_bn_eval(conv: Conv2d, bn: BatchNorm2d) -> Conv2d:
    """Fold an inference BatchNorm into the convolution before it, in place (torch's
    fuse_conv_bn_eval returns a copy): BN(conv(x)) = conv(x) * s + (beta - mean * s) with
    s = gamma / sqrt(var + eps), so the conv gets weight * s per output channel and bias
    (b - mean) * s + beta. One pass over the activations less, on every backend."""
    from ..tensor import from_numpy
    gamma = bn.weight.numpy() if bn.weight is not None else np.ones(bn.num_features, np.float32)
    beta = bn.bias.numpy() if bn.bias is not None else np.zeros(bn.num_features, np.float32)
    scale = gamma / np.sqrt(bn.running_var.numpy() + bn.eps)                     # (O,)
    bias = conv.bias.numpy() if conv.bias is not None else np.zeros_like(scale)
    device = conv.weight.device
    conv.weight = from_numpy((conv.weight.numpy() * scale[:, None, None, None]).astype(np.float32), device)
    conv.bias = from_numpy(((bias - bn.running_mean.numpy()) * scale + beta).astype(np.float32), device)
    return conv
