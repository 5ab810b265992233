"""What each export the kernel pool runs reads and writes, and how much work it does: the byte
ranges its pointer arguments reach (from its dims and strides, per the ABI in wasm_kernels/README.md),
so a call's operands can be copied into the pool's heap and back (heap.py) or placed there once
for a whole program (heap_program.py)."""
from __future__ import annotations

from ... import quants
from .kernels import conv_out_size

IN, OUT, BOTH = 1, 2, 3
_ROW_BYTES = {kind.id: kind for kind in quants.BY_NAME.values() if kind.block_size}


def extent(address, itemsize, dims, direction):
    """(address, lo, hi, direction) of the elements dims = ((count, stride), ...) reach from address;
    an output whose elements leave gaps is copied in too (the gaps must come back unchanged)."""
    low = high = 0
    count = 1
    for n, stride in dims:
        if n == 0:
            return address, address, address, direction
        step = (n - 1) * stride
        low, high = (low + step, high) if step < 0 else (low, high + step)
        count *= n
    lo, hi = address + low * itemsize, address + (high + 1) * itemsize
    if direction == OUT and hi - lo != count * itemsize:
        direction = BOTH
    return address, lo, hi, direction


def _gemm_spans(a, b_itemsize=4):
    batch, m, n, k = a[0], a[1], a[2], a[3]
    spans = [(4, extent(a[4], 4, ((batch, a[5]), (m, a[6]), (k, a[7])), IN)),
             (8, extent(a[8], b_itemsize, ((batch, a[9]), (k, a[10]), (n, a[11])), IN)),
             (12, extent(a[12], 4, ((batch, a[13]), (m, a[14]), (n, 1)), OUT))]
    if a[15]:
        spans.append((15, extent(a[15], 4, ((m, a[16]), (n, a[17])), IN)))
    return spans


def _conv_spans(a):
    n, c, h, w, o, kh, kw, groups = a[0], a[1], a[2], a[3], a[5], a[6], a[7], a[9]
    ho, wo = conv_out_size(h, kh, a[10], a[12], a[14] + a[16]), conv_out_size(w, kw, a[11], a[13], a[15] + a[17])
    spans = [(4, extent(a[4], 4, ((n * c * h * w, 1),), IN)),
             (8, extent(a[8], 4, ((o * (c // groups) * kh * kw, 1),), IN)),
             (20, extent(a[20], 4, ((n * o * ho * wo, 1),), OUT))]
    if a[18]:
        spans.append((18, extent(a[18], 4, ((o, 1),), IN)))
    return spans


def _depthwise_spans(a):
    n, c, h, w, kh, kw = a[0], a[1], a[2], a[3], a[5], a[6]
    ho, wo = conv_out_size(h, kh, a[8], a[10], a[12] + a[14]), conv_out_size(w, kw, a[9], a[11], a[13] + a[15])
    spans = [(4, extent(a[4], 4, ((n * c * h * w, 1),), IN)),
             (7, extent(a[7], 4, ((c * kh * kw, 1),), IN)),
             (18, extent(a[18], 4, ((n * c * ho * wo, 1),), OUT))]
    if a[16]:
        spans.append((16, extent(a[16], 4, ((c, 1),), IN)))
    return spans


def _attention_spans(a):
    n, h, hkv, l, s, d, dv = a[:7]
    spans = [(7, extent(a[7], 4, ((n, a[8]), (h, a[9]), (l, a[10]), (d, a[11])), IN)),
             (12, extent(a[12], 4, ((n, a[13]), (hkv, a[14]), (s, a[15]), (d, a[16])), IN)),
             (17, extent(a[17], 4, ((n, a[18]), (hkv, a[19]), (s, a[20]), (dv, a[21])), IN)),
             (30, extent(a[30], 4, ((n * l * h * dv, 1),), OUT))]
    if a[22]:
        spans.append((22, extent(a[22], 1 if a[23] == 1 else 4, ((n, a[24]), (h, a[25]), (l, a[26]), (s, a[27])),
                                  IN)))
    return spans


def _linear_q_spans(a):
    kind, m, rows, cols = a[0], a[1], a[2], a[3]
    spans = [(4, extent(a[4], 4, ((m, a[5]), (cols, 1)), IN)),
             (6, extent(a[6], 1, ((rows * _ROW_BYTES[kind].row_bytes(cols), 1),), IN)),
             (8, extent(a[8], 4, ((m * rows, 1),), OUT))]
    if a[7]:
        spans.append((7, extent(a[7], 4, ((rows, 1),), IN)))
    return spans


def _conv_work(a):
    ho = conv_out_size(a[2], a[6], a[10], a[12], a[14] + a[16])
    wo = conv_out_size(a[3], a[7], a[11], a[13], a[15] + a[17])
    return a[0] * a[5] * ho * wo * (a[1] // a[9]) * a[6] * a[7]


def _depthwise_work(a):
    ho = conv_out_size(a[2], a[5], a[8], a[10], a[12] + a[14])
    return a[0] * a[1] * ho * a[3] * a[5] * a[6] // max(a[9], 1)


# export -> (the spans of its pointer arguments, its work in multiply-adds)
SPANS = {
    "gemm_f32": (_gemm_spans, lambda a: a[0] * a[1] * a[2] * a[3]),
    "gemm_f16w_f32": (lambda a: _gemm_spans(a, 2), lambda a: a[0] * a[1] * a[2] * a[3]),
    "conv2d_f32": (_conv_spans, _conv_work),
    "depthwise_conv2d_f32": (_depthwise_spans, _depthwise_work),
    "attention_f32": (_attention_spans, lambda a: 2 * a[0] * a[1] * a[3] * a[4] * (a[5] + a[6])),   # + softmax
    "linear_q_f32": (_linear_q_spans, lambda a: a[1] * a[2] * a[3]),
}
