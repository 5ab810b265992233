"""The layout of the "select_token" kernel's buffers (engine.ops), and its NumPy reference
(the numpy backend's kernel): the next token from one position's logits. engine/sampler.py
says what it is for and what it computes; shaders/select_token.wgsl is the webgpu backend's.
"""
from __future__ import annotations

import numpy as np

# config's fields, then its uniform draws
TEMPERATURE, TOP_K, TOP_P, REPETITION, PRESENCE, FREQUENCY, WHISPER, BEGIN, EOT, NO_TIMESTAMPS, \
    MAX_INITIAL, VOCAB = range(12)
CONFIG = 16
UNIFORMS = 512                         # draws kept on the device; a longer sequence wraps around (refilled)
# state's fields
COUNT, LAST, PENULTIMATE, LAST_TIMESTAMP = range(4)
STATE = 8
SEEN, SUPPRESS, SUPPRESS_FIRST, COUNT_UNIT = 1, 2, 4, 256
OUT = 4                                # token, log-probability, 0, 0



# --- the kernel's NumPy reference --------------------------------------------------------------
def select_token(logits, marks, state, config, ids, positions) -> np.ndarray:
    """One step on NumPy arrays (the numpy backend's "select_token"): marks, state, ids and
    positions are written in place; returns [token, log-probability, 0, 0] float32."""
    vocab = int(config[VOCAB])
    l = np.asarray(logits, np.float64).reshape(-1)[:vocab].copy()
    m = marks[:vocab]
    n = int(state[COUNT])
    if config[REPETITION] != 1.0:
        seen = (m & SEEN) != 0
        l[seen] = np.where(l[seen] > 0, l[seen] / config[REPETITION], l[seen] * config[REPETITION])
    counts = m >> 8
    if config[PRESENCE] or config[FREQUENCY]:
        l -= config[PRESENCE] * (counts > 0) + config[FREQUENCY] * counts
    excluded = (m & SUPPRESS) != 0
    if n == 0:
        excluded |= (m & SUPPRESS_FIRST) != 0
    l[excluded] = -np.inf
    begin = int(config[BEGIN])
    if config[WHISPER]:
        _timestamp_rules(l, n, int(state[LAST]), int(state[PENULTIMATE]), int(state[LAST_TIMESTAMP]), begin,
                         int(config[EOT]), int(config[NO_TIMESTAMPS]), int(config[MAX_INITIAL]))
    token = _choose(l, config, n)
    finite = l[np.isfinite(l)]
    top = finite.max() if finite.size else 0.0
    logprob = l[token] - top - np.log(np.exp(finite - top).sum()) if finite.size else -np.inf
    marks[token] = (marks[token] | SEEN) + COUNT_UNIT
    state[COUNT], state[PENULTIMATE], state[LAST] = n + 1, state[LAST], token
    if config[WHISPER] and token >= begin:
        state[LAST_TIMESTAMP] = token
    ids.reshape(-1)[0] = token
    positions.reshape(-1)[0] += 1
    return np.array([token, logprob, 0, 0], np.float32)


def _timestamp_rules(l, n, last, penultimate, last_timestamp, begin, eot, no_timestamps, max_initial) -> None:
    l[no_timestamps] = -np.inf
    last_was = n >= 1 and last >= begin
    penultimate_was = n < 2 or penultimate >= begin
    if last_was:
        if penultimate_was:
            l[begin:] = -np.inf
        else:
            l[:eot] = -np.inf
    if last_timestamp >= 0:
        end = last_timestamp if last_was and not penultimate_was else last_timestamp + 1
        l[begin:end] = -np.inf
    if n == 0:
        l[:begin] = -np.inf
        if max_initial >= 0:
            l[begin + max_initial + 1:] = -np.inf
    stamps = l[begin:]
    top = stamps.max() if stamps.size else -np.inf
    if np.isfinite(top) and top + np.log(np.exp(stamps - top).sum()) > l[:begin].max():
        l[:begin] = -np.inf


def _choose(l, config, n) -> int:
    temperature = float(config[TEMPERATURE])
    if temperature == 0.0:
        return int(np.argmax(l))
    v = l / temperature
    k = int(config[TOP_K])
    if 0 < k < v.size:
        v[v < np.partition(v, -k)[-k]] = -np.inf
    weights = np.exp(v - v.max())
    if config[TOP_P] < 1.0:
        order = np.sort(v[np.isfinite(v)])[::-1]
        mass = np.cumsum(np.exp(order - v.max()))
        last = order[min(int(np.searchsorted(mass, config[TOP_P] * weights.sum())), order.size - 1)]
        weights[v < last] = 0.0
    cumulative = np.cumsum(weights)
    u = float(config[CONFIG + n % UNIFORMS])
    return min(int(np.searchsorted(cumulative, u * cumulative[-1], side="right")), v.size - 1)
