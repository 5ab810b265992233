"""A transcript as text, JSON, SRT or WebVTT, as OpenAI's writers (whisper/utils.py) write
them without word timestamps: one cue per segment, its text stripped and "-->" made "->".

    write(result, "srt")            # "1\n00:00:00,000 --> 00:00:02,500\n Hello.\n\n..."
    FORMATS                         # ("txt", "json", "srt", "vtt")
"""
from __future__ import annotations

import json

from ..errors import InputError

FORMATS = ("txt", "json", "srt", "vtt")


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """[hh:]mm:ss.mmm, rounded to the millisecond (hours only when nonzero, unless asked)."""
    if seconds < 0:
        raise InputError(f"a timestamp must be >= 0, got {seconds}")
    milliseconds = round(seconds * 1000.0)
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    seconds, milliseconds = divmod(milliseconds, 1_000)
    hours_marker = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{hours_marker}{minutes:02d}:{seconds:02d}{decimal_marker}{milliseconds:03d}"


def _cues(result: dict, always_include_hours: bool, decimal_marker: str):
    for segment in result["segments"]:
        yield (format_timestamp(segment["start"], always_include_hours, decimal_marker),
               format_timestamp(segment["end"], always_include_hours, decimal_marker),
               segment["text"].strip().replace("-->", "->"))


def to_txt(result: dict) -> str:
    """Each segment's text on its own line."""
    return "".join(segment["text"].strip() + "\n" for segment in result["segments"])


def to_json(result: dict) -> str:
    return json.dumps(result)


def to_srt(result: dict) -> str:
    """SubRip: numbered cues, hh:mm:ss,mmm."""
    return "".join(f"{i}\n{start} --> {end}\n{text}\n\n"
                   for i, (start, end, text) in enumerate(_cues(result, True, ","), start=1))


def to_vtt(result: dict) -> str:
    """WebVTT: a WEBVTT header, then cues in mm:ss.mmm (hours when needed)."""
    return "WEBVTT\n\n" + "".join(f"{start} --> {end}\n{text}\n\n" for start, end, text in _cues(result, False, "."))


def write(result: dict, format: str) -> str:
    """The transcript in `format` (one of FORMATS) as a string."""
    writers = {"txt": to_txt, "json": to_json, "srt": to_srt, "vtt": to_vtt}
    if format not in writers:
        raise InputError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    return writers[format](result)
