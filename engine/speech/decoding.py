"""Whisper's decoding of one 30-second window: special tokens, logit filters, language
detection, greedy decoding or sampling, in NumPy over the decoder's logits.

    tokenizer = SpeechTokenizer.from_tokenizer(text_tokenizer, model.config)
    session = DecoderSession(model)                  # engine.speech.decoder
    session.set_audio(model.encode(mel))             # one window's audio features
    result = decode(session, tokenizer, DecodingOptions(language=None))   # detected, then decoded
    result.text, result.tokens, result.avg_logprob, result.no_speech_prob

Facts taken from OpenAI's reference (openai-whisper 20250625, whisper/decoding.py and
whisper/tokenizer.py; Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak
Supervision", arXiv:2212.04356):

- The prompt is [<|startofprev|>, the last n_text_ctx // 2 - 1 prompt tokens] then
  <|startoftranscript|>, the language, the task (<|transcribe|> or <|translate|>), and
  <|notimestamps|> when timestamps are off; English-only models use <|startoftranscript|> alone.
  At most n_text_ctx // 2 tokens are sampled, and never past n_text_ctx positions.
- The filters, in this order, on each step's logits: SuppressBlank (" " and <|endoftext|> at the
  first sampled position), SuppressTokens ("-1": the non-speech symbols of the tokenizer plus
  the task, start and no-speech tokens; a checkpoint's config.json lists them as `suppress_ids`
  and `suppress_ids_begin`), and the timestamp rules: <|notimestamps|> never; timestamps in pairs
  except right before <|endoftext|>; never decreasing, and a segment never empty; the first
  sampled token a timestamp of at most max_initial_timestamp (1 s); and text forbidden whenever
  the timestamps' total probability exceeds the most likely text token's.
- no_speech_prob: the softmax of the logits at the <|startoftranscript|> row of the first
  forward pass, before any filter, at <|nospeech|>.
- sum_logprob adds each sampled token's log-probability under the filtered logits (float32, as the
  reference), <|endoftext|> included; avg_logprob = sum_logprob / (tokens + 1);
  compression_ratio = len(utf-8 text) / len(zlib.compress(text)).
- Language detection: one forward pass of <|startoftranscript|>; the logits of everything but
  the language tokens are masked; the argmax is the language, the softmax its probabilities.
- best_of samples (temperature > 0) are ranked by sum_logprob / length.

What differs: the decoder runs over a KV cache written in place (engine.speech.decoder), so the
initial tokens are fed once and a fallback or another sample reuses them; sampling draws from
NumPy's generator (seeded), not torch's, so sampled text equals the reference only at
temperature 0. Beam search is not implemented.
"""
from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..device import get_backend
from ..errors import InputError
from ..sampler import TRAFFIC, Rules
from ..tensor import tensor

CHUNK_LENGTH = 30                              # seconds per window (engine.audio.CHUNK_LENGTH)

# The languages' names, by code, in the order of the language tokens (openai-whisper's LANGUAGES).
LANGUAGES = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian", "ko": "korean",
    "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish", "pl": "polish", "ca": "catalan",
    "nl": "dutch", "ar": "arabic", "sv": "swedish", "it": "italian", "id": "indonesian", "hi": "hindi",
    "fi": "finnish", "vi": "vietnamese", "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay",
    "cs": "czech", "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian", "la": "latin",
    "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak", "te": "telugu", "fa": "persian",
    "lv": "latvian", "bn": "bengali", "sr": "serbian", "az": "azerbaijani", "sl": "slovenian", "kn": "kannada",
    "et": "estonian", "mk": "macedonian", "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian",
    "ne": "nepali", "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian", "sw": "swahili",
    "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala", "km": "khmer", "sn": "shona",
    "yo": "yoruba", "so": "somali", "af": "afrikaans", "oc": "occitan", "ka": "georgian", "be": "belarusian",
    "tg": "tajik", "sd": "sindhi", "gu": "gujarati", "am": "amharic", "yi": "yiddish", "lo": "lao",
    "uz": "uzbek", "fo": "faroese", "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk",
    "mt": "maltese", "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan",
    "tl": "tagalog", "mg": "malagasy", "as": "assamese", "tt": "tatar", "haw": "hawaiian", "ln": "lingala",
    "ha": "hausa", "ba": "bashkir", "jw": "javanese", "su": "sundanese", "yue": "cantonese",
}
TASKS = ("transcribe", "translate")


@dataclass(frozen=True)
class SpecialTokens:
    """The ids of Whisper's special tokens. Timestamps are the ids from timestamp_begin
    (<|0.00|>) on, one per 0.02 s, up to the vocabulary's end."""
    eot: int                                   # <|endoftext|>
    sot: int                                   # <|startoftranscript|>
    translate: int
    transcribe: int
    sot_lm: int                                # <|startoflm|>
    sot_prev: int                              # <|startofprev|>
    no_speech: int                             # <|nospeech|> (<|nocaptions|> in older vocabularies)
    no_timestamps: int
    n_vocab: int
    language_tokens: tuple[int, ...] = ()      # in id order; empty for an English-only model
    language_codes: tuple[str, ...] = ()       # "en", "zh", ... in the same order
    multilingual: bool = True

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1

    @classmethod
    def from_tokenizer(cls, tokenizer, config) -> SpecialTokens:
        """From a tokenizer's added tokens (engine.text.Tokenizer over Whisper's tokenizer.json)
        and the model's config (its n_vocab: a multilingual model has n_vocab >= 51865)."""
        n_vocab = config["n_vocab"] if isinstance(config, dict) else config.n_vocab
        multilingual = n_vocab >= 51865
        num_languages = n_vocab - 51765 - int(multilingual)

        def need(*names):
            for name in names:
                i = tokenizer.token_to_id(name)
                if i is not None:
                    return i
            raise InputError(f"the tokenizer has no {names[0]} token: is it Whisper's tokenizer.json?")

        ids = {"eot": need("<|endoftext|>"), "sot": need("<|startoftranscript|>"), "translate": need("<|translate|>"),
                   "transcribe": need("<|transcribe|>"), "sot_lm": need("<|startoflm|>"),
                   "sot_prev": need("<|startofprev|>"), "no_speech": need("<|nospeech|>", "<|nocaptions|>"),
                   "no_timestamps": need("<|notimestamps|>")}
        codes, tokens = [], []
        if multilingual:
            for i in range(ids["sot"] + 1, ids["translate"]):
                match = re.fullmatch(r"<\|([a-z]+)\|>", tokenizer.id_to_token(i) or "")
                if match and match.group(1) in LANGUAGES:
                    codes.append(match.group(1))
                    tokens.append(i)
            codes, tokens = codes[:num_languages], tokens[:num_languages]
        if ids["no_timestamps"] + 1 + 1501 > n_vocab:
            raise InputError(f"n_vocab {n_vocab} leaves no room for the 1501 timestamp tokens after "
                             f"<|notimestamps|> ({ids['no_timestamps']})")
        return cls(**ids, n_vocab=n_vocab, language_tokens=tuple(tokens), language_codes=tuple(codes),
                   multilingual=multilingual)

    def language_token(self, language: str) -> int:
        return self.language_tokens[self.language_codes.index(language)]

    def sot_sequence(self, language: str | None, task: str) -> list[int]:
        """<|startoftranscript|> [language] [task]; an English-only model has neither."""
        if not self.multilingual:
            return [self.sot]
        return [self.sot, self.language_token(language or "en"),
                self.transcribe if task == "transcribe" else self.translate]


class SpeechTokenizer:
    """Whisper's special tokens with a text tokenizer's encode and decode. decode() reads
    the text tokens only (ids below <|endoftext|>): timestamps and special tokens are skipped."""

    def __init__(self, specials: SpecialTokens, encode: Callable[[str], list], decode: Callable[[list], str],
                 suppress_ids: tuple[int, ...] | None = None, suppress_ids_begin: tuple[int, ...] | None = None):
        self.specials = specials
        self._encode, self._decode = encode, decode
        # "-1": from the checkpoint's config.json (the reference computes the same set from its
        # vocabulary); the task, start and no-speech tokens are always added
        self.non_speech = tuple(suppress_ids) if suppress_ids is not None else None
        self.blank = tuple(suppress_ids_begin) if suppress_ids_begin is not None else None

    @classmethod
    def from_tokenizer(cls, tokenizer, config, processor_config: dict | None = None) -> SpeechTokenizer:
        """engine.text.Tokenizer of Whisper's tokenizer.json; config: the model's (n_vocab);
        processor_config: the checkpoint's config.json (suppress_ids, suppress_ids_begin)."""
        specials = SpecialTokens.from_tokenizer(tokenizer, config)
        extra = processor_config or {}
        return cls(specials, lambda text: tokenizer.encode(text, add_special_tokens=False).ids,
                   lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
                   extra.get("suppress_ids"), extra.get("suppress_ids_begin"))

    @classmethod
    def from_json(cls, data: bytes, config, processor_config: dict | None = None,
                  file: str = "tokenizer.json") -> SpeechTokenizer:
        """From the bytes of Whisper's tokenizer.json (merges the file lost restored first: see
        restore_merges), the model's config and the checkpoint's config.json."""
        import json

        from ..text import Tokenizer
        try:
            spec = json.loads(data)
        except ValueError as e:
            raise InputError(f"{file} is not JSON: {e}") from None
        if isinstance(spec, dict) and restore_merges(spec):
            data = json.dumps(spec)
        return cls.from_tokenizer(Tokenizer.from_str(data, file=file), config, processor_config)

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def decode(self, ids) -> str:
        eot = self.specials.eot
        return self._decode([int(i) for i in ids if i < eot])

    def suppress_tokens(self, option="-1") -> np.ndarray:
        """The ids SuppressTokens masks: `option` is "-1" (the non-speech set), ids, or a
        comma-separated string of ids; the task, start and no-speech tokens are always added."""
        s = self.specials
        ids = [int(t) for t in option.split(",")] if isinstance(option, str) else list(option or ())
        if -1 in ids:
            if self.non_speech is None:
                raise InputError("suppress_tokens='-1' needs the checkpoint's suppress_ids (config.json)")
            ids = [t for t in ids if t >= 0] + list(self.non_speech)
        ids += [s.transcribe, s.translate, s.sot, s.sot_prev, s.sot_lm, s.no_speech]
        bad = [t for t in ids if not 0 <= t < s.n_vocab]
        if bad:
            raise InputError(f"suppress_tokens: ids {bad[:5]} are outside the vocabulary (0..{s.n_vocab - 1})")
        return np.array(sorted(set(ids)), np.int64)

    def blank_tokens(self) -> np.ndarray:
        """SuppressBlank's ids: " " and <|endoftext|>."""
        ids = self.blank if self.blank is not None else (*self.encode(" "), self.specials.eot)
        return np.array(sorted(set(ids)), np.int64)


def restore_merges(spec: dict) -> int:
    """Add back to a byte-level BPE tokenizer.json the merges of two-symbol tokens that its
    vocabulary holds but no merge makes; returns how many. Whisper base's tokenizer.json lacks
    its first merge, "Ġ t" (token 256, " t"): without it " t..." words encode otherwise than with
    OpenAI's tiktoken ranks, whose order the merges follow (by the merged token's id), so a
    restored merge goes before the merge of the next id."""
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("merges"), list):
        return 0
    vocab, merges = model["vocab"], model["merges"]
    pairs = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in merges]
    made = {a + b for a, b in pairs}
    added = {t["content"] for t in spec.get("added_tokens") or ()}
    missing = sorted((i, t) for t, i in vocab.items() if len(t) == 2 and t not in made and t not in added)
    for i, token in missing:
        ids = [vocab.get(a + b, -1) for a, b in pairs]
        at = next((k for k, j in enumerate(ids) if j > i), len(pairs))
        pair = [token[0], token[1]]
        merges.insert(at, " ".join(pair) if all(isinstance(m, str) for m in merges) else pair)
        pairs.insert(at, pair)
    return len(missing)


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Along the last axis, in x's own precision (float32 as the reference)."""
    shifted = x - x.max(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@dataclass(frozen=True)
class DecodingOptions:
    task: str = "transcribe"                   # or "translate" (to English)
    language: str | None = None                # None: detected on this window (English-only: "en")
    temperature: float = 0.0                   # 0: greedy (argmax)
    sample_len: int | None = None              # at most this many tokens (default n_text_ctx // 2)
    best_of: int | None = None                 # samples to rank when temperature > 0
    prompt: str | list | None = None           # the previous text (after <|startofprev|>)
    prefix: str | list | None = None           # the start of this window's text
    suppress_tokens: str | tuple | None = "-1"
    suppress_blank: bool = True
    without_timestamps: bool = False
    max_initial_timestamp: float | None = 1.0
    seed: int | None = 0                       # sampling's generator

    @classmethod
    def of(cls, **options) -> DecodingOptions:
        """From keyword options, an unknown name an InputError."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(f"unknown decoding option(s) {unknown}; known: {sorted(known)}")
        return cls(**options)

    def check(self, specials: SpecialTokens) -> None:
        if self.task not in TASKS:
            raise InputError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.language is not None:
            if not isinstance(self.language, str):
                raise InputError(f"language must be a language code such as 'en', got {self.language!r}")
            if not specials.multilingual and self.language != "en":
                raise InputError(f"language {self.language!r}: this model is English-only")
            if specials.multilingual and self.language not in specials.language_codes:
                raise InputError(f"language {self.language!r} is not one of the model's languages "
                                 f"({', '.join(specials.language_codes[:12])}, ...)")
        if not specials.multilingual and self.task != "transcribe":
            raise InputError(f"task {self.task!r}: an English-only model only transcribes")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 100:
            raise InputError(f"temperature must be a number in [0, 100], got {t!r}")
        if self.sample_len is not None and (isinstance(self.sample_len, bool) or not isinstance(self.sample_len, int)
                                            or self.sample_len < 1):
            raise InputError(f"sample_len must be an integer >= 1, got {self.sample_len!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise InputError(f"seed must be an integer >= 0 or None, got {self.seed!r}")
        if self.best_of is not None:
            if isinstance(self.best_of, bool) or not isinstance(self.best_of, int) or self.best_of < 1:
                raise InputError(f"best_of must be an integer >= 1, got {self.best_of!r}")
            if t == 0:
                raise InputError("best_of needs temperature > 0 (greedy decoding has one answer)")


@dataclass
class DecodingResult:
    language: str
    tokens: list[int] = field(default_factory=list)     # the sampled tokens, <|endoftext|> excluded
    text: str = ""
    sum_logprob: float = float("nan")
    avg_logprob: float = float("nan")
    no_speech_prob: float = float("nan")
    temperature: float = float("nan")
    compression_ratio: float = float("nan")
    language_probs: dict | None = None
    cancelled: bool = False                             # stopped by cancel() before its end


def detect_language(session, specials: SpecialTokens) -> tuple[str, dict]:
    """The most probable language of the session's window, and every language's probability.
    Uses one position of the session, then empties it."""
    if not specials.multilingual:
        raise InputError("an English-only model has no language tokens to detect a language with")
    session.rewind(0)
    logits = np.asarray(session.feed([specials.sot], rows=(-1,))[0], np.float32)
    session.rewind(0)
    ids = np.array(specials.language_tokens)
    chosen = logits[ids]
    probs = np.exp(log_softmax(chosen))
    return specials.language_codes[int(np.argmax(chosen))], dict(zip(specials.language_codes, probs.tolist()))


class TimestampRules:
    """The reference's ApplyTimestampRules for one sequence, its state kept as tokens come."""

    def __init__(self, specials: SpecialTokens, max_initial_timestamp_index: int | None):
        self.begin, self.eot, self.no_timestamps = specials.timestamp_begin, specials.eot, specials.no_timestamps
        self.max_initial = max_initial_timestamp_index

    def apply(self, logits: np.ndarray, sampled: list[int], last_timestamp: int | None) -> None:
        begin = self.begin
        logits[self.no_timestamps] = -np.inf
        last_was = len(sampled) >= 1 and sampled[-1] >= begin
        penultimate_was = len(sampled) < 2 or sampled[-2] >= begin
        if last_was:
            if penultimate_was:                  # a pair just closed: text (or EOT) next
                logits[begin:] = -np.inf
            else:                                # an open timestamp: its pair or EOT
                logits[:self.eot] = -np.inf
        if last_timestamp is not None:           # never decreasing; a segment never empty
            end = last_timestamp if last_was and not penultimate_was else last_timestamp + 1
            logits[begin:end] = -np.inf
        if not sampled:
            logits[:begin] = -np.inf
            if self.max_initial is not None:
                logits[begin + self.max_initial + 1:] = -np.inf
        logprobs = log_softmax(logits)
        top = logprobs[begin:].max()
        timestamp_logprob = top + np.log(np.exp(logprobs[begin:] - top).sum()) if np.isfinite(top) else top
        if timestamp_logprob > logprobs[:begin].max():
            logits[:begin] = -np.inf


def initial_tokens(tokenizer: SpeechTokenizer, options: DecodingOptions, language: str | None,
                   n_text_ctx: int, sample_len: int) -> list[int]:
    s = tokenizer.specials
    tokens = s.sot_sequence(language, options.task)
    if options.without_timestamps:
        tokens.append(s.no_timestamps)
    if options.prefix:
        prefix = (tokenizer.encode(" " + options.prefix.strip()) if isinstance(options.prefix, str)
                  else list(options.prefix))
        tokens += prefix[-(n_text_ctx // 2 - sample_len):]       # as the reference: [-0:] keeps all
    if options.prompt:
        prompt = (tokenizer.encode(" " + options.prompt.strip()) if isinstance(options.prompt, str)
                  else list(options.prompt))
        tokens = [s.sot_prev] + prompt[-(n_text_ctx // 2 - 1):] + tokens
    return tokens


def decode(session, tokenizer: SpeechTokenizer, options: DecodingOptions = DecodingOptions(), *,
           n_text_ctx: int = 448, n_audio_ctx: int = 1500, cancel=None) -> DecodingResult:
    """Decode the window whose audio the session holds (session.set_audio) with `options`:
    greedy at temperature 0, else `best_of` samples (one after the other, each reusing the
    initial tokens) ranked by sum_logprob / length. `cancel()` returning True stops before the
    next token (the result then holds the tokens so far, and cancelled=True)."""
    s = tokenizer.specials
    options.check(s)
    language, language_probs = options.language, None
    if language is None:
        if s.multilingual:
            language, language_probs = detect_language(session, s)
        else:
            language = "en"
    sample_len = options.sample_len or n_text_ctx // 2
    tokens = initial_tokens(tokenizer, options, language, n_text_ctx, sample_len)
    sot_index = tokens.index(s.sot)
    if len(tokens) > n_text_ctx:
        raise InputError(f"the prompt and prefix take {len(tokens)} tokens, more than the "
                         f"decoder's {n_text_ctx} positions")

    filters, rules = [], {}                      # the host's filters; the same as engine.sampler Rules
    if options.suppress_blank:                   # " " and <|endoftext|> never first
        blank = tokenizer.blank_tokens()
        rules["suppress_first"] = tuple(int(t) for t in blank)

        def suppress_blank(logits, sampled, last_timestamp):
            if not sampled:
                logits[blank] = -np.inf
        filters.append(suppress_blank)
    if options.suppress_tokens:
        suppressed = tokenizer.suppress_tokens(options.suppress_tokens)
        rules["suppress"] = tuple(int(t) for t in suppressed)

        def suppress_tokens(logits, sampled, last_timestamp):
            logits[suppressed] = -np.inf
        filters.append(suppress_tokens)
    if not options.without_timestamps:
        index = None
        if options.max_initial_timestamp:
            index = round(options.max_initial_timestamp / (CHUNK_LENGTH / n_audio_ctx))
        filters.append(TimestampRules(s, index).apply)
        rules["timestamps"] = (s.timestamp_begin, s.eot, s.no_timestamps, -1 if index is None else index)

    session.rewind(0)
    first = np.asarray(session.feed(tokens, rows=(sot_index, -1)), np.float32)
    no_speech_prob = float(np.exp(log_softmax(first[0]))[s.no_speech])
    rng = np.random.default_rng(options.seed) if options.temperature > 0 else None
    candidates = []
    for _ in range((options.best_of or 1) if options.temperature > 0 else 1):
        session.rewind(len(tokens))
        if getattr(session, "selects_on_device", lambda: False)():     # (a session may not offer it)
            candidates.append(_sample_on_device(session, first[1], tokens, Rules(options.temperature, **rules),
                                                rng, sample_len, n_text_ctx, s, cancel))
        else:
            candidates.append(_sample(session, first[1], tokens, filters, options.temperature, rng, sample_len,
                                      n_text_ctx, s, cancel))
        if candidates[-1][2]:
            break
    # the reference's ranking: sum_logprob / length (the first of equal scores)
    scores = [logprob / max(len(seq), 1) for seq, logprob, _ in candidates]
    sampled, sum_logprob, cancelled = candidates[int(np.argmax(scores))]
    text = tokenizer.decode(sampled).strip()
    result = DecodingResult(language=language, tokens=sampled, text=text, sum_logprob=sum_logprob,
                            avg_logprob=sum_logprob / (len(sampled) + 1), no_speech_prob=no_speech_prob,
                            temperature=options.temperature, compression_ratio=compression_ratio(text),
                            language_probs=language_probs, cancelled=cancelled)
    return result


def _sample(session, logits, initial, filters, temperature, rng, sample_len, n_text_ctx, s, cancel):
    """One sequence after the initial tokens: (sampled tokens without <|endoftext|>, sum_logprob
    in float32, cancelled). The session holds the initial tokens; `logits` are the last one's."""
    sampled: list[int] = []
    total = np.float32(0.0)
    last_timestamp = None                        # the last sampled timestamp token
    begin = s.timestamp_begin
    for step in range(sample_len):
        if cancel is not None and cancel():
            return sampled, float(total), True
        if step:
            logits = session.feed([sampled[-1]], rows=(-1,))[0]
        logits = np.array(logits, np.float32)    # a copy: the filters write into it
        for f in filters:
            f(logits, sampled, last_timestamp)
        if temperature == 0:
            token = int(np.argmax(logits))
        else:                                    # softmax(logits / T), by its cumulative sum
            p = np.exp(log_softmax(logits.astype(np.float64) / temperature))
            cumulative = np.cumsum(p)
            token = min(int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right")), len(p) - 1)
        total = np.float32(total + log_softmax(logits)[token])
        if token == s.eot:
            break
        sampled.append(token)
        if token >= begin:
            last_timestamp = token
        if len(initial) + len(sampled) > n_text_ctx:
            break
    return sampled, float(total), False


def _sample_on_device(session, logits, initial, rules, rng, sample_len, n_text_ctx, s, cancel):
    """_sample with each token chosen on the device by the same filters (engine.sampler): a step
    reads back its token and log-probability only, and the next step is submitted before the
    host reads this one's (engine.sampler.pipeline). The uniform draws at temperature > 0 come
    from `rng` as the host's do, UNIFORMS at a time."""
    selector = session.selector(len(logits))
    selector.start(rules, (), rng)
    sampled: list[int] = []
    total = np.float32(0.0)
    counters = getattr(get_backend(session.device), "counters", None)
    before = launched = None                     # the device's counts after the first token (not a step)
    chosen = selector.choices(tensor(np.asarray(logits, np.float32), device=session.device), session.length,
                              sample_len, lambda token, position: session.launch(selector, token, position),
                              session.follows)
    try:
        for out in chosen:
            if before is None and counters is not None:
                before, launched = counters(), selector.launched
            if cancel is not None and cancel():
                return sampled, float(total), True
            token = int(out[0])
            total = np.float32(total + out[1])
            if token == s.eot:
                break
            sampled.append(token)
            if len(initial) + len(sampled) > n_text_ctx:
                break
            session.fed(token)                   # the next step feeds it
    finally:
        chosen.close()
        if before is not None:                   # the device's traffic per decode step
            after, traffic = counters(), session.traffic
            traffic["steps"] = traffic.get("steps", 0) + selector.launched - launched
            for name in TRAFFIC:
                traffic[name] = traffic.get(name, 0) + after[name] - before[name]
    return sampled, float(total), False
