"""The transcript's formats against OpenAI's writers (whisper.utils), on hand-made results whose
timestamps cross the rounding, the hour and "-->" edge cases."""
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
