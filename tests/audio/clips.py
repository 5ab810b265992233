"""Test audio made by real tools: speech by espeak-ng, conversions by sox.

    from tests.audio.clips import speak, sox
    speak("Hello world.", tmp_path / "hello.wav")          # 16 kHz mono 16-bit WAV

Both tools are Debian packages (scripts/test.sh installs them); without them a test skips
saying why, and fails under CI (tests/helpers.need).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.helpers import need


def tool(name: str) -> str:
    """The path of a command-line tool the test needs, under need()'s rule."""
    path = shutil.which(name)
    need(path is not None, f"the test needs the {name} command (Debian package {name})")
    return path


def sox(*args) -> None:
    """Run sox with these arguments (paths or strings); a failure shows sox's own message."""
    done = subprocess.run([tool("sox"), *map(str, args)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"sox {' '.join(map(str, args))} failed: {done.stderr}"


def speak(text: str, path, voice: str = "en", *, rate: int = 16000) -> Path:
    """`text` spoken by espeak-ng in `voice` ("en", "fr", ...), written to `path` as a mono
    16-bit PCM WAV at `rate` Hz (resampled by sox from espeak-ng's 22050 Hz). Returns the path."""
    path = Path(path)
    raw = path.with_name(path.stem + ".espeak.wav")
    done = subprocess.run([tool("espeak-ng"), "-v", voice, "-w", str(raw), text], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"espeak-ng -v {voice} failed: {done.stderr}"
    sox(raw, "-r", rate, "-c", 1, "-b", 16, "-e", "signed-integer", path)
    raw.unlink()
    return path


def tone(path, frequency: float, *, seconds: float = 1.0, rate: int = 16000, channels: int = 1,
         bits: int = 16, encoding: str = "signed-integer", volume: float = 0.5) -> Path:
    """A sine tone synthesised by sox, written as a WAV of the given format. Returns the path."""
    sox("-n", "-r", rate, "-c", channels, "-b", bits, "-e", encoding, path,
        "synth", seconds, "sine", frequency, "vol", volume)
    return Path(path)
