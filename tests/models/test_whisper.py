"""models/whisper.py against openai-whisper's model (a tiny random config on every backend, and
the real tiny.en and base weights) and transformers' WhisperForConditionalGeneration (tiny.en);
engine.speech.decoder's cached, graph-replayed decode steps against the reference's full pass."""
import numpy as np
import pytest

import engine
import engine.audio
from engine.errors import InputError, InvalidHeader
from engine.speech.decoder import DecoderSession
from models import whisper as W
from tests.helpers import need_import

torch = need_import("torch")
openai_whisper = need_import("whisper", "the reference openai-whisper (pip install --no-deps openai-whisper)")

TINY = W.Config(n_mels=80, n_audio_ctx=24, n_audio_state=128, n_audio_head=2, n_audio_layer=2, n_vocab=51865,
                n_text_ctx=40, n_text_state=128, n_text_head=2, n_text_layer=2)


def reference_model(config: W.Config, state: dict | None = None):
    """openai-whisper's Whisper with `config`'s dimensions: random (seeded, LayerNorms away from
    1/0) or with `state` (NumPy arrays by OpenAI's names)."""
    dims = openai_whisper.model.ModelDimensions(**{f: getattr(config, f) for f in config.__dataclass_fields__})
    torch.manual_seed(0)
    model = openai_whisper.model.Whisper(dims).eval()
    with torch.no_grad():
        if state is None:
            for name, p in model.named_parameters():
                if "ln" in name:
                    p.add_(torch.randn_like(p) * 0.2)
                elif name.endswith("positional_embedding"):
                    p.copy_(torch.randn_like(p) * 0.1)
        else:
            model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return model


def state_of(model) -> dict:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def ours(state: dict, device) -> W.Whisper:
    return W.load({k: engine.from_numpy(v) for k, v in state.items()}, device)


@pytest.fixture(scope="module")
def tiny_reference():
    return reference_model(TINY)


@pytest.mark.parametrize("device", engine.available_devices())
def test_tiny_random_matches_openai(tiny_reference, device):
    rng = np.random.default_rng(3)
    mel = rng.standard_normal((TINY.n_mels, 2 * TINY.n_audio_ctx)).astype(np.float32)
    tokens = [50258, 50259, 50359, 50364, 1012, 345, 11, 51000]
    with torch.no_grad():
        features = tiny_reference.encoder(torch.from_numpy(mel[None]))
        logits = tiny_reference.decoder(torch.tensor([tokens]), features).numpy()[0]
    model = ours(state_of(tiny_reference), device)
    got = model.encode(mel)
    np.testing.assert_allclose(got.numpy(), features.numpy(), rtol=1e-4, atol=1e-4)

    session = DecoderSession(model)
    session.set_audio(got)
    first = session.feed(tokens[:4], rows=(0, -1))                    # a prompt, its first and last rows
    np.testing.assert_allclose(first, logits[[0, 3]], rtol=1e-4, atol=1e-4)
    for i, token in enumerate(tokens[4:], 4):                        # decode steps (captured, replayed)
        np.testing.assert_allclose(session.feed([token])[0], logits[i], rtol=1e-4, atol=1e-4)
    assert session.captured or device == "webgpu" or not session.steps.enabled
    session.rewind(3)                                                # the same window again from the prompt
    np.testing.assert_allclose(session.feed(tokens[3:6], rows=(-1,))[0], logits[5], rtol=1e-4, atol=1e-4)


def test_session_keeps_its_buffers_across_windows(tiny_reference):
    """A new window writes the cross K/V into the same buffers, so the captured steps read it."""
    rng = np.random.default_rng(4)
    mels = [rng.standard_normal((TINY.n_mels, 2 * TINY.n_audio_ctx)).astype(np.float32) for _ in range(2)]
    model = ours(state_of(tiny_reference), "numpy")
    session = DecoderSession(model)
    for mel in mels:
        with torch.no_grad():
            want = tiny_reference.decoder(torch.tensor([[50258, 50359, 400, 401]]),
                                          tiny_reference.encoder(torch.from_numpy(mel[None]))).numpy()[0]
        session.set_audio(model.encode(mel))
        session.feed([50258, 50359])
        got = [session.feed([t])[0] for t in (400, 401)]
        np.testing.assert_allclose(np.stack(got), want[2:], rtol=1e-4, atol=1e-4)
    assert len(session.steps.graphs) == 1


def test_session_and_encoder_errors(tiny_reference):
    model = ours(state_of(tiny_reference), "numpy")
    session = DecoderSession(model)
    with pytest.raises(InputError, match="set_audio"):
        session.feed([1])
    session.set_audio(model.encode(np.zeros((80, 48), np.float32)))
    with pytest.raises(InputError, match="at least one"):
        session.feed([])
    with pytest.raises(InputError, match="row 5"):
        session.feed([1, 2], rows=(5,))
    with pytest.raises(InputError, match="do not fit"):
        session.feed(list(range(TINY.n_text_ctx + 1)))
    with pytest.raises(InputError, match="rewind"):
        session.rewind(3)
    with pytest.raises(InputError, match="log-mel of shape"):
        model.encode(np.zeros((40, 48), np.float32))
    with pytest.raises(InputError, match="mel frames"):
        model.encode(np.zeros((80, 50), np.float32))


def test_config_and_ctranslate2_errors(tiny_reference):
    state = {k: engine.from_numpy(v) for k, v in state_of(tiny_reference).items()}
    assert W.Config.from_tensors(state) == TINY
    with pytest.raises(InvalidHeader, match="encoder.conv1.weight"):
        W.Config.from_tensors({k: v for k, v in state.items() if k != "encoder.conv1.weight"})
    ct2 = {"encoder/num_heads": engine.tensor(3, dtype=engine.int16),
           "encoder/layer_norm/gamma": engine.ones(128)}
    with pytest.raises(InvalidHeader, match="encoder/num_heads = 3"):
        W.from_ctranslate2(ct2)
    with pytest.raises(InvalidHeader, match="no variable"):
        W.from_ctranslate2({"encoder/layer_norm/gamma": engine.ones(128)})


# --- the real weights -------------------------------------------------------------------------
def speech_mel(tmp_path, text: str, voice: str = "en") -> np.ndarray:
    """A spoken sentence's log-mel (80, 3000), as the pipeline makes it."""
    from tests.audio.clips import speak
    audio = engine.audio.load_audio(speak(text, tmp_path / "clip.wav", voice))
    return engine.audio.log_mel_spectrogram(engine.audio.pad_or_trim(audio), 80)


@pytest.fixture(scope="module")
def mel(tmp_path_factory):
    return speech_mel(tmp_path_factory.mktemp("speech"), "The quick brown fox jumps over the lazy dog.")


def real(folder):
    tensors = engine.load_safetensors(folder / "model.safetensors.index.json")
    return {k: tensors[k].numpy().astype(np.float32) for k in tensors}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["whisper-tiny.en", "whisper-base"])
def test_real_weights_match_openai(whisper_folder, mel, name):
    state = real(whisper_folder(name))
    config = W.Config.from_tensors({k: engine.from_numpy(v) for k, v in state.items()})
    reference = reference_model(config, state)
    sot = 50257 if name.endswith(".en") else 50258
    tokens = [sot, sot + 1, sot + 2, 440, 2068, 7586]                    # a prompt and a few words
    with torch.no_grad():
        features = reference.encoder(torch.from_numpy(mel[None]))
        logits = reference.decoder(torch.tensor([tokens]), features).numpy()[0]
    model = W.load(whisper_folder(name) / "model.safetensors.index.json", "simd")
    got = model.encode(mel)
    np.testing.assert_allclose(got.numpy(), features.numpy(), rtol=0, atol=5e-3 * float(features.abs().max()))
    session = DecoderSession(model)
    session.set_audio(got)
    rows = session.feed(tokens, rows=tuple(range(len(tokens))))
    np.testing.assert_allclose(rows, logits, rtol=0, atol=2e-3 * float(np.abs(logits).max()))
    assert (rows.argmax(-1) == logits.argmax(-1)).all()


def hf_names(state: dict, config: W.Config) -> dict:
    """OpenAI's names -> transformers' WhisperForConditionalGeneration names."""
    out = {}
    parts = {"attn.query": "self_attn.q_proj", "attn.key": "self_attn.k_proj", "attn.value": "self_attn.v_proj",
             "attn.out": "self_attn.out_proj", "attn_ln": "self_attn_layer_norm",
             "cross_attn.query": "encoder_attn.q_proj", "cross_attn.key": "encoder_attn.k_proj",
             "cross_attn.value": "encoder_attn.v_proj", "cross_attn.out": "encoder_attn.out_proj",
             "cross_attn_ln": "encoder_attn_layer_norm", "mlp.0": "fc1", "mlp.2": "fc2", "mlp_ln": "final_layer_norm"}
    fixed = {"encoder.positional_embedding": "model.encoder.embed_positions.weight",
             "encoder.ln_post.weight": "model.encoder.layer_norm.weight",
             "encoder.ln_post.bias": "model.encoder.layer_norm.bias",
             "decoder.token_embedding.weight": "model.decoder.embed_tokens.weight",
             "decoder.positional_embedding": "model.decoder.embed_positions.weight",
             "decoder.ln.weight": "model.decoder.layer_norm.weight", "decoder.ln.bias": "model.decoder.layer_norm.bias"}
    for name, value in state.items():
        if name in fixed:
            out[fixed[name]] = value
        elif ".blocks." in name:
            side, _, i, rest = name.split(".", 3)
            part, leaf = rest.rsplit(".", 1)
            out[f"model.{side}.layers.{i}.{parts[part]}.{leaf}"] = value
        else:
            out[f"model.{name}"] = value                                   # encoder.conv1/conv2
    out["proj_out.weight"] = state["decoder.token_embedding.weight"]
    return out


@pytest.mark.slow
def test_tiny_en_matches_transformers(whisper_folder, mel):
    transformers = need_import("transformers")
    state = real(whisper_folder("whisper-tiny.en"))
    c = W.Config.from_tensors({k: engine.from_numpy(v) for k, v in state.items()})
    hf = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        vocab_size=c.n_vocab, num_mel_bins=c.n_mels, d_model=c.n_audio_state, encoder_layers=c.n_audio_layer,
        encoder_attention_heads=c.n_audio_head, decoder_layers=c.n_text_layer, decoder_attention_heads=c.n_text_head,
        encoder_ffn_dim=4 * c.n_audio_state, decoder_ffn_dim=4 * c.n_text_state, max_source_positions=c.n_audio_ctx,
        max_target_positions=c.n_text_ctx, activation_function="gelu")).eval()
    missing, unexpected = hf.load_state_dict({k: torch.from_numpy(v) for k, v in hf_names(state, c).items()},
                                             strict=False)
    assert not unexpected and all("k_proj.bias" in m for m in missing)     # keys have no bias in Whisper
    tokens = [50257, 50362, 440, 2068, 7586]
    with torch.no_grad():
        want = hf(input_features=torch.from_numpy(mel[None]), decoder_input_ids=torch.tensor([tokens])).logits[0].numpy()
    model = W.load(whisper_folder("whisper-tiny.en") / "model.safetensors.index.json", "numpy")
    session = DecoderSession(model)
    session.set_audio(model.encode(mel))
    got = session.feed(tokens, rows=tuple(range(len(tokens))))
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * float(np.abs(want).max()))
