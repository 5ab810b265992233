"""Whisper's transcription of audio of any length: 30-second windows, their timestamps turned
into segments, the previous text as the next window's prompt, temperature fallback.

    result = transcribe(model, tokenizer, audio)          # float32 samples at 16 kHz
    result["text"], result["language"]
    result["segments"]      # [{"id", "seek", "start", "end", "text", "tokens", "temperature",
                            #   "avg_logprob", "compression_ratio", "no_speech_prob"}, ...]
    transcribe(model, tokenizer, audio, word_timestamps=True)["segments"][0]["words"]
                            # [{"word", "start", "end", "probability"}, ...] (engine.speech.timing)

Facts taken from OpenAI's reference (openai-whisper 20250625, whisper/transcribe.py):

- The log-mel of the audio with 30 s of zeros appended; a window is the 3000 frames from `seek`
  (fewer at the end, padded with zeros to 3000).
- The language is detected on the first window when not given (English-only models: "en").
- Each window is decoded at the first temperature, then again at the next whenever the text
  compresses more than compression_ratio_threshold (2.4: repetition) or its avg_logprob is
  below logprob_threshold (-1.0), unless it looks silent (no_speech_prob above
  no_speech_threshold, 0.6, with that low avg_logprob).
- A window is skipped as silence when no_speech_prob > no_speech_threshold, unless its
  avg_logprob is above logprob_threshold.
- Segments: the tokens between consecutive timestamp pairs; a window that ends with a single
  timestamp means no speech after it (the next window starts after this one), otherwise the
  next window starts at the last timestamp. Without a timestamp pair the window is one segment.
  A segment of zero length or with no text is kept, emptied.
- With word timestamps (engine.speech.timing) each window's segments get their words and take
  their start and end from them; a window not ending in a single timestamp is followed by the
  one starting at its last word's end, and the last word's end is the last speech before the
  next window.
- The prompt of the next window is the text tokens so far (from the last reset) after
  <|startofprev|>, cut to the last n_text_ctx // 2 - 1 (223); it is reset after a window decoded
  at a temperature above 0.5, or for every window when condition_on_previous_text is off.
  initial_prompt is the first window's prompt and stays at the start of the prompts that follow.

Not implemented: hallucination_silence_threshold, clip_timestamps, carry_initial_prompt, beam
search.
"""
from __future__ import annotations

import numpy as np

from ..audio import HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, log_mel_spectrogram
from ..errors import InputError
from .decoding import (
    DecodingOptions,
    DecodingResult,
    SpeechTokenizer,
    decode,
    detect_language,
)
from .timing import (
    APPEND_PUNCTUATIONS,
    PREPEND_PUNCTUATIONS,
    add_word_timestamps,
    default_alignment_heads,
    last_word_end,
)

DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH                       # mel frames: 100


def transcribe(model, tokenizer: SpeechTokenizer, audio=None, *, mel: np.ndarray | None = None, session=None,
               language: str | None = None, task: str = "transcribe",
               temperature: float | tuple = DEFAULT_TEMPERATURES,
               compression_ratio_threshold: float | None = 2.4, logprob_threshold: float | None = -1.0,
               no_speech_threshold: float | None = 0.6, condition_on_previous_text: bool = True,
               initial_prompt: str | None = None, word_timestamps: bool = False,
               prepend_punctuations: str = PREPEND_PUNCTUATIONS, append_punctuations: str = APPEND_PUNCTUATIONS,
               alignment_heads=None, on_segment=None, cancel=None, **decode_options) -> dict:
    """The transcript of `audio` (float32 samples at 16 kHz, any length) or of `mel`, its
    log-mel with 30 s of zeros already appended (n_mels, frames + 3000).

    model: model.config (n_mels, n_text_ctx, n_audio_ctx), model.encode(mel window) -> features.
    session: a decoder session over the model (engine.speech.decoder.DecoderSession; made here
    when not given). on_segment(segment) is called with each segment as it is made; cancel()
    returning True stops before the next token, the result then holds the segments so far and
    "cancelled": True. decode_options: DecodingOptions' fields (best_of, suppress_tokens, ...).

    word_timestamps: each segment gets "words" (engine.speech.timing), punctuation from
    prepend_punctuations joined to the next word and from append_punctuations to the previous;
    alignment_heads: the (layer, head) pairs to align with (default: model.alignment_heads, else
    every head of the decoder's second half).
    """
    config = model.config
    if mel is None:
        if audio is None:
            raise InputError("transcribe needs audio (float32 samples at 16 kHz) or its log-mel")
        audio = np.asarray(audio, np.float32)
        if audio.ndim != 1:
            raise InputError(f"audio must be mono samples, shape (samples,), got shape {audio.shape}")
        if audio.size == 0:
            raise InputError("audio is empty (no samples)")
        mel = log_mel_spectrogram(audio, config.n_mels, padding=N_SAMPLES)
    mel = np.asarray(mel, np.float32)
    if mel.ndim != 2 or mel.shape[0] != config.n_mels or mel.shape[1] < N_FRAMES:
        raise InputError(f"mel must be ({config.n_mels}, frames + {N_FRAMES}), got {mel.shape}")
    if session is None:
        from .decoder import DecoderSession
        session = DecoderSession(model)
    temperatures = (temperature,) if isinstance(temperature, (int, float)) else tuple(temperature)
    if not temperatures:
        raise InputError("temperature: give at least one")
    specials = tokenizer.specials
    for t in temperatures:
        _options(decode_options, task=task, language=language, temperature=t).check(specials)
    dims = {"n_text_ctx": config.n_text_ctx, "n_audio_ctx": config.n_audio_ctx}
    heads = _word_options(model, word_timestamps, prepend_punctuations, append_punctuations, alignment_heads)
    if word_timestamps and not hasattr(session, "attention"):
        raise InputError("word_timestamps needs a decoder session with attention() (engine.speech.decoder)")

    content_frames = mel.shape[-1] - N_FRAMES
    input_stride = N_FRAMES // config.n_audio_ctx                    # mel frames per output position: 2
    time_precision = input_stride * HOP_LENGTH / SAMPLE_RATE         # seconds per timestamp: 0.02
    seek, features_seek = 0, None

    def set_audio(at: int, size: int) -> None:
        """The window of `size` frames from `at`, padded with zeros (not with the log-mel of
        silence, as the reference) to N_FRAMES."""
        nonlocal features_seek
        if features_seek != (at, size):
            part = mel[:, at:at + size]
            if part.shape[1] < N_FRAMES:
                part = np.pad(part, ((0, 0), (0, N_FRAMES - part.shape[1])))
            session.set_audio(model.encode(np.ascontiguousarray(part)))
            features_seek = (at, size)

    if language is None:
        if specials.multilingual:
            # on the first window as it is decoded, so one encoder pass serves both (the reference
            # detects on the first 30 s of the padded audio's log-mel, a second encoder pass for a
            # clip shorter than 30 s, whose padding is then the log-mel of silence, not zeros: the
            # language's probabilities can differ in the last digits)
            set_audio(0, min(N_FRAMES, content_frames))
            language, _ = detect_language(session, specials)
        else:
            language = "en"

    def decode_with_fallback(prompt: list[int]) -> DecodingResult:
        result = None
        for t in temperatures:
            options = _options(decode_options, task=task, language=language, temperature=t, prompt=prompt)
            result = decode(session, tokenizer, options, cancel=cancel, **dims)
            if result.cancelled:
                return result
            needs_fallback = (
                (compression_ratio_threshold is not None and result.compression_ratio > compression_ratio_threshold)
                or (logprob_threshold is not None and result.avg_logprob < logprob_threshold))
            if (no_speech_threshold is not None and result.no_speech_prob > no_speech_threshold
                    and logprob_threshold is not None and result.avg_logprob < logprob_threshold):
                needs_fallback = False                                # silence
            if not needs_fallback:
                break
        return result

    all_tokens: list[int] = []
    segments: list[dict] = []
    prompt_reset_since = 0
    initial_prompt_tokens = tokenizer.encode(" " + initial_prompt.strip()) if initial_prompt else []
    all_tokens.extend(initial_prompt_tokens)
    cancelled = False
    last_speech_timestamp = 0.0

    while seek < content_frames:
        if cancel is not None and cancel():
            cancelled = True
            break
        time_offset = float(seek * HOP_LENGTH / SAMPLE_RATE)
        segment_size = min(N_FRAMES, content_frames - seek)
        segment_duration = segment_size * HOP_LENGTH / SAMPLE_RATE
        set_audio(seek, segment_size)
        result = decode_with_fallback(all_tokens[prompt_reset_since:])
        if result.cancelled:
            cancelled = True
            break
        tokens = result.tokens

        if no_speech_threshold is not None:
            should_skip = result.no_speech_prob > no_speech_threshold
            if logprob_threshold is not None and result.avg_logprob > logprob_threshold:
                should_skip = False                  # confident text despite the no-speech probability
            if should_skip:
                seek += segment_size
                continue

        current = []
        scores = {"temperature": result.temperature, "avg_logprob": result.avg_logprob,
                  "compression_ratio": result.compression_ratio, "no_speech_prob": result.no_speech_prob}

        def new_segment(start, end, ids, seek=seek, scores=scores):
            text = tokenizer.decode([t for t in ids if t < specials.eot])
            return {"seek": seek, "start": start, "end": end, "text": text, "tokens": list(ids), **scores}

        begin = specials.timestamp_begin
        is_timestamp = [t >= begin for t in tokens]
        single_timestamp_ending = is_timestamp[-2:] == [False, True]
        consecutive = [i + 1 for i in range(len(tokens) - 1) if is_timestamp[i] and is_timestamp[i + 1]]
        if consecutive:
            slices = consecutive + ([len(tokens)] if single_timestamp_ending else [])
            last_slice = 0
            for current_slice in slices:
                part = tokens[last_slice:current_slice]
                current.append(new_segment(time_offset + (part[0] - begin) * time_precision,
                                           time_offset + (part[-1] - begin) * time_precision, part))
                last_slice = current_slice
            if single_timestamp_ending:
                seek += segment_size                 # no speech after the last timestamp
            else:                                    # the unfinished segment is decoded again
                seek += (tokens[last_slice - 1] - begin) * input_stride
        else:
            duration = segment_duration
            timestamps = [t for t in tokens if t >= begin]
            if timestamps and timestamps[-1] != begin:
                duration = (timestamps[-1] - begin) * time_precision
            current.append(new_segment(time_offset, time_offset + duration, tokens))
            seek += segment_size

        if word_timestamps:
            add_word_timestamps(current, session, tokenizer, heads=heads, language=language, task=task,
                                num_frames=segment_size, last_speech_timestamp=last_speech_timestamp,
                                prepend_punctuations=prepend_punctuations, append_punctuations=append_punctuations)
            end = last_word_end(current)
            if not single_timestamp_ending and end is not None and end > time_offset:
                seek = round(end * FRAMES_PER_SECOND)    # the next window starts at the last word's end
            if end is not None:
                last_speech_timestamp = end

        for segment in current:
            if segment["start"] == segment["end"] or segment["text"].strip() == "":
                segment["text"], segment["tokens"] = "", []
                if word_timestamps:
                    segment["words"] = []
        for segment in current:
            segment = {"id": len(segments), **segment}
            segments.append(segment)
            if on_segment is not None:
                on_segment(segment)
        all_tokens.extend(t for segment in current for t in segment["tokens"])
        if not condition_on_previous_text or result.temperature > 0.5:
            prompt_reset_since = len(all_tokens)    # a high temperature's text is no prompt

    out = {"text": tokenizer.decode(all_tokens[len(initial_prompt_tokens):]), "segments": segments,
           "language": language}
    if cancelled:
        out["cancelled"] = True
    return out


def _word_options(model, word_timestamps, prepend_punctuations, append_punctuations, alignment_heads):
    """The alignment heads for word timestamps (None without them), the options checked."""
    if not isinstance(word_timestamps, bool):
        raise InputError(f"word_timestamps must be True or False, got {word_timestamps!r}")
    for name, value in (("prepend_punctuations", prepend_punctuations), ("append_punctuations", append_punctuations)):
        if not isinstance(value, str):
            raise InputError(f"{name} must be a string of punctuation marks, got {value!r}")
    if not word_timestamps:
        return None
    config = model.config
    heads = alignment_heads if alignment_heads is not None else getattr(model, "alignment_heads", None)
    if heads is None:
        heads = default_alignment_heads(config.n_text_layer, config.n_text_head)
    try:
        heads = tuple((int(layer), int(head)) for layer, head in heads)
    except (TypeError, ValueError):
        raise InputError(f"alignment_heads must be (layer, head) pairs, got {alignment_heads!r}") from None
    bad = [(layer, head) for layer, head in heads
           if not (0 <= layer < config.n_text_layer and 0 <= head < config.n_text_head)]
    if bad or not heads:
        raise InputError(f"alignment_heads: {bad or 'none given'}; the decoder has {config.n_text_layer} layers "
                         f"of {config.n_text_head} heads")
    return heads


def _options(decode_options: dict, **fixed) -> DecodingOptions:
    """DecodingOptions for one temperature: best_of is for sampling only (dropped at 0)."""
    if "prompt" in decode_options:
        raise InputError("prompt: give initial_prompt (later windows take the text before them)")
    if isinstance(fixed["temperature"], (int, float)) and fixed["temperature"] == 0:
        decode_options = {k: v for k, v in decode_options.items() if k != "best_of"}
    return DecodingOptions.of(**decode_options, **fixed)
