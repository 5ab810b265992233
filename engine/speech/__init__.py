"""Speech recognition with Whisper, in NumPy over the model's decoder: one window's decoding
(engine.speech.decoding), the transcription of audio of any length (engine.speech.transcribe),
its words' timestamps (engine.speech.timing), and the transcript's text and subtitle formats
(engine.speech.subtitles)."""
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
from .timing import WordTiming, add_word_timestamps, find_alignment
from .transcribe import transcribe

__all__ = [
                       "FORMATS",
                       "LANGUAGES",
                       "DecodingOptions",
                       "DecodingResult",
                       "SpecialTokens",
                       "SpeechTokenizer",
                       "WordTiming",
                       "add_word_timestamps",
                       "compression_ratio",
                       "decode",
                       "detect_language",
                       "find_alignment",
                       "format_timestamp",
                       "to_json",
                       "to_srt",
                       "to_txt",
                       "to_vtt",
                       "transcribe",
                       "write",
]
