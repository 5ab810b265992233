"""The kernels split among threads (wasm_kernels/pool.c): every split export on 2 and 3 threads
gives the same bits as on 1 (no split changes the order of any addition), on shapes that reach
each way of splitting (batch, columns, rows, images, output rows, channels, planes, query tiles,
weight rows; odd sizes, fewer units than threads), and matches NumPy within the kernels' usual
tolerance. Each case checks that the call does split (the pool's count of split calls grows).
Then concurrent calls from two Python threads, and engine.set_num_threads's errors."""
import ctypes
import threading

import numpy as np
import pytest

import engine
from engine.backends.simd import kernels as K
from engine.backends.simd import library
from engine.backends.simd import quantized as Q
from engine.errors import InputError
from tests.kernels.reference import (
    assert_within,
    assert_within_or_nan,
    attention_reference,
    gemm_reference,
    linear_q_reference,
    random_blocks,
)
from tests.kernels.test_conv import reference as conv_reference

COUNTS = (1, 2, 3)


@pytest.fixture(autouse=True)
def one_thread_after():
    yield
    engine.set_num_threads(1)


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def splits() -> int:
    """How many kernel calls the pool has split among threads so far (a test-only export)."""
    count = ctypes.CDLL(library.get().path).engine_pool_splits
    count.restype = ctypes.c_uint
    return count()


def on_every_count(run):
    """run() on 1, 2 and 3 threads: the same bits each time, and a split with more than one."""
    results = []
    for n in COUNTS:
        engine.set_num_threads(n)
        assert engine.get_num_threads() == n
        before = splits()
        results.append(run())
        assert (splits() > before) == (n > 1), f"on {n} threads the call splits {splits() - before} times"
    for n, result in zip(COUNTS[1:], results[1:]):
        assert result.shape == results[0].shape
        np.testing.assert_array_equal(bits(result), bits(results[0]), f"{n} threads")
    return results[-1]


# (batch, M, N, K, B transposed as a linear layer's weight): batches that divide among the
# threads, batches that do not (then column panels), column panels of the packed, in-place and
# dot-product paths (M <= 4), rows when N is too narrow for two panels, a batch of such
GEMMS = [(6, 33, 20, 150, False), (5, 40, 37, 100, False), (1, 70, 203, 64, False), (1, 12, 301, 99, False),
         (1, 3, 1001, 129, True), (1, 1, 771, 384, True), (1, 300, 7, 200, False), (1, 1000, 1, 300, False),
         (3, 40, 5, 400, False), (2, 64, 130, 65, True)]


@pytest.mark.parametrize("case", GEMMS, ids=lambda c: "x".join(map(str, c[:4])) + ("T" if c[4] else ""))
def test_gemm(rng, case):
    batch, m, n, k, transposed = case
    a = rng.standard_normal((batch, m, k), dtype=np.float32)
    b = rng.standard_normal((batch, n, k) if transposed else (batch, k, n), dtype=np.float32)
    b = b.transpose(0, 2, 1) if transposed else b
    bias = rng.standard_normal(n, dtype=np.float32)
    out = on_every_count(lambda: K.gemm(a, b, bias, "gelu"))
    assert_within(out, *gemm_reference(a, b, bias, "gelu"), "gemm on 3 threads")


@pytest.mark.parametrize("m", [1, 3, 40])
def test_linear_float16_weight(rng, m):
    x = rng.standard_normal((m, 300), dtype=np.float32)
    w = (rng.standard_normal((517, 300)) * 0.05).astype(np.float16)
    bias = rng.standard_normal(517, dtype=np.float32)
    out = on_every_count(lambda: K.linear(x, w, bias))
    assert_within(out, *gemm_reference(x, w.astype(np.float32).T, bias), "float16 weight on 3 threads")


# (N, C, H, W, O, kh, kw, stride, pads, dilation, groups): images among threads; output rows
# (im2col of each part's rows, the 1x1 direct product, stride 2, groups); output channels on a
# plane too small to share; two images on three threads; depthwise planes (fewer than threads too)
CONVS = [(4, 8, 20, 20, 16, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
         (1, 16, 30, 31, 32, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
         (1, 32, 20, 20, 48, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
         (1, 3, 57, 57, 32, 3, 3, (2, 2), ((0, 1), (0, 1)), (1, 1), 1),
         (1, 8, 24, 24, 16, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
         (1, 64, 5, 5, 128, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
         (2, 16, 16, 16, 32, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
         (1, 13, 23, 29, 13, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 13),
         (2, 5, 40, 40, 5, 5, 5, (2, 2), ((1, 2), (1, 2)), (1, 1), 5),
         (1, 2, 112, 112, 2, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 2),
         (1, 48, 37, 45, 24, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1),   # 2 k blocks, panels across rows
         (1, 16, 40, 90, 40, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 1)]   # stride 2 on wide rows


@pytest.mark.parametrize("case", CONVS, ids=[f"conv{i}" for i in range(len(CONVS))])
def test_conv2d(rng, case):
    n, c, h, w, o, kh, kw, stride, pads, dilation, groups = case
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weight = (rng.standard_normal((o, c // groups, kh, kw)) / np.sqrt(c // groups * kh * kw)).astype(np.float32)
    bias = rng.standard_normal(o, dtype=np.float32)
    out = on_every_count(lambda: K.conv2d(x, weight, bias, stride, pads, dilation, groups, "relu6"))
    assert_within(out, *conv_reference(x, weight, bias, stride, pads, dilation, groups, "relu6"), "conv 3 threads")
    if groups == c == o:
        direct = on_every_count(lambda: K.depthwise_conv2d(x, weight, bias, stride, pads, dilation, "relu6"))
        np.testing.assert_array_equal(bits(direct), bits(out))


# (N, H, Hkv, L, S, E, Ev): a decode step of grouped heads (3 tiles), a causal prompt, key
# padding on BERT's shape, a mask per query row, V packed (Ev not a multiple of 4)
ATTENTIONS = [((1, 9, 3, 1, 300, 64, 64), "none"), ((1, 9, 3, 37, 37, 64, 64), "causal"),
              ((2, 12, 12, 64, 64, 32, 32), "padding"), ((2, 6, 2, 21, 50, 16, 12), "per query"),
              ((1, 4, 4, 30, 90, 24, 7), "padding")]


@pytest.mark.parametrize("case", ATTENTIONS, ids=lambda c: f"{'x'.join(map(str, c[0]))}-{c[1]}")
def test_attention(rng, case):
    (n, h, hkv, l, s, e, ev), kind = case
    q = rng.standard_normal((n, h, l, e), dtype=np.float32)
    k = rng.standard_normal((n, hkv, s, e), dtype=np.float32)
    v = rng.standard_normal((n, hkv, s, ev), dtype=np.float32)
    mask = None
    if kind == "padding":
        mask = np.ones((n, 1, 1, s), bool)
        mask[-1, ..., s // 2:] = False
    elif kind == "per query":
        mask = rng.standard_normal((n, h, l, s)).astype(np.float32)
    causal = kind == "causal"
    out = on_every_count(lambda: K.attention(q, k, v, mask, None, causal))
    assert_within_or_nan(out, *attention_reference(q, k, v, mask, None, causal), "attention on 3 threads")


# (type, rows of x, weight rows, columns): one row (decoding: the weight streamed), the panels
# of a prompt, the K-quants' rows, weight rows not a multiple of the split's step
QUANTS = [("q4_1", 1, 1001, 576), ("q4_1", 37, 130, 576), ("q8_0", 1, 771, 448), ("q8_0", 5, 301, 320),
          ("q4_k", 1, 515, 512), ("q6_k", 3, 257, 768)]


@pytest.mark.parametrize("case", QUANTS, ids=lambda c: "-".join(map(str, c)))
def test_linear_q(rng, case):
    qtype, m, rows, cols = case
    weight = random_blocks(qtype, rows, cols, rng)
    x = rng.standard_normal((m, cols)).astype(np.float32)
    bias = rng.standard_normal(rows).astype(np.float32)
    out = on_every_count(lambda: Q.linear_q(x, bias, weight=weight, qtype=qtype, rows=rows, cols=cols))
    from engine import quants
    w = quants.dequantize(weight, qtype).reshape(rows, cols)
    expected, tolerance = linear_q_reference(x, w, bias)
    assert_within(out, expected, tolerance, f"{qtype} on 3 threads")


def test_concurrent_calls_from_python_threads(rng):
    """ctypes releases the GIL: a second caller finds the pool busy and runs its parts itself."""
    engine.set_num_threads(2)
    a = rng.standard_normal((4, 96, 200), dtype=np.float32)
    b = rng.standard_normal((4, 200, 150), dtype=np.float32)
    x = rng.standard_normal((1, 16, 30, 30), dtype=np.float32)
    w = rng.standard_normal((24, 16, 3, 3), dtype=np.float32)
    expected = K.gemm(a, b), K.conv2d(x, w, None, 1, 1)
    failures = []

    def work(which):
        for _ in range(30):
            got = K.gemm(a, b) if which == 0 else K.conv2d(x, w, None, 1, 1)
            if not np.array_equal(got, expected[which]):
                failures.append(which)

    threads = [threading.Thread(target=work, args=(i % 2,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None, True])
def test_set_num_threads_refuses_what_is_not_a_count(bad):
    with pytest.raises(InputError, match="positive whole number"):
        engine.set_num_threads(bad)


def test_thread_count_is_described():
    engine.set_num_threads(2)
    assert engine.get_num_threads() == 2 and engine.threads.describe() == "2 threads"
    engine.set_num_threads(1)
    assert engine.threads.describe() == "1 thread"
