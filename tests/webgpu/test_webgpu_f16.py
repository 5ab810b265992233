"""float16 weights half-width on the webgpu backend where the adapter offers shader-f16: a 2-D
float16 tensor stays f16 on the device (half the bytes of the float32 that held it before), and
linear_f16w, embedding, cat and the casts read it as it is, accumulating in float32.

Tolerances: linear with a float16 weight is compared with the float64 product of the same float16
values: |y - y_ref| <= LINEAR_RTOL * (sum_k |x_k w_nk| + |b_n|) (float32 accumulation in any
order keeps within K 2^-24 times that sum; measured <= 2e-7 here). Gathers, casts to float32,
.numpy() and cat are exact (bit for bit, subnormals, -0, inf and NaN included). A model: the
same logits as the float32 weights within float32 summation order (Whisper: 1e-4, as
tests/models/test_whisper.py), and the real tiny.en's transcript equal to numpy's float32 one.

Skipped (the half-width tests, not the path without the feature) where the adapter has no
shader-f16: float16 is then held as float32, as before.
"""
from __future__ import annotations

import numpy as np
import pytest

import engine
import engine.nn.functional as F
from engine.backends.webgpu import quantized as Q

LINEAR_RTOL = 1e-6
WHISPER_ATOL = 1e-4


@pytest.fixture()
def half(gpu):
    if "shader-f16" not in gpu.features:
        pytest.skip(f"the adapter ({gpu.info}) offers no shader-f16: float16 weights stay float32-wide")
    return gpu


@pytest.fixture()
def no_half(gpu, monkeypatch):
    """The device as one without shader-f16."""
    monkeypatch.setattr(gpu, "features", frozenset())
    return gpu


def half_weight(rng, n: int, k: int, specials: bool = False) -> np.ndarray:
    """(n, k) float16 over much of its range, zeros and subnormals among them; specials: also
    -0, inf and NaN (for what is copied, not multiplied)."""
    w = (rng.standard_normal((n, k)) * 10.0 ** rng.uniform(-3, 1, (n, k))).astype(np.float16)
    w.flat[::7] = 0
    w.flat[3::11] = np.float16(2.0 ** -20) * rng.integers(-1023, 1024, w.flat[3::11].shape)  # subnormal
    if specials:
        w.flat[1::13] = np.array([-0.0, np.inf, -np.inf, np.nan], np.float16)[np.arange(w.flat[1::13].size) % 4]
    return w


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype == np.float16 and a.shape == b.shape and (a.view(np.uint16) == b.view(np.uint16)).all()


def check_linear(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, got: np.ndarray) -> None:
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    ref, bound = x64 @ w64.T, np.abs(x64) @ np.abs(w64).T
    if bias is not None:
        ref, bound = ref + bias, bound + np.abs(bias)
    assert got.shape == ref.shape and got.dtype == np.float32
    assert (np.abs(got - ref) <= LINEAR_RTOL * bound + 1e-30).all(), np.max(np.abs(got - ref) / (bound + 1e-30))


@pytest.fixture()
def matvecs(monkeypatch):
    """The calls that took the streaming product (up to Q.MATVEC_ROWS rows of x)."""
    calls = []
    real = Q.linear_f16

    def spy(gpu, x, bias, w):
        calls.append((x.shape, w.shape, w.type))
        return real(gpu, x, bias, w)
    monkeypatch.setattr(Q, "linear_f16", spy)
    return calls


# 1-4 rows stream the weight (vec4<f16> where K and offsets are multiples of 4, else element by
# element); more go through the tiled GEMM; odd sizes fill no workgroup evenly
@pytest.mark.parametrize("m, n, k", [(1, 37, 64), (2, 37, 65), (3, 130, 384), (4, 33, 7), (1, 1, 17), (4, 257, 132),
                                     (5, 37, 64), (37, 129, 65), (70, 200, 384)])
def test_linear_with_a_half_weight_against_numpy(half, matvecs, m, n, k):
    rng = np.random.default_rng(m * 1000 + n + k)
    w, x = half_weight(rng, n, k), rng.standard_normal((m, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if n % 2 else None
    wt = engine.from_numpy(w, "webgpu")
    assert wt._buf.half and wt.dtype is engine.float16
    out = F.linear(engine.from_numpy(x, "webgpu"), wt, None if bias is None else engine.from_numpy(bias, "webgpu"))
    check_linear(x, w, bias, out.numpy())
    assert matvecs == ([((m, k), (n, k), "f16")] if m <= Q.MATVEC_ROWS else [])


def test_linear_reads_half_weights_through_any_view(half, matvecs):
    """Row views at odd offsets (a stacked projection's parts), a transposed weight, batched and
    strided x: the product of the values the views show."""
    rng = np.random.default_rng(1)
    w = half_weight(rng, 41, 33)
    wt = engine.from_numpy(w, "webgpu")
    x = rng.standard_normal((2, 3, 66)).astype(np.float32)
    xt = engine.from_numpy(x, "webgpu")[..., ::2]                       # (2, 3, 33), column stride 2
    for rows in (slice(0, 1), slice(1, 20), slice(7, 41)):              # offsets 0, 33, 231 elements
        for xs, xv in ((xt[0, :1], x[0, :1, ::2]), (xt, x[..., ::2])):  # 1 row, 6 rows
            got = F.linear(xs, wt[rows]).numpy()
            check_linear(xv.reshape(-1, 33), w[rows], None, got.reshape(-1, got.shape[-1]))
    w2 = half_weight(rng, 24, 40)                                       # (K, N) stored: weight = its .T
    got = F.linear(engine.from_numpy(x[0, :2, :24], "webgpu"), engine.from_numpy(w2, "webgpu").T).numpy()
    check_linear(x[0, :2, :24], w2.T, None, got)
    assert all(t == "f16" for *_, t in matvecs) and len(matvecs) == 3  # the transposed one took the GEMM


def test_embedding_gathers_the_halves_exactly(half):
    rng = np.random.default_rng(2)
    w = half_weight(rng, 50, 37, specials=True)
    wt = engine.from_numpy(w, "webgpu")
    ids = np.array([[3, 0, 49], [7, 7, 12]])
    rows = F.embedding(engine.from_numpy(ids, "webgpu"), wt)
    assert rows.dtype is engine.float16 and rows.shape == (2, 3, 37) and rows._buf.half
    assert same_bits(rows.numpy(), w[ids])
    widened = rows.float().numpy()                                      # one pass, exact
    assert widened.dtype == np.float32 and np.array_equal(widened, w[ids].astype(np.float32), equal_nan=True)
    assert same_bits(engine.index_select(wt, 1, engine.tensor([36, 0, 5], device="webgpu")).numpy(), w[:, [36, 0, 5]])


def test_a_half_weight_takes_half_the_memory_and_reads_back_exact(half, monkeypatch):
    rng = np.random.default_rng(3)
    w = half_weight(rng, 512, 1024, specials=True)
    wt = engine.from_numpy(w, "webgpu")
    assert wt._buf.half and wt._buf.buf.size == w.nbytes                # 1 MiB (buffers come in powers of two)
    assert same_bits(wt.numpy(), w) and same_bits(wt[5:9, 3::7].numpy(), w[5:9, 3::7])
    assert same_bits(wt.to("numpy").numpy(), w)
    monkeypatch.setattr(half, "features", frozenset())                   # as before: float16 held in f32
    wide = engine.from_numpy(w, "webgpu")
    assert not wide._buf.half and wide._buf.buf.size == 2 * wt._buf.buf.size
    assert same_bits(wide.numpy(), w)


def test_only_2d_float16_is_half_and_every_op_still_reads_it(half):
    rng = np.random.default_rng(4)
    w = half_weight(rng, 9, 20)
    wt = engine.from_numpy(w, "webgpu")
    for other in (w[0], w.reshape(3, 3, 20), w.astype(np.float32)):     # 1-D, 3-D, float32: as before
        assert not engine.from_numpy(other, "webgpu")._buf.half
    assert not engine.from_numpy(w[:1, :8], "webgpu")._buf.half         # small: shared by value, as before
    w32 = w.astype(np.float32)
    assert np.array_equal((wt * 2).numpy(), (w32 * 2).astype(np.float16))
    assert np.allclose(wt.sum(1).numpy(), w32.sum(1), rtol=1e-3)
    np.testing.assert_allclose(engine.matmul(engine.ones((2, 9), device="webgpu"), wt).numpy(), np.ones((2, 9)) @ w32,
                               rtol=1e-5, atol=1e-5)
    assert same_bits(wt.T.contiguous().numpy(), np.ascontiguousarray(w.T))
    assert wt.T.contiguous()._buf.half
    mixed = engine.cat([wt, engine.from_numpy(w[0], "webgpu").reshape(1, 20)], 0)   # half + float32-held
    assert same_bits(mixed.numpy(), np.concatenate([w, w[:1]])) and not mixed._buf.half
    whole = engine.cat([wt[2:], wt[:2]], 0)
    assert same_bits(whole.numpy(), np.concatenate([w[2:], w[:2]])) and whole._buf.half
    assert np.array_equal(wt.to(engine.int32).numpy(), w32.astype(np.int32))
    copy = engine.from_numpy(w, "webgpu")                               # written in place: widened for good
    zeros = engine.zeros((1, 20), dtype=engine.float16, device="webgpu")
    copy.index_copy_(0, engine.tensor([1], device="webgpu"), zeros)
    expected = w.copy()
    expected[1] = 0
    assert not copy._buf.half and same_bits(copy.numpy(), expected)


def test_without_shader_f16_float16_is_held_as_float32(no_half, matvecs):
    rng = np.random.default_rng(5)
    w, x = half_weight(rng, 37, 65), rng.standard_normal((3, 65)).astype(np.float32)
    wt = engine.from_numpy(w, "webgpu")
    assert not wt._buf.half and wt._buf.buf.size >= 4 * w.size
    check_linear(x, w, None, F.linear(engine.from_numpy(x, "webgpu"), wt).numpy())
    assert same_bits(F.embedding(engine.tensor([4, 1], device="webgpu"), wt).numpy(), w[[4, 1]])
    assert matvecs == []


# --- Whisper: the model that keeps its float16 weights where linear_f16w is offered -----------------------
def tiny_whisper_state(rng):
    """A small Whisper's state (models/whisper.py), random, its projections and token embedding
    in float16 as a checkpoint stores them."""
    from models import whisper as W
    config = W.Config(n_mels=80, n_audio_ctx=24, n_audio_state=128, n_audio_head=2, n_audio_layer=2, n_vocab=51865,
                      n_text_ctx=40, n_text_state=128, n_text_head=2, n_text_layer=2)
    halves = set(W.Whisper(config).half_weights())
    state = {}
    for name, t in W.Whisper(config).state_dict().items():
        a = rng.standard_normal(t.shape).astype(np.float32) * (0.2 if t.ndim > 1 else 1.0)
        if name.endswith("ln.weight") or "_ln." in name:
            a = 1 + 0.2 * a
        state[name] = engine.from_numpy(a.astype(np.float16) if name in halves else a)
    return config, state


def whisper_outputs(state, device, config):
    from engine.speech.decoder import DecoderSession
    from models import whisper as W
    model = W.load(state, device)
    mel = np.random.default_rng(6).standard_normal((config.n_mels, 2 * config.n_audio_ctx)).astype(np.float32)
    features = model.encode(mel)
    session = DecoderSession(model)
    session.set_audio(features)
    first = session.feed([50258, 50259, 50359, 50364], rows=(0, -1))
    steps = [session.feed([t])[0] for t in (1012, 345, 11)]
    return model, features.numpy(), np.concatenate([first, np.stack(steps)])


@pytest.mark.parametrize("mode", ["half", "no_half"])
def test_small_whisper_with_float16_weights_equals_float32(gpu, monkeypatch, mode):
    if mode == "half" and "shader-f16" not in gpu.features:
        pytest.skip(f"the adapter ({gpu.info}) offers no shader-f16")
    if mode == "no_half":
        monkeypatch.setattr(gpu, "features", frozenset())
    config, state = tiny_whisper_state(np.random.default_rng(7))
    _, want_features, want = whisper_outputs(state, "numpy", config)          # the float32 weights
    model, features, got = whisper_outputs(state, "webgpu", config)
    np.testing.assert_allclose(features, want_features, rtol=WHISPER_ATOL, atol=WHISPER_ATOL)
    np.testing.assert_allclose(got, want, rtol=WHISPER_ATOL, atol=WHISPER_ATOL)
    attn = model.decoder.blocks[0].attn
    for w in (model.decoder.token_embedding.weight, attn.qkv_weight, attn.query.weight,
              model.decoder.blocks[1].mlp[0].weight):
        assert w.dtype is engine.float16 and w._buf.half == (mode == "half")
    assert attn.query.weight._buf is attn.qkv_weight._buf                    # the stack's row view, no copy


@pytest.mark.slow
def test_whisper_tiny_en_half_on_webgpu_transcribes_as_float32(half):
    """The real tiny.en from the site's float16 safetensors: its weights half-width on the device
    (measured: 130 MB of buffers against 251 MB held as float32), the same transcript as numpy's
    float32 model. ~45 s on lavapipe, 2 cores (the encoder's one window is most of it)."""
    from engine.audio import load_audio
    from tests.whisper_files import built_weights
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = built_weights("tiny.en", folder)
        audio = load_audio(str(webgpu_sample()))[: 16000 * 6]
        want = engine.pipeline("speech-recognition", model="whisper-tiny.en", weights=path, device="numpy")(
            audio, temperature=0.0)
        pipe = engine.pipeline("speech-recognition", model="whisper-tiny.en", weights=path, device="webgpu")
        storages = {id(t._buf): t._buf for t in list(pipe.model.parameters()) + list(pipe.model.buffers())
                    if t is not None}.values()
        halves = [s for s in storages if s.half]
        # per encoder layer the q/k/v stack, out and the mlp's two; per decoder layer also the cross
        # attention's query, k/v stack and out; the token embedding (the output head too)
        assert len(halves) == 4 * 4 + 4 * 7 + 1
        held = sum(s.buf.size for s in storages)
        assert sum(s.buf.size for s in halves) > 0.9 * held
        got = pipe(audio, temperature=0.0)
    assert got["text"] == want["text"] and got["text"].strip().startswith("Four score and seven years ago")


def webgpu_sample():
    from pathlib import Path
    return Path(__file__).resolve().parents[2] / "samples" / "speech" / "gettysburg-en.wav"
