"""What a byte-level GGUF's `tokenizer.ggml.pre` names: how its text is split before BPE, as
each reference reads the name (engine/text/gguf.py builds the rest).

    reading = SPLITS["qwen2"]["transformers"]
    reading.split()          # the pre-tokenizer: Split(QWEN2_SPLIT, isolated) + ByteLevel(use_regex=False)

Facts taken from the references, checked by tests/text/test_gguf_pre.py (the table against
transformers' own, each distinct split against transformers loading a file that names it):
- transformers (integrations/gguf/gguf_tokenizer_mapping.py, GGUF_PRE_TOKENIZER_SPLITS, 5.x)
  gives the names of TRANSFORMERS_SPLITS a regex of their own, run as Split(regex, isolated)
  then ByteLevel without its own regex; every other name keeps GPT2Tokenizer's
  ByteLevel(add_prefix_space=false, use_regex=true), GPT-2's regex with numbers in runs.
- llama.cpp (src/llama-vocab.cpp) knows the names of LLAMA_CPP_NAMES and refuses others (a
  missing name is its "default"). Where this engine implements its reading: the GPT-2 family
  runs GPT-2's regex; the StarCoder family (`smollm` among them) "\\p{N}" first, then GPT-2's,
  each on the pieces of the one before; the Llama 3 and Qwen families their regexes with the
  contractions in ASCII only ('[sS] where transformers has (?i:'s), which also takes "'ſ"); the
  Llama 3 family takes a word that is itself a token whole (ignore_merges) and adds BOS when the
  file does not say. llama.cpp itself is not run: its regexes run through this engine's
  translation (patterns.translate_regex), which the tests hold equal to `tokenizers`'.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .patterns import compile_regex
from .pre_tokenizers import ByteLevel, Digits, Sequence, Split

_CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_ASCII_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"      # llama.cpp's spelling
LLAMA3_SPLIT = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                r"|\s+(?!\S)|\s+")
QWEN2_SPLIT = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
QWEN35_SPLIT = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
TEKKEN_SPLIT = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O_SPLIT = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
               rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
               r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_FAMILY = ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                 "jina-v5-nano")
QWEN2_FAMILY = ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez")
GPT4O_FAMILY = ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2")
TRANSFORMERS_SPLITS = {**dict.fromkeys(LLAMA3_FAMILY + ("dbrx", "smaug-bpe"), LLAMA3_SPLIT), "tekken": TEKKEN_SPLIT,
                       **dict.fromkeys(QWEN2_FAMILY, QWEN2_SPLIT), "qwen35": QWEN35_SPLIT,
                       **dict.fromkeys(GPT4O_FAMILY, GPT4O_SPLIT)}
LLAMA_CPP_NAMES = frozenset((
    "default", "minicpm5", *LLAMA3_FAMILY, "deepseek-llm", "deepseek-coder", "deepseek-v3", "spark2_5", "youtu",
    "falcon", "mpt", "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
    "a.x-4.0", "mellum", "modern-bert", "jais-2", "gemma4", "granite-embed-multi-311m", "sarvam-moe",
    "jina-v1-en", "jina-v2-code", "roberta-bpe", "whitespace", "refact", "command-r", *QWEN2_FAMILY, "qwen35",
    "stablelm2", "olmo", "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking", "jais", "tekken",
    "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "exaone-moe", "chameleon", "minerva-7b",
    *GPT4O_FAMILY, "granite-embed-multi-97m", "tiny_aya", "cohere2moe", "superbpe", "trillion", "granite-docling",
    "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder", "hunyuan", "hunyuan-dense", "hy_v4", "joyai-llm",
    "kimi-k2", "ufakzeka", "grok-2", "afmoe", "laguna", "solar-open", "mellum2"))
# the llama.cpp families whose reading is implemented, by the regexes they run
GPT2_FAMILY = ("gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "exaone4", "gigachat", "a.x-4.0", "mellum")
STARCODER_FAMILY = ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2")
LLAMA_CPP_QWEN2_FAMILY = QWEN2_FAMILY + ("stablelm2", "hunyuan", "solar-open", "grok-2")


class Reading(NamedTuple):
    split: Callable                 # () -> the pre-tokenizer
    whole_words: bool = False       # a word that is itself a token is that token (ignore_merges)
    default_bos: bool = False       # add BOS when the file has no add_bos_token


def _regex_split(regex: str) -> Callable:
    def build():
        return Sequence([Split(compile_regex(regex), "isolated"), ByteLevel(add_prefix_space=False, use_regex=False)])
    return build


def _gpt2_split():
    return ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2_split():
    return Sequence([Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)])


def _ascii_contractions(regex: str) -> Callable:
    return _regex_split(regex.replace(_CONTRACTIONS, _ASCII_CONTRACTIONS))


# tokenizer.ggml.pre -> {reference: its Reading}
SPLITS = {name: {"transformers": Reading(_regex_split(TRANSFORMERS_SPLITS[name]) if name in TRANSFORMERS_SPLITS
                                         else _gpt2_split)} for name in LLAMA_CPP_NAMES}
for _name in GPT2_FAMILY:
    SPLITS[_name]["llama.cpp"] = Reading(_gpt2_split)
for _name in STARCODER_FAMILY:
    SPLITS[_name]["llama.cpp"] = Reading(_digits_then_gpt2_split)
for _name in LLAMA3_FAMILY:
    SPLITS[_name]["llama.cpp"] = Reading(_ascii_contractions(LLAMA3_SPLIT), whole_words=True, default_bos=True)
for _name in ("dbrx", "smaug-bpe"):
    SPLITS[_name]["llama.cpp"] = Reading(_ascii_contractions(LLAMA3_SPLIT))
for _name in LLAMA_CPP_QWEN2_FAMILY:
    SPLITS[_name]["llama.cpp"] = Reading(_ascii_contractions(QWEN2_SPLIT))
SPLITS["qwen35"]["llama.cpp"] = Reading(_ascii_contractions(QWEN35_SPLIT))
