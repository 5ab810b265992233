"""transcribe()'s windows and segments on scripted logits (no model, no reference package): a
fake decoder whose every step makes one planned token the likeliest, so the timestamps, the
segments, the seek advance and the prompts follow the reference's rules by hand."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from engine.speech import SpecialTokens, SpeechTokenizer, transcribe

SPECIALS = SpecialTokens(eot=50256, sot=50257, translate=50357, transcribe=50358, sot_lm=50359, sot_prev=50360,
                         no_speech=50361, no_timestamps=50362, n_vocab=51864, multilingual=False)
BEGIN = SPECIALS.timestamp_begin
TOKENIZER = SpeechTokenizer(SPECIALS, encode=lambda text: [ord(c) for c in text],
                            decode=lambda ids: "".join(f" w{i}" for i in ids), suppress_ids=(), suppress_ids_begin=None)


def ts(seconds: float) -> int:
    return BEGIN + round(seconds / 0.02)


class Scripted:
    """A model and decoder session whose window at `seek` (read from the log-mel, whose first
    bin counts frames) decodes as SCRIPT[seek], then <|endoftext|>."""

    def __init__(self, script):
        self.script, self.prompts = script, []
        self.config = SimpleNamespace(n_mels=80, n_text_ctx=448, n_audio_ctx=1500)
        self.length, self.step, self.window = 0, 0, None

    def encode(self, mel):
        return int(mel[0, 0])

    def set_audio(self, seek):
        self.window, self.length = seek, 0

    def rewind(self, n):
        self.length = n

    def feed(self, tokens, rows=(-1,)):
        if self.length == 0:                    # the initial tokens
            self.prompts.append(list(tokens))
            self.step = 0
        else:
            self.step += 1
        self.length += len(tokens)
        plan = self.script[self.window]
        logits = np.zeros((len(rows), SPECIALS.n_vocab), np.float32)
        logits[-1, plan[self.step] if self.step < len(plan) else SPECIALS.eot] = 30.0
        return logits


def test_windows_segments_seek_and_prompts():
    script = {
        0: [ts(0), 400, 401, ts(1), ts(1), 402, ts(2.5)],          # a single timestamp at the end: next window
        3000: [ts(0), 403, ts(1), ts(2), 404],                     # unfinished: decoded again from 1.00
        3100: [ts(0), 405, 406],                                   # no pair: one segment, to the audio's end
    }
    fake = Scripted(script)
    mel = np.zeros((80, 4000 + 3000), np.float32)                  # 40 s of audio, then 30 s of padding
    mel[0] = np.arange(mel.shape[1])
    seen = []
    result = transcribe(fake, TOKENIZER, mel=mel, session=fake, temperature=0.0, on_segment=seen.append)
    got = [(s["seek"], s["start"], s["end"], s["tokens"]) for s in result["segments"]]
    assert got == [(0, 0.0, 1.0, [ts(0), 400, 401, ts(1)]),
                   (0, 1.0, 2.5, [ts(1), 402, ts(2.5)]),
                   (3000, 30.0, 31.0, [ts(0), 403, ts(1)]),
                   (3100, 31.0, 40.0, [ts(0), 405, 406])]
    assert [s["id"] for s in result["segments"]] == [0, 1, 2, 3] and seen == result["segments"]
    assert result["text"] == "".join(f" w{i}" for i in range(400, 407) if i != 404)
    assert result["language"] == "en"
    previous = [ts(0), 400, 401, ts(1), ts(1), 402, ts(2.5)]
    assert fake.prompts == [[SPECIALS.sot],
                            [SPECIALS.sot_prev, *previous, SPECIALS.sot],
                            [SPECIALS.sot_prev, *previous, ts(0), 403, ts(1), SPECIALS.sot]]


def test_no_prompt_without_condition_and_initial_prompt_first():
    fake = Scripted({0: [ts(0), 400, ts(1)]})
    mel = np.zeros((80, 500 + 3000), np.float32)
    result = transcribe(fake, TOKENIZER, mel=mel, session=fake, temperature=0.0, initial_prompt="hi",
                        condition_on_previous_text=False)
    assert fake.prompts == [[SPECIALS.sot_prev, ord(" "), ord("h"), ord("i"), SPECIALS.sot]]
    assert result["text"] == " w400"
    assert [(s["start"], s["end"]) for s in result["segments"]] == [(0.0, 1.0)]



def test_cancel_stops_before_the_next_token_and_keeps_the_segments_so_far():
    script = {0: [ts(0), 400, ts(1), ts(1), 401, ts(2)], 3000: [ts(0), 402, 403, ts(1)]}
    mel = np.zeros((80, 4000 + 3000), np.float32)
    mel[0] = np.arange(mel.shape[1])
    fake = Scripted(script)
    full = transcribe(fake, TOKENIZER, mel=mel, session=fake, temperature=0.0)
    assert len(full["segments"]) == 3 and "cancelled" not in full
    stop = {"now": False}
    fake = Scripted(script)
    part = transcribe(fake, TOKENIZER, mel=mel, session=fake, temperature=0.0,
                      on_segment=lambda segment: stop.__setitem__("now", True), cancel=lambda: stop["now"])
    assert part["cancelled"] is True
    assert part["segments"] == full["segments"][:2]            # the first window's, then no more
    steps = {"left": 3}

    def cancel():
        steps["left"] -= 1
        return steps["left"] < 0
    fake = Scripted(script)
    early = transcribe(fake, TOKENIZER, mel=mel, session=fake, temperature=0.0, cancel=cancel)
    assert early["cancelled"] is True and early["segments"] == [] and early["text"] == ""
