"""Speech recognition: audio -> text with timestamps (Whisper).

    asr = engine.pipeline("speech-recognition")                 # Whisper base, 99 languages
    result = asr("talk.wav")                                    # a path, WAV bytes or 16 kHz samples
    result["text"], result["language"]
    result["segments"]        # [{"id", "start", "end", "text", "tokens", "avg_logprob", ...}, ...]
    asr("talk.wav", language="fr", task="translate")            # French speech -> English text
    asr("meeting.wav", vad=True)          # only the speech (Silero VAD), windows cut at pauses
    dictation = asr.dictation()           # live: feed(samples) -> each utterance's text as it ends

    python -m engine transcribe talk.wav --format srt
    python -m engine transcribe meeting.wav --vad
    python -m engine transcribe talk.wav --model tiny.en --output-dir subtitles/ --format vtt
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from ..errors import InputError
from . import contracts
from .base import Command, Pipeline, add_device_argument

TASK = "speech-recognition"
CARD = 6                     # where its card stands on the page (engine.tasks.card_order)
SAMPLE_RATE = 16000                 # what the model hears (engine.audio.SAMPLE_RATE)
# vad=True's voice activity: a pause of 0.3 s ends an utterance (silero-vad's 100 ms cuts between
# words; a longer one delays a dictation's text by as much), 0.15 s kept on each side of the speech
# (an utterance is final once twice that has passed after it: a next one that near would share
# the gap), an utterance at most a pack (engine.speech.utterances.LIMIT: a window less its tail)
VAD_OPTIONS = {"min_silence_ms": 300, "speech_pad_ms": 150, "max_speech_s": 29}


class SpeechRecognition(Pipeline):
    """Whisper: audio of any length -> {"text", "language", "segments"} (engine.speech.transcribe:
    30 s windows, timestamps carried across, the previous text as the next window's prompt,
    temperature fallback). Its tokenizer.json and config.json (suppress_ids) lie beside the
    weights.

    Options of a call (or defaults given here): language (a code such as "fr", or a name;
    None: detected on the first 30 s), task ("transcribe" or "translate" to English),
    temperature (a number, or the fallback sequence; default 0, 0.2, ... 1.0), initial_prompt,
    condition_on_previous_text, compression_ratio_threshold, logprob_threshold,
    no_speech_threshold, and engine.speech.DecodingOptions' fields (without_timestamps,
    suppress_tokens, best_of, seed, ...). on_segment(segment) is called as each segment is
    made; cancel() returning True stops before the next token ("cancelled": True in the result).
    """
    MODEL = contracts.SpeechModel


    def __init__(self, entry, device: str | None = None, weights=None, **defaults):
        from ..speech import SpeechTokenizer
        from ..device import best_for_quantized
        from ..runtime import in_browser
        # in Pyodide simd (NumPy has no BLAS there; simd multiplies the float16 weights as stored);
        # natively NumPy's BLAS on every core beats simd's one thread (python -m engine bench whisper)
        device = device or (best_for_quantized() if in_browser() else None)
        super().__init__(entry, device, weights)
        self.model = self.build(device)
        try:
            processor = json.loads(self.checkpoint.file("config.json"))
        except ValueError as e:
            raise InputError(f"{entry.name}/config.json is not JSON: {e}") from None
        self.tokenizer = SpeechTokenizer.from_json(self.checkpoint.file("tokenizer.json"), self.model.config,
                                                   processor, file=f"{entry.name}/tokenizer.json")
        self.defaults = defaults
        self._session = None
        self._voice_activity = None
        self.stats: dict = {}

    def session(self, model):
        """The decoder session of `model` (a new one when the model was rebuilt on another backend)."""
        from ..speech.decoder import DecoderSession
        if self._session is None or self._session.model is not model:
            self._session = DecoderSession(model)
        return self._session

    def to(self, device: str):
        super().to(device)
        self._session = None                    # its buffers lived on the other backend
        return self

    def load(self, audio, sampling_rate: int = SAMPLE_RATE) -> np.ndarray:
        """float32 mono samples at 16 kHz of a path, the bytes of a file, or an array of samples
        at `sampling_rate`."""
        from ..audio import audio_input
        return audio_input(audio, sampling_rate)

    def language_code(self, language):
        """A language code ("fr") from a code or a name ("French"); None stays None (detect)."""
        from ..speech import LANGUAGES
        if language is None:
            return None
        if not isinstance(language, str):
            raise InputError(f"language must be a code such as 'fr' or a name, got {language!r}")
        value = language.strip().lower()
        names = {name: code for code, name in LANGUAGES.items()}
        return names.get(value, value)

    def voice_activity(self):
        """The voice-activity pipeline that vad=True uses (built on first use, on this pipeline's
        device; a page's worker sets its own)."""
        if self._voice_activity is None:
            from . import pipeline
            self._voice_activity = pipeline("voice-activity", device=self.device)
        return self._voice_activity

    def speech(self, samples: np.ndarray, vad) -> list[tuple[int, int]]:
        """The (start, end) sample ranges of the speech in `samples`: vad is True (VAD_OPTIONS) or
        a dict of voice-activity options over them."""
        from ..speech.utterances import samples as sample_ranges
        extra = vad if isinstance(vad, dict) else {}
        return sample_ranges(self.voice_activity()(samples, **{**VAD_OPTIONS, **extra}))

    def dictation(self, language: str | None = None, task: str = "transcribe", vad: dict | None = None, **options):
        """Live dictation (engine.speech.dictation): feed(16 kHz samples) -> events, each utterance's
        text once a pause ends it; finish(), then result() is what vad=True gives for the whole
        recording. vad: voice-activity options over VAD_OPTIONS."""
        from ..speech.dictation import Dictation
        from ..speech.utterances import Packs
        options = {**self.defaults, **options}
        language = self.language_code(language if language is not None else options.pop("language", None))
        vad = {**VAD_OPTIONS, **(vad or {})}
        packs = Packs(self.model, self.tokenizer, session=self.session(self.model), language=language, task=task,
                      **options)
        return Dictation(packs, self.voice_activity().stream(**vad), pad_s=vad["speech_pad_ms"] / 1000)

    def __call__(self, audio, language: str | None = None, task: str = "transcribe", *, sampling_rate=SAMPLE_RATE,
                 on_segment=None, cancel=None, vad=False, **options) -> dict:
        """vad: True (or a dict of voice-activity options) transcribes only the speech, in packs of
        up to 29 s cut at pauses (engine.speech.utterances); the result then has "speech", the
        segments transcribed."""
        from ..speech import transcribe
        from ..speech.utterances import transcribe_speech
        options = {**self.defaults, **options}
        samples = self.load(audio, sampling_rate)
        if samples.size == 0:
            raise InputError("audio is empty (no samples)")
        language = self.language_code(language if language is not None else options.pop("language", None))
        if not isinstance(vad, (bool, dict)):
            raise InputError(f"vad must be True, False or a dict of voice-activity options, got {vad!r}")
        start = time.perf_counter()
        if vad is not False:
            ranges = self.speech(samples, vad)
            result = self.run(lambda model: transcribe_speech(
                model, self.tokenizer, samples, ranges, session=self.session(model), language=language, task=task,
                on_segment=on_segment, cancel=cancel, **options))
        else:
            result = self.run(lambda model: transcribe(model, self.tokenizer, samples, session=self.session(model),
                                                       language=language, task=task, on_segment=on_segment,
                                                       cancel=cancel, **options))
        seconds = time.perf_counter() - start
        duration = samples.size / SAMPLE_RATE
        self.stats = {"audio_s": duration, "seconds": seconds, "real_time_factor": seconds / duration}
        return result


PIPELINE = SpeechRecognition


# --- the command line -----------------------------------------------------------------------------
def _model_name(name: str | None) -> str | None:
    """"base" or "whisper-base" (as the registry names it)."""
    if name is None or name.startswith("whisper-"):
        return name
    return f"whisper-{name}"


def _add_arguments(p) -> None:
    from ..speech import FORMATS
    p.add_argument("audio", nargs="+", metavar="FILE", help="audio files (WAV natively; others through ffmpeg)")
    p.add_argument("--model", default=None, help="base (99 languages, the default) or tiny.en (English, faster)")
    p.add_argument("--language", default=None, help="the spoken language, a code (en, fr, ...) or a name "
                                                    "(default: detected on the first 30 s)")
    p.add_argument("--task", default="transcribe", choices=("transcribe", "translate"),
                   help="translate: speech in any language to English text")
    p.add_argument("--format", default="txt", choices=FORMATS, help="output format (default txt)")
    p.add_argument("--output-dir", default=None, metavar="D",
                   help="write D/<file name>.<format> for each file instead of printing")
    p.add_argument("--temperature", type=float, default=None, metavar="T",
                   help="decode at T only (default: 0, then 0.2 ... 1.0 on repetition or low confidence)")
    p.add_argument("--vad", action="store_true", help="transcribe only the speech (Silero VAD), in windows cut at "
                                                      "pauses: faster on recordings with pauses")
    p.add_argument("--word-timestamps", action="store_true", help="each word's start and end (JSON: each segment's "
                                                                  "\"words\"), as openai-whisper computes them")
    p.add_argument("--highlight-words", action="store_true", help="srt, vtt: a cue per word, the word spoken "
                                                                  "underlined (needs --word-timestamps)")
    p.add_argument("--weights", default=None, help="the model's safetensors (default: the built dist/models/...)")
    add_device_argument(p)


def _transcribe(args) -> int:
    from ..speech import write
    from . import pipeline
    pipe = pipeline(TASK, device=args.device, weights=args.weights, model=_model_name(args.model))
    options = {} if args.temperature is None else {"temperature": args.temperature}
    if args.highlight_words and not args.word_timestamps:
        raise InputError("--highlight-words needs --word-timestamps")
    if args.word_timestamps:
        options["word_timestamps"] = True
    if args.output_dir is not None:
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    for path in args.audio:
        result = pipe(path, language=args.language, task=args.task, vad=args.vad, **options)
        text = write(result, args.format, highlight_words=args.highlight_words)
        if args.output_dir is not None:
            out = Path(args.output_dir) / f"{Path(path).stem}.{args.format}"
            out.write_text(text, encoding="utf-8")
            where = f" -> {out}"
        else:
            if len(args.audio) > 1:
                print(f"==> {path} <==")
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
            where = ""
        s = pipe.stats
        print(f"{path}: {result['language']}, {s['audio_s']:.1f} s of audio in {s['seconds']:.1f} s "
              f"(real-time factor {s['real_time_factor']:.2f}){where}", file=sys.stderr)
    return 0


COMMANDS = {
    "transcribe": Command(
        help="speech to text with timestamps (Whisper), as text, JSON, SRT or WebVTT",
        description="Transcribe audio files with Whisper (speech-recognition task): any length, in 30 s windows "
                    "with timestamps; the language is detected unless given. --task translate turns speech in "
                    "any language into English text. The transcript goes to stdout (or to --output-dir), the "
                    "language and speed to stderr.",
        add_arguments=_add_arguments, run=_transcribe),
}


# --- the page's worker: segments stream to the page as they are decoded ----------------------------
# calls: transcriptions begun; stopped: transcribe_stop stops every one begun by then (the one
# decoding and those waiting for it), never one begun after it (Stop, then at once a new recording)
_stop = {"calls": 0, "stopped": 0}
_last: dict = {"result": None}         # the last transcript, for speech_transcript's downloads
YIELD_EVERY_S = 0.1                    # how often the decoding lets the worker take a Cancel


def _page_audio(audio, rate, name: str) -> np.ndarray:
    """The page's audio as float32 mono at 16 kHz: a WAV file's bytes (rate 0: read by the
    engine's own WAV reader, as natively) or float32 samples at `rate` Hz (decoded by the browser,
    or recorded), resampled here."""
    from ..audio import load_audio
    from . import state
    data = state.py(audio)
    if isinstance(data, np.ndarray):
        return load_audio(data, orig_sr=int(rate), name=name) if rate else data.astype(np.float32)
    if not rate:
        return load_audio(bytes(data), name=name)
    return load_audio(np.frombuffer(bytes(data), np.float32), orig_sr=int(rate), name=name)


def _cancel_check(call: int):
    """cancel() for the decoding loop of transcription number `call`: True once a transcribe_stop
    has come after it began. Every YIELD_EVERY_S it
    lets the worker take its other messages, through JavaScript Promise Integration (natively,
    nothing else can arrive meanwhile)."""
    import asyncio
    import time

    from .. import runtime
    if not runtime.in_browser():
        return lambda: _stop["stopped"] >= call
    last = [time.perf_counter()]

    def cancel() -> bool:
        now = time.perf_counter()
        if now - last[0] >= YIELD_EVERY_S and runtime.can_block():
            runtime.wait(asyncio.sleep(0), "transcribe_stop is read between windows")
            last[0] = time.perf_counter()
        return _stop["stopped"] >= call
    return cancel


def _segment(s: dict) -> dict:
    out = {"start": round(float(s["start"]), 3), "end": round(float(s["end"]), 3), "text": s["text"]}
    if "words" in s:
        out["words"] = [{"word": w["word"], "start": round(float(w["start"]), 3), "end": round(float(w["end"]), 3),
                         "probability": round(float(w["probability"]), 4)} for w in s["words"]]
    return out


async def transcribe_audio(audio, rate=None, options=None, on_segment=None) -> str:
    """Transcribe audio from the page: a WAV file's bytes (rate 0 or None) or float32 mono samples
    at `rate` Hz. options (JSON or a dict): "task" (transcribe or translate), "language" (a code,
    or none to detect it), "name" (the audio's, for errors). on_segment(json {"start", "end",
    "text"}) is called with each segment as it is decoded. transcribe_stop ends it before its
    next token; the answer then holds the segments decoded by then, with "cancelled": true.

    The answer: {"text", "language", "segments", "cancelled", "seconds" (reading, resampling and
    decoding), "duration" (seconds of audio), "rtf" (seconds / duration), "device", "model",
    "heap_bytes"}."""
    from . import state
    _stop["calls"] += 1
    call = _stop["calls"]
    pipe = state.loaded(TASK)
    options = dict(state.from_json(options) or {})
    unknown = set(options) - {"task", "language", "name", "vad", "word_timestamps"}
    if unknown:
        raise InputError(f"unknown transcription options {sorted(unknown)}: task, language, name, vad and "
                         f"word_timestamps are known")
    if options.get("vad"):
        await _voice_activity(pipe)

    def segment(s):
        if on_segment is not None:
            on_segment(json.dumps(_segment(s)))

    async with state.lock:
        memory = state.heap_bytes()
        started = time.perf_counter()
        samples = _page_audio(audio, rate, str(options.get("name") or "the audio"))
        result = pipe(samples, language=options.get("language") or None, task=options.get("task") or "transcribe",
                      on_segment=segment, cancel=_cancel_check(call),
                      vad=bool(options.get("vad")),                       # samples at 16 kHz: as natively
                      word_timestamps=bool(options.get("word_timestamps")))
        _last["result"] = result
        seconds = time.perf_counter() - started
        memory = max(memory, state.heap_bytes())
        notice = state.notice(pipe)
    duration = len(samples) / SAMPLE_RATE
    return json.dumps({"text": result["text"], "language": result.get("language"),
                       "segments": [_segment(s) for s in result["segments"]],
                       "cancelled": bool(result.get("cancelled")), "seconds": round(seconds, 4),
                       "duration": round(duration, 4), "rtf": round(seconds / duration, 4) if duration else 0.0,
                       "device": state.current["device"], "model": pipe.entry.name, "heap_bytes": memory, **notice})


async def _voice_activity(pipe) -> None:
    """The page's voice-activity pipeline for vad and dictation: Silero VAD's weights (1.2 MB)
    from the site, cache-first, the first time."""
    from .. import registry
    from ..site.browser import load_checkpoint
    from . import pipeline, state
    vad = state.current["pipelines"].get("voice-activity")
    if vad is None:
        entry = registry.for_task("voice-activity")
        checkpoint = await load_checkpoint(entry)
        vad = pipeline("voice-activity", device=state.current["device"], weights=checkpoint, model=entry.name)
        state.current["pipelines"]["voice-activity"] = vad
    pipe._voice_activity = vad


_live: dict = {"dictation": None}     # the page's live dictation, while the microphone records


def _events(events) -> list[dict]:
    return [{**e, "segments": [_segment(s) for s in e["segments"]]} for e in events]


async def dictation_start(options=None) -> str:
    """Start live dictation (engine.speech.dictation): options (JSON or a dict) "task" and
    "language", as transcribe_audio's. dictation_feed then takes the microphone's samples."""
    from . import state
    pipe = state.loaded(TASK)
    options = dict(state.from_json(options) or {})
    unknown = set(options) - {"task", "language", "word_timestamps"}
    if unknown:
        raise InputError(f"unknown dictation options {sorted(unknown)}: task, language and word_timestamps are known")
    await _voice_activity(pipe)
    async with state.lock:
        if not pipe.session(pipe.model).captured:        # the decode steps captured before the first utterance
            pipe(np.zeros(SAMPLE_RATE, np.float32), temperature=0.0)
        _live["dictation"] = pipe.dictation(language=options.get("language") or None,
                                            task=options.get("task") or "transcribe",
                                            word_timestamps=bool(options.get("word_timestamps")))
    return json.dumps({"model": pipe.entry.name, "vad": pipe._voice_activity.entry.name})


def _dictation():
    if _live["dictation"] is None:
        raise InputError("no dictation is running: dictation_start first")
    return _live["dictation"]


async def dictation_feed(samples) -> str:
    """The next float32 samples at 16 kHz of the recording: {"events": [...]} (engine.speech.dictation's
    events, times in seconds, segments as transcribe_audio gives them, and "seconds": the time
    their transcription took)."""
    from . import state
    dictation = _dictation()
    data = np.asarray(state.py(samples), np.float32).reshape(-1)
    async with state.lock:
        started = time.perf_counter()
        events = dictation.feed(data)
        seconds = time.perf_counter() - started
    return json.dumps({"events": _events(events), "seconds": round(seconds, 4)})


async def dictation_finish() -> str:
    """The recording ended: the last events, and the transcript ({"text", "language", "segments",
    "speech"}), equal to the recording's with vad=True."""
    from . import state
    dictation = _dictation()
    async with state.lock:
        events = dictation.finish()
        result = dictation.result()
        _live["dictation"] = None
        _last["result"] = result
    return json.dumps({"events": _events(events), "text": result["text"], "language": result["language"],
                       "segments": [_segment(s) for s in result["segments"]], "speech": result["speech"]})


def speech_transcript(format: str = "txt") -> str:
    """The last transcript as a file's text: txt, json, srt or vtt (engine.speech.write, as
    `python -m engine transcribe --format` writes it; with its words' times, srt and vtt highlight
    each word as --highlight-words does): {"format", "text"}."""
    from ..speech import write
    result = _last["result"]
    if result is None:
        raise InputError("there is no transcript yet: transcribe something first")
    words = str(format) in ("srt", "vtt") and any("words" in s for s in result["segments"])
    return json.dumps({"format": format, "text": write(result, str(format), highlight_words=words)})


def transcribe_stop() -> str:
    """Stop the transcriptions begun so far (the one decoding, and any waiting for it) before
    their next token (no lock: it runs while the decoding lets the worker take messages)."""
    from . import state
    _stop["stopped"] = _stop["calls"]
    return json.dumps({"stopped": TASK in state.current["pipelines"]})


async def speech_model(name, on_progress=None) -> str:
    """Serve the speech card with the registry's model `name` instead (the worker keeps one model
    for the task); its weights come from the site cache-first, on_progress(json {"loaded",
    "total"}) as they stream in."""
    from .. import registry
    from ..site.browser import load_checkpoint
    from . import pipeline, state
    entry = registry.model(str(name))
    if TASK not in entry.tasks:
        raise InputError(f"model {entry.name} does not serve the task {TASK!r}")
    current = state.current["pipelines"].get(TASK)
    if current is None or current.entry.name != entry.name:
        report = None
        if on_progress is not None:
            def report(loaded, total):
                on_progress(json.dumps({"loaded": loaded, "total": total}))
        checkpoint = await load_checkpoint(entry, progress=report)
        async with state.lock:
            state.current["pipelines"][TASK] = pipeline(TASK, device=state.current["device"], weights=checkpoint,
                                                        model=entry.name)
    return json.dumps({"model": entry.name, "device": state.current["pipelines"][TASK].device})


WORKER = (transcribe_audio, transcribe_stop, speech_transcript, speech_model, dictation_start, dictation_feed,
          dictation_finish)
