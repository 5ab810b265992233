"""The transcript's formats against OpenAI's writers (whisper.utils), on hand-made results whose
timestamps cross the rounding, the hour and "-->" edge cases, with and without word timestamps
(highlighted words, lines and cues of a given width, count and number of words)."""
from __future__ import annotations

import io
import json

import pytest

from engine.errors import InputError
from engine.speech import FORMATS, format_timestamp, write
from tests.helpers import need_import

RESULT = {
    "text": " Hello there. This --> that. Bye.",
    "language": "en",
    "segments": [
        {"id": 0, "start": 0.0, "end": 1.5, "text": " Hello there.", "tokens": [1, 2]},
        {"id": 1, "start": 1.5, "end": 62.0004, "text": " This --> that.", "tokens": [3]},
        {"id": 2, "start": 3599.9996, "end": 3725.12, "text": " Bye. ", "tokens": [4]},
        {"id": 3, "start": 3725.12, "end": 3725.12, "text": "", "tokens": []},
    ],
}



def words(*timings):
    return [{"word": w, "start": a, "end": b, "probability": 0.9} for w, a, b in timings]


WORDS = {
    "text": " Hello there. This --> that, and the rest. Bye.",
    "language": "en",
    "segments": [
        {"id": 0, "start": 0.5, "end": 1.5, "text": " Hello there.",
         "words": words((" Hello", 0.5, 0.9), (" there.", 1.0, 1.5))},
        {"id": 1, "start": 1.5, "end": 5.0, "text": " This --> that, and the rest.",
         "words": words((" This", 1.5, 1.8), (" -->", 1.8, 2.0), (" that,", 2.0, 2.4), (" and", 2.9, 3.1),
                        (" the", 3.1, 3.3), (" rest.", 3.3, 5.0))},
        {"id": 2, "start": 5.0, "end": 5.0, "text": "", "words": []},
        {"id": 3, "start": 9.5, "end": 3725.12, "text": " Bye.", "words": words((" Bye.", 9.5, 3725.12))},
    ],
}
WORD_OPTIONS = [{}, {"highlight_words": True}, {"max_line_width": 12, "max_line_count": 2},
                {"max_line_width": 8, "max_line_count": 1, "highlight_words": True}, {"max_words_per_line": 2},
                {"max_line_width": 10}, {"max_words_per_line": 3, "max_line_width": 20, "max_line_count": 3}]


def test_hand_written_highlighted_words():
    assert write(WORDS, "srt", highlight_words=True).startswith(
        "1\n00:00:00,500 --> 00:00:00,900\n<u>Hello</u> there.\n\n"
        "2\n00:00:00,900 --> 00:00:01,000\nHello there.\n\n"
        "3\n00:00:01,000 --> 00:00:01,500\nHello <u>there.</u>\n\n"
        "4\n00:00:01,500 --> 00:00:01,800\n<u>This</u> --> that, and the rest.\n\n")
    assert write(WORDS, "vtt").startswith("WEBVTT\n\n00:00.500 --> 00:01.500\nHello there.\n\n"
                                          "00:01.500 --> 00:05.000\nThis --> that, and the rest.\n\n")
    assert write(WORDS, "txt") == "Hello there.\nThis --> that, and the rest.\n\nBye.\n"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["srt", "vtt"])
@pytest.mark.parametrize("options", WORD_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_words_equal_openai_writers(fmt, options):
    utils = need_import("whisper.utils", "openai-whisper (pip install --no-deps openai-whisper)")
    writer = {"srt": utils.WriteSRT, "vtt": utils.WriteVTT}[fmt](".")
    out = io.StringIO()
    writer.write_result(WORDS, out, **options)
    assert write(WORDS, fmt, **options) == out.getvalue()


def test_hand_written_srt_and_vtt():
    assert write(RESULT, "srt").startswith("1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n"
                                           "2\n00:00:01,500 --> 00:01:02,000\nThis -> that.\n\n"
                                           "3\n01:00:00,000 --> 01:02:05,120\nBye.\n\n")
    assert write(RESULT, "vtt").startswith("WEBVTT\n\n00:00.000 --> 00:01.500\nHello there.\n\n"
                                           "00:01.500 --> 01:02.000\nThis -> that.\n\n"
                                           "01:00:00.000 --> 01:02:05.120\nBye.\n\n")
    assert write(RESULT, "txt") == "Hello there.\nThis --> that.\nBye.\n\n"
    assert json.loads(write(RESULT, "json")) == RESULT


@pytest.mark.slow                               # the first import of whisper (torch) takes seconds
@pytest.mark.parametrize("fmt", FORMATS)
def test_formats_equal_openai_writers(fmt):
    utils = need_import("whisper.utils", "openai-whisper (pip install --no-deps openai-whisper)")
    writer = {"txt": utils.WriteTXT, "json": utils.WriteJSON, "srt": utils.WriteSRT, "vtt": utils.WriteVTT}[fmt](".")
    out = io.StringIO()
    writer.write_result(RESULT, out)
    assert write(RESULT, fmt) == out.getvalue()


@pytest.mark.slow
def test_timestamps_as_openai():
    utils = need_import("whisper.utils", "openai-whisper (pip install --no-deps openai-whisper)")
    for seconds in (0, 0.02, 0.0015, 1.2345, 59.9996, 61, 3599.9999, 3600, 86400 + 0.5):
        for hours, marker in ((False, "."), (True, ",")):
            assert format_timestamp(seconds, hours, marker) == utils.format_timestamp(seconds, hours, marker)


def test_bad_format_and_negative_time():
    with pytest.raises(InputError, match="format"):
        write(RESULT, "docx")
    with pytest.raises(InputError, match="timestamp"):
        format_timestamp(-1.0)
