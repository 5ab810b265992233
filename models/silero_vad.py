"""Silero VAD v6 (16 kHz): the probability that each 32 ms of audio is speech.

Silero Team, "Silero VAD: pre-trained enterprise-grade Voice Activity Detector" (2021-2025,
github.com/snakers4/silero-vad); the reference is the `silero-vad` package (PyPI 6.2.3, MIT),
whose safetensors (`silero_vad/data/silero_vad_16k.safetensors`, 15 float32 tensors) this reads
by its own names. The network, as that package's tinygrad twin writes it:

    a 512-sample chunk with the previous chunk's last 64 samples before it (576),
    reflect-padded by 64 on the right (640)
    -> an STFT as a convolution (258 filters of 256, stride 128): 129 real and 129 imaginary parts
    -> their magnitude (129 x 4 frames)
    -> four convolutions with ReLU (129 -> 128 -> 64 -> 64 -> 128, kernel 3; the middle two stride 2)
    -> an LSTM cell (128), its state carried from chunk to chunk
    -> ReLU, a 1x1 convolution and a sigmoid: the speech probability of the chunk

`SileroVAD.step` is one chunk and the state carried; `SileroVAD.run` is many chunks of one stream
at once, as engine/tasks/voice_activity.py runs a whole recording (the last chunk zero-padded, as
the reference's `audio_forward` does) or a stream as its audio comes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import engine
import engine.nn as nn
import engine.nn.functional as F
from engine import registry


@dataclass(frozen=True)
class Config:
    sample_rate: int = 16000
    chunk: int = 512            # samples per probability (32 ms)
    context: int = 64           # samples of the previous chunk before each
    n_fft: int = 256
    hop: int = 128
    hidden: int = 128           # the LSTM's width


class LSTMCell(nn.Module):
    """torch.nn.LSTMCell's parameters and gates (input, forget, cell, output)."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.weight_ih = self.param(4 * hidden_size, input_size)
        self.weight_hh = self.param(4 * hidden_size, hidden_size)
        self.bias_ih = self.param(4 * hidden_size)
        self.bias_hh = self.param(4 * hidden_size)

    def forward(self, x, h, c):
        gates = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(h, self.weight_hh, self.bias_hh)  # (B, 4H)
        i, f, g, o = engine.chunk(gates, 4, dim=1)                                                      # (B, H) each
        c = engine.sigmoid(f) * c + engine.sigmoid(i) * engine.tanh(g)                                  # (B, H)
        h = engine.sigmoid(o) * engine.tanh(c)                                                          # (B, H)
        return h, c


class SileroVAD(nn.Module):
    block = 1024                # chunks whose convolutions run at once in run() (33 s, ~7 MB)

    def __init__(self, config: Config = Config()):
        super().__init__()
        self.config = config
        bins = config.n_fft // 2 + 1                                                   # 129
        self.stft_conv = nn.Conv1d(1, 2 * bins, config.n_fft, stride=config.hop, bias=False)
        self.conv1 = nn.Conv1d(bins, 128, 3, padding=1)
        self.conv2 = nn.Conv1d(128, 64, 3, stride=2, padding=1)
        self.conv3 = nn.Conv1d(64, 64, 3, stride=2, padding=1)
        self.conv4 = nn.Conv1d(64, config.hidden, 3, padding=1)
        self.lstm_cell = LSTMCell(config.hidden, config.hidden)
        self.final_conv = nn.Conv1d(config.hidden, 1, 1)

    def forward(self, x, h, c):
        """x: (B, context + chunk) samples; h, c: (B, hidden) -> (probability (B,), h, c)."""
        x = self.features(x)                                                         # (B, 128)
        h, c = self.lstm_cell(x, h, c)                                               # (B, 128) each
        p = engine.sigmoid(self.final_conv(engine.relu(h).unsqueeze(-1)))            # (B, 1, 1)
        return p.reshape(-1), h, c

    def features(self, x):
        """x: (N, context + chunk) samples -> the LSTM's inputs (N, hidden), every chunk at once."""
        bins = self.config.n_fft // 2 + 1
        x = F.pad(x, (0, self.config.context), mode="reflect").unsqueeze(1)          # (N, 1, 640)
        x = self.stft_conv(x)                                                        # (N, 258, 4)
        x = engine.sqrt(x[:, :bins] ** 2 + x[:, bins:] ** 2)                         # (N, 129, 4)
        x = engine.relu(self.conv1(x))                                               # (N, 128, 4)
        x = engine.relu(self.conv2(x))                                               # (N, 64, 2)
        x = engine.relu(self.conv3(x))                                               # (N, 64, 1)
        return engine.relu(self.conv4(x)).squeeze(-1)                                # (N, 128)

    def run(self, samples: np.ndarray, state):
        """N consecutive chunks of one stream, samples (N * chunk,) float32, and the state before
        them -> (probabilities (N,), the state after): the same as N calls of step(). The
        convolutions see every chunk at once; only the LSTM's recurrence goes chunk by chunk, in
        NumPy (a 128-wide cell: a step costs microseconds, an engine call each would cost more)."""
        cfg = self.config
        context, h, c = state
        chunks = np.asarray(samples, np.float32).reshape(-1, cfg.chunk)              # (N, 512)
        n = chunks.shape[0]
        if n == 0:
            return np.zeros(0, np.float32), state
        before = np.concatenate([context[:1], chunks[:-1, -cfg.context:]])           # (N, 64)
        x = np.concatenate([before, chunks], axis=1)                                 # (N, 576)
        device = self.stft_conv.weight.device
        inputs = np.concatenate([self.features(engine.tensor(x[at:at + self.block], device=device)).numpy()
                                 for at in range(0, n, self.block)])                 # (N, 128)
        cell = self.lstm_cell
        gates_in = (inputs @ cell.weight_ih.numpy().T + cell.bias_ih.numpy()
                    + cell.bias_hh.numpy())                                          # (N, 4H)
        w_hh = np.ascontiguousarray(cell.weight_hh.numpy().T)                        # (H, 4H)
        hs = np.empty((n, cfg.hidden), np.float32)
        hn, cn = h.numpy()[0], c.numpy()[0]                                          # (H,) each
        sigmoid = lambda v: 0.5 + 0.5 * np.tanh(0.5 * v)                             # noqa: E731
        for t in range(n):
            i, f, g, o = np.split(gates_in[t] + hn @ w_hh, 4)                        # (H,) each
            cn = sigmoid(f) * cn + sigmoid(i) * np.tanh(g)
            hn = sigmoid(o) * np.tanh(cn)
            hs[t] = hn
        w, b = self.final_conv.weight.numpy()[0, :, 0], self.final_conv.bias.numpy()  # (H,), (1,)
        p = sigmoid(np.maximum(hs, 0) @ w + b).astype(np.float32)                    # (N,)
        state = (chunks[-1:, -cfg.context:].copy(), engine.tensor(hn[None].astype(np.float32), device=device),
                 engine.tensor(cn[None].astype(np.float32), device=device))
        return p, state

    def initial_state(self, batch: int = 1):
        """(samples of context, h, c) before the first chunk: zeros."""
        cfg, device = self.config, self.stft_conv.weight.device
        zeros = np.zeros((batch, cfg.hidden), np.float32)
        return (np.zeros((batch, cfg.context), np.float32), engine.tensor(zeros, device=device),
                engine.tensor(zeros, device=device))

    def step(self, chunk: np.ndarray, state):
        """One chunk (B, 512) float32 and the state before it -> (probabilities (B,), the state after)."""
        context, h, c = state
        x = np.concatenate([context, chunk], axis=1)                                 # (B, 576)
        p, h, c = self(engine.tensor(x, device=self.stft_conv.weight.device), h, c)
        return p.numpy(), (x[:, -self.config.context:], h, c)


def load(weights, device: str | None = None, config: Config = Config()) -> SileroVAD:
    """SileroVAD with `weights`: a mapping by checkpoint name, or a safetensors file or URL."""
    import os
    tensors = engine.load_safetensors(weights) if isinstance(weights, (str, os.PathLike)) else weights
    model = SileroVAD(config)
    model.load_state_dict(tensors)
    return model.to(device) if device else model


ENTRY = registry.Model(
    name="silero_vad",
    tasks=("voice-activity",),
    pipeline="voice-activity",
    title="Voice activity · Silero VAD v6",
    license="MIT",
    load=load,
    sources=(registry.Source("pypi", "silero-vad", "6.2.3", {
        "weights": "silero_vad/data/silero_vad_16k.safetensors",
    }, why="Silero VAD v6, 16 kHz: 15 float32 tensors, 1.2 MB"),),
    sha256="c59271c284ae9c8335d795d60e0bfdb71aaaceec578d9bd9ffc1b8153c319ea1",
)
