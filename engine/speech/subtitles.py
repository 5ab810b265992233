"""A transcript as text, JSON, SRT or WebVTT, as OpenAI's writers (whisper/utils.py) write them.

    write(result, "srt")            # "1\n00:00:00,000 --> 00:00:02,500\n Hello.\n\n..."
    write(result, "vtt", highlight_words=True)    # a cue per word, the word spoken <u>underlined</u>
    FORMATS                         # ("txt", "json", "srt", "vtt")

Without word timestamps a cue is a segment, its text stripped and "-->" made "->". With them
(segments with "words", engine.speech.timing) the cues are made of words: one per segment, or,
given both max_line_width and max_line_count, lines of at most max_line_width characters and
cues of at most max_line_count lines, a pause over 3 s starting a new cue; max_words_per_line
cuts a segment's words into cues (lines) of that many. highlight_words gives a cue per word
timing, that word underlined, and the gaps between words as cues of the plain text.
"""
from __future__ import annotations

import json
import re

from ..errors import InputError

FORMATS = ("txt", "json", "srt", "vtt")
LONG_PAUSE_S = 3.0                      # with lines laid out: a pause this long starts a new cue


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


def _word_groups(segments: list[dict], max_line_width: int | None, max_line_count: int | None,
                 max_words_per_line: int | None):
    """The words of the segments as cues: lists of word timings (copies), a line break written as
    "\\n" before the word that starts a line, the first word of a line stripped."""
    keep_segments = max_line_count is None or max_line_width is None
    width = max_line_width or 1000
    per_line = max_words_per_line or 1000
    line_length, line_count, cue = 0, 1, []
    last = next((w["start"] for s in segments for w in s["words"]), segments[0]["start"] if segments else None) or 0.0
    for segment in segments:
        words = segment["words"]
        for chunk in range(0, len(words), per_line):
            for i, original in enumerate(words[chunk:chunk + per_line]):
                timing = dict(original)
                long_pause = not keep_segments and timing["start"] - last > LONG_PAUSE_S
                has_room = line_length + len(timing["word"]) <= width
                segment_break = i == 0 and len(cue) > 0 and keep_segments
                if line_length > 0 and has_room and not long_pause and not segment_break:
                    line_length += len(timing["word"])           # the line goes on
                else:
                    timing["word"] = timing["word"].strip()
                    if (cue and max_line_count is not None and (long_pause or line_count >= max_line_count)
                            or segment_break):
                        yield cue                                  # a new cue
                        cue, line_count = [], 1
                    elif line_length > 0:
                        line_count += 1                            # a new line
                        timing["word"] = "\n" + timing["word"]
                    line_length = len(timing["word"].strip())
                cue.append(timing)
                last = timing["start"]
    if cue:
        yield cue


def _underlined(words: list[str], i: int) -> str:
    """The words joined, the i-th underlined after its leading whitespace."""
    return "".join(re.sub(r"^(\s*)(.*)$", r"\1<u>\2</u>", w) if j == i else w for j, w in enumerate(words))


def _cues(result: dict, always_include_hours: bool, decimal_marker: str, highlight_words: bool = False,
          max_line_width: int | None = None, max_line_count: int | None = None,
          max_words_per_line: int | None = None):
    """(start, end, text) of each cue, timestamps formatted."""
    def stamp(seconds):
        return format_timestamp(seconds, always_include_hours, decimal_marker)
    segments = result["segments"]
    if not (segments and "words" in segments[0]):
        for segment in segments:
            yield stamp(segment["start"]), stamp(segment["end"]), segment["text"].strip().replace("-->", "->")
        return
    for cue in _word_groups(segments, max_line_width, max_line_count, max_words_per_line):
        start, end = stamp(cue[0]["start"]), stamp(cue[-1]["end"])
        words = [timing["word"] for timing in cue]
        text = "".join(words)
        if not highlight_words:
            yield start, end, text
            continue
        last = start
        for i, timing in enumerate(cue):
            word_start, word_end = stamp(timing["start"]), stamp(timing["end"])
            if last != word_start:
                yield last, word_start, text                       # between two words
            yield word_start, word_end, _underlined(words, i)
            last = word_end


def _check(highlight_words, max_line_width, max_line_count, max_words_per_line) -> None:
    if not isinstance(highlight_words, bool):
        raise InputError(f"highlight_words must be True or False, got {highlight_words!r}")
    for name, value in (("max_line_width", max_line_width), ("max_line_count", max_line_count),
                        ("max_words_per_line", max_words_per_line)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"{name} must be an integer >= 1 or None, got {value!r}")


def to_txt(result: dict) -> str:
    """Each segment's text on its own line."""
    return "".join(segment["text"].strip() + "\n" for segment in result["segments"])


def to_json(result: dict) -> str:
    return json.dumps(result)


def to_srt(result: dict, highlight_words: bool = False, max_line_width: int | None = None,
           max_line_count: int | None = None, max_words_per_line: int | None = None) -> str:
    """SubRip: numbered cues, hh:mm:ss,mmm."""
    _check(highlight_words, max_line_width, max_line_count, max_words_per_line)
    cues = _cues(result, True, ",", highlight_words, max_line_width, max_line_count, max_words_per_line)
    return "".join(f"{i}\n{start} --> {end}\n{text}\n\n" for i, (start, end, text) in enumerate(cues, start=1))


def to_vtt(result: dict, highlight_words: bool = False, max_line_width: int | None = None,
           max_line_count: int | None = None, max_words_per_line: int | None = None) -> str:
    """WebVTT: a WEBVTT header, then cues in mm:ss.mmm (hours when needed)."""
    _check(highlight_words, max_line_width, max_line_count, max_words_per_line)
    cues = _cues(result, False, ".", highlight_words, max_line_width, max_line_count, max_words_per_line)
    return "WEBVTT\n\n" + "".join(f"{start} --> {end}\n{text}\n\n" for start, end, text in cues)


def write(result: dict, format: str, highlight_words: bool = False, max_line_width: int | None = None,
          max_line_count: int | None = None, max_words_per_line: int | None = None) -> str:
    """The transcript in `format` (one of FORMATS) as a string. The word options shape SRT and
    WebVTT cues where the segments have words (transcribe(word_timestamps=True)); txt and json
    ignore them, as the reference's writers do."""
    if format not in FORMATS:
        raise InputError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    _check(highlight_words, max_line_width, max_line_count, max_words_per_line)
    if format in ("srt", "vtt"):
        writer = to_srt if format == "srt" else to_vtt
        return writer(result, highlight_words, max_line_width, max_line_count, max_words_per_line)
    return to_txt(result) if format == "txt" else to_json(result)
