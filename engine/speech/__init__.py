"""Speech recognition with Whisper, in NumPy over the model's decoder: one window's decoding
(engine.speech.decoding), the transcription of audio of any length (engine.speech.transcribe),
and the transcript's text and subtitle formats (engine.speech.subtitles)."""
from .decoding import (
                       LANGUAGES,
                       DecodingOptions,
                       DecodingResult,
                       SpecialTokens,
                       SpeechTokenizer,
                       compression_ratio,
                       decode,
                       detect_language,
)
from .subtitles import FORMATS, format_timestamp, to_json, to_srt, to_txt, to_vtt, write
from .transcribe import transcribe

__all__ = [
                       "FORMATS",
                       "LANGUAGES",
                       "DecodingOptions",
                       "DecodingResult",
                       "SpecialTokens",
                       "SpeechTokenizer",
                       "compression_ratio",
                       "decode",
                       "detect_language",
                       "format_timestamp",
                       "to_json",
                       "to_srt",
                       "to_txt",
                       "to_vtt",
                       "transcribe",
                       "write",
]
