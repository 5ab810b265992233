"""Live dictation's delay in headless Chromium: from the end of each utterance's speech to its text
on the Speech card, with Chromium's fake microphone playing espeak-ng sentences with pauses.

    python scripts/dictation_bench.py [--site dist] [--model whisper-tiny.en] [--threads 1] [--json out.json]

The clip: SENTENCES spoken one by one by espeak-ng, --pause seconds of silence between them and
3 s after the last (the fake device loops it). The card records until every sentence's draft has
come, then stops. Per utterance: the delay (the seconds recorded when its text came, less where
its speech ended), and of it the transcription's time in the worker; the rest is the voice
activity's wait (the pause that closes an utterance, its padding), the microphone's 64 ms chunks
and the queue. Prints the medians over all utterances. The machine's load is printed before and
after: a shared machine's numbers hold only within one run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from tests.audio.clips import speak  # noqa: E402
from tests.audio.wavs import wav  # noqa: E402
from tests.web.conftest import BASE_ARGS, CHROMIUM, start_dev_server  # noqa: E402

SENTENCES = ["Good morning, everyone.", "Please call me back when you have a minute.",
             "The meeting starts at ten o'clock.", "Bring the report and the slides.",
             "We will talk about the budget for next year.", "Lunch is at noon in the small room.",
             "Thank you for coming today.", "See you all next week."]


def clip(folder: Path, pause: float) -> Path:
    from engine.audio import load_audio
    parts = []
    for i, text in enumerate(SENTENCES):
        gap = 3.0 if i == len(SENTENCES) - 1 else pause
        parts += [load_audio(speak(text, folder / f"{i}.wav")), np.zeros(int(gap * 16000), np.float32)]
    path = folder / "dictation.wav"
    path.write_bytes(wav((np.clip(np.concatenate(parts), -1, 1) * 32767).astype("<i2").tobytes()))
    return path


def run(site: Path, model: str, threads: int, pause: float) -> dict:
    from playwright.sync_api import sync_playwright
    folder = Path(tempfile.mkdtemp())
    audio = clip(folder, pause)
    served = start_dev_server(site)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=BASE_ARGS + [
                "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
                f"--use-file-for-fake-audio-capture={audio}"])
            context = browser.new_context()
            context.grant_permissions(["microphone"])
            page = context.new_page()
            page.goto(f"{served.url}index.html?threads={threads}#speech")
            page.wait_for_selector("[data-testid=speech-model-choice]:not([hidden])", timeout=300_000)
            page.select_option("[data-testid=speech-model]", model)
            page.wait_for_function("!document.querySelector('[data-testid=speech-model]').disabled", timeout=300_000)
            page.click("[data-testid=speech-record]")
            page.wait_for_function(f"document.querySelectorAll('[data-testid=speech-segments] li.draft').length >= "
                                   f"{len(SENTENCES)}", timeout=600_000)
            drafts = page.evaluate("""() => [...document.querySelectorAll('[data-testid=speech-segments] li.draft')]
                .map((li) => ({text: li.querySelector('.text').textContent, start: Number(li.dataset.start),
                               latency: Number(li.dataset.latency), seconds: Number(li.dataset.seconds)}))""")
            page.click("[data-testid=speech-stop-recording]")
            page.wait_for_function("document.querySelector('[data-testid=speech-segments]').dataset.state === 'done'",
                                   timeout=300_000)
            final = page.get_attribute("[data-testid=speech-segments]", "data-text")
            browser.close()
    finally:
        served.stop()
    delay = statistics.median(d["latency"] for d in drafts)
    seconds = statistics.median(d["seconds"] for d in drafts)
    return {"model": model, "threads": threads, "pause_s": pause, "utterances": drafts, "final": final,
            "median_delay_s": round(delay, 3), "median_transcription_s": round(seconds, 3),
            "median_rest_s": round(statistics.median(d["latency"] - d["seconds"] for d in drafts), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", default=str(ROOT / "dist"))
    ap.add_argument("--model", default="whisper-tiny.en")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pause", type=float, default=1.5, help="seconds of silence between the sentences")
    ap.add_argument("--json", default=None, help="also write the result here")
    args = ap.parse_args()
    load = Path("/proc/loadavg").read_text().split()[:3]
    result = run(Path(args.site), args.model, args.threads, args.pause)
    result["load"] = [load, Path("/proc/loadavg").read_text().split()[:3]]
    for d in result["utterances"]:
        print(f"{d['start']:7.2f} s  delay {d['latency']:5.2f} s (transcription {d['seconds']:5.2f} s)  {d['text']}")
    print(f"{args.model}, {args.threads} thread(s): median delay {result['median_delay_s']:.2f} s "
          f"(transcription {result['median_transcription_s']:.2f} s, the rest "
          f"{result['median_rest_s']:.2f} s); load {result['load'][0]} -> {result['load'][1]}")
    print(f"final: {result['final']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
