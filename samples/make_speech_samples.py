"""Speak the speech samples with espeak-ng and write them as 16 kHz mono 16-bit WAVs.

    python samples/make_speech_samples.py

The texts are in the public domain. The WAVs are committed (espeak-ng's voice changes between
its versions, so each machine making its own would get other audio), and serve the page's
"Try a sample", the speech benchmarks natively and in the browser, and the tests. Synthetic
speech is robotic: compare implementations on it, not the typed text. Needs the Debian
packages espeak-ng and sox.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "speech"

SAMPLES = [  # file, espeak-ng voice, text, title
    ("gettysburg-en.wav", "en-us",
     "Four score and seven years ago our fathers brought forth on this continent, a new nation, conceived in "
     "Liberty, and dedicated to the proposition that all men are created equal. Now we are engaged in a great "
     "civil war, testing whether that nation, or any nation so conceived and so dedicated, can long endure. "
     "We are met on a great battle-field of that war. We have come to dedicate a portion of that field, as a "
     "final resting place for those who here gave their lives that that nation might live.",
     "Lincoln, the Gettysburg Address (English, 28 s)"),
    ("declaration-fr.wav", "fr",
     "Les hommes naissent et demeurent libres et égaux en droits. Les distinctions sociales ne peuvent être "
     "fondées que sur l'utilité commune.",
     "Déclaration des droits de l'homme, article premier (French, 6 s)"),
]


def main() -> None:
    HERE.mkdir(exist_ok=True)
    listing = []
    for file, voice, text, title in SAMPLES:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "espeak.wav"
            subprocess.run(["espeak-ng", "-v", voice, "-w", str(raw), text], check=True)
            subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer",
                            str(HERE / file)], check=True)
        listing.append({"file": file, "title": title, "text": text, "voice": voice})
    (HERE / "samples.json").write_text(json.dumps(listing, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
