"""Whisper's encoder and decode step on a device, per model size: random weights of the real
dimensions (the timing does not depend on the values), so it runs where the built weights cannot
travel (a borrowed GPU machine); webgpu and numpy by default.

    python scripts/speech_device_bench.py out.json [webgpu,numpy,simd]

An estimate of the 28 s speech sample's time: one encoder window plus 112 decode steps (what
`python -m engine bench whisper` counts on it). docs/webgpu.md has its numbers on an H100."""
import json, sys, time
import numpy as np
import engine
import models.whisper as W
from engine.speech.decoder import DecoderSession

SIZES = {"tiny.en": W.Config(n_audio_state=384, n_audio_head=6, n_audio_layer=4, n_vocab=51864, n_text_state=384,
                             n_text_head=6, n_text_layer=4), "base": W.Config()}
TOKENS = 112                                   # what the 28 s sample takes (bench whisper, tiny.en and base)
out = {"devices": engine.available_devices()}
rng = np.random.default_rng(0)
for name, config in SIZES.items():
    model = W.Whisper(config)
    state = {k: engine.from_numpy((rng.standard_normal(t.shape) * 0.02).astype(np.float32))
             for k, t in model.state_dict().items()}
    mel = rng.standard_normal((80, 3000)).astype(np.float32)
    for device in [d for d in (sys.argv[2].split(",") if len(sys.argv) > 2 else ("webgpu", "numpy")) if d in out["devices"]]:
        m = W.load(state, device)
        m.encode(mel).numpy()                 # warm: pipelines compiled
        runs = []
        for _ in range(3):
            t = time.perf_counter(); f = m.encode(mel); f.numpy(); runs.append(time.perf_counter() - t)
        session = DecoderSession(m)
        session.set_audio(f)
        session.feed([50257, 50258, 50359])
        for i in range(8):                    # capture the step graphs (windows 64, 128)
            session.feed([400 + i])
        session.rewind(3)
        t = time.perf_counter()
        for i in range(TOKENS):
            logits = session.feed([int(400 + i % 50)])
        step = (time.perf_counter() - t) / TOKENS
        enc = float(np.median(runs))
        out[f"{name}/{device}"] = {"encode_s": round(enc, 4), "step_ms": round(step * 1e3, 3),
                                  "est_seconds_28s": round(enc + TOKENS * step, 3),
                                  "est_rtf": round((enc + TOKENS * step) / 27.988, 4), "graphs": session.captured}
        print(name, device, out[f"{name}/{device}"], flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
