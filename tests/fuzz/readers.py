"""The readers under test: how each opens a case and reads everything in it, and what it may raise.

A reader passes a case when it returns or raises one of `allowed` (the engine's errors for that
kind of file); an error of a `named` type must also name the file. Anything else is a finding, and
so is a change in what `state` returns (the engine's shared objects a file must never reach).
"""
from __future__ import annotations

import asyncio
import posixpath
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.errors import AudioError, InputError, TokenizerError, WeightsError
from tests.helpers import range_reply

SEEDS = Path(__file__).resolve().parent / "seeds"
BASE = "https://fuzz.invalid/models/toy/"        # where the manifest reader's site lives
SPLIT_FIRST = "toy-00001-of-00002.gguf"           # the first file of the gguf reader's split seed
TEXT = "Hello, world! The naive cafe's 123 tests don't fail; 東京 [MASK] héllo aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"


MARKER = "PWNED"             # what a hostile payload writes in the folder it runs in (tests/fuzz/payloads.py)


class Escape(BaseException):
    """A reader reached for a file outside its case (raised where it opens it, so nothing is read)."""


class CodeRan(BaseException):
    """Something only code smuggled in by the file would do: raised where it happens (an audit event),
    or afterwards when its marker is found."""


@dataclass(frozen=True)
class Seed:
    name: str
    files: dict                  # path relative to the case folder -> bytes
    main: str                    # what the reader opens, relative to the case folder ("" the folder)


@dataclass(frozen=True)
class Reader:
    name: str
    run: Callable                # run(path, case): open the case with the reader, read all of it
    allowed: tuple               # the error types a hostile file may give
    named: tuple                 # of those, the ones whose message must name the file
    state: Callable | None = None   # a fingerprint of shared state no case may change
    covers: tuple = ()           # the entry points it runs, "module.function" (tests/fuzz/test_coverage.py)

    def seeds(self) -> list[Seed]:
        return load_seeds(self.name)


def load_seeds(reader: str) -> list[Seed]:
    """seeds/<reader>/: each file a seed, each folder a seed opened as a folder."""
    out = []
    for entry in sorted((SEEDS / reader).iterdir()):
        if entry.is_dir():
            files = {str(p.relative_to(entry)): p.read_bytes() for p in sorted(entry.rglob("*")) if p.is_file()}
            out.append(Seed(entry.name, files, ""))
        else:
            out.append(Seed(entry.name, {entry.name: entry.read_bytes()}, entry.name))
    return out


# --- what each reader does with a case ----------------------------------------------------------------

def inspected(read):
    """`read` after `python -m engine inspect` of the same file (its own header readers: .pth's
    read_pth_header walks the pickle by another path), as text and as JSON. An engine error from the
    inspection is checked like the read's, once the read has run too."""
    def run(path, case) -> None:
        import json
        from engine.errors import WeightsError
        from engine.formats.describe import format_text, inspect_file
        first = None
        try:
            report = inspect_file(path)
            format_text(report)
            json.dumps(report, ensure_ascii=False)
        except WeightsError as e:
            first = e
        read(path, case)
        if first is not None:
            raise first
    run.__name__ = read.__name__
    return run


def read_safetensors(path, case) -> None:
    from engine.site import load_safetensors
    with load_safetensors(path) as weights:
        for tensor in weights.get_many().values():
            tensor.numpy()
        for name in weights:
            weights[name].numpy()


def _read_all(weights) -> None:
    from engine.quantized import QuantizedTensor
    for name in list(weights.keys()):
        tensor = weights[name]
        if isinstance(tensor, QuantizedTensor):
            tensor = tensor.dequantize()
        if hasattr(tensor, "gather"):                    # a row table: its first and last rows
            tensor.gather([0, tensor.shape[0] - 1])
        else:
            tensor.numpy()


def read_gguf(path, case) -> None:
    """Every tensor (dequantized), then the tokenizer its metadata describes, as the chat uses it.
    A folder is a split model: its first file opened from disk, then by URL (the others fetched)."""
    from engine.site import load_gguf
    from engine.text import Tokenizer
    if path.is_dir():
        read_split(path)
        return
    inspect_by_url(path)
    with load_gguf(path) as weights:
        _read_all(weights)
        if "tokenizer.ggml.model" in weights.metadata:
            use_gguf_tokenizer(Tokenizer.from_gguf(weights))


def use_gguf_tokenizer(tokenizer) -> None:
    encoding = tokenizer.encode(TEXT)
    tokenizer.decode(encoding.ids, skip_special_tokens=False)
    stream = tokenizer.decode_stream()
    for token_id in encoding.ids[:16]:
        stream.step(token_id)
    if tokenizer.chat_template is not None:
        tokenizer.apply_chat_template([{"role": "user", "content": TEXT}], add_generation_prompt=True)


def read_pth(path, case) -> None:
    from engine.formats import load_pth
    for tensor in load_pth(path).values():
        tensor.numpy()


def pickle_state() -> dict:
    """What the pickle readers share between loads: every allowed global's stand-in, with whatever
    state it could carry (attributes, a function's defaults), and the tables naming them."""
    from engine.formats import pickled
    out = {}
    for table in ("GLOBALS", "MODULE_GLOBALS", "STORAGES"):
        for name, value in getattr(pickled, table).items():
            function = getattr(value, "function", value)
            out[f"{table}[{name}]"] = (type(value).__name__, repr(value), repr(getattr(value, "__dict__", None)),
                                       repr(getattr(function, "__defaults__", None)),
                                       repr(getattr(function, "__kwdefaults__", None)),
                                       repr(getattr(function, "__dict__", None)))
    for name in ("Record", "StandIn", "TorchName", "StorageType"):
        if hasattr(pickled, name):
            out[name] = repr(sorted((k, repr(v)) for k, v in vars(getattr(pickled, name)).items()))
    return out


def read_pth_modules(path, case) -> None:
    """A whole-module checkpoint: its records (whose settings must be plain, JSON-ready values) and
    its tensors by module path through load_pth's door."""
    import json
    from engine.formats import load_pth, read_module_checkpoint
    checkpoint = read_module_checkpoint(path)
    json.dumps([checkpoint.meta, {path: record.attrs for path, record in checkpoint.modules.items()}])
    for tensor in load_pth(path).values():
        tensor.numpy()


def read_ctranslate2(path, case) -> None:
    from engine.formats import load_ctranslate2
    with load_ctranslate2(path) as weights:
        for tensor in weights.get_many().values():
            tensor.numpy()
        for name in weights:
            weights[name].numpy()


def read_onnx_file(path, case) -> None:
    """An ONNX file as the build reads PP-OCR's: every tensor, node and metadata entry."""
    from buildtools.onnx_weights import read_onnx
    checkpoint = read_onnx(Path(path).read_bytes(), name=str(path))
    for name in checkpoint:
        checkpoint.array(name)
    assert isinstance(checkpoint.metadata, dict) and checkpoint.nodes


def read_image_file(path, case) -> None:
    from engine.vision import image_size, read_image
    image_size(path)
    read_image(path)


def read_audio(path, case) -> None:
    """A WAV as a transcription reads it: the samples, mono at 16 kHz, then the log-mel spectrogram."""
    from engine.audio import load_audio, log_mel_spectrogram, read_wav
    samples, rate = read_wav(path)
    log_mel_spectrogram(load_audio(samples, orig_sr=rate, name=str(path)))


def use_tokenizer(path, case) -> None:
    from engine.text import Tokenizer
    tokenizer = Tokenizer.from_file(path)
    encoding = tokenizer.encode(TEXT, "a pair of texts")
    tokenizer.decode(encoding.ids)
    tokenizer.decode(encoding.ids, skip_special_tokens=False)
    tokenizer.encode_batch_arrays([TEXT, "short"])
    stream = tokenizer.decode_stream()
    for token_id in encoding.ids[:16]:
        stream.step(token_id)


class FolderTransport:
    """engine.site.remote's Transport over a folder: a static host serving it at BASE with Range
    support. A URL that leaves the folder (after the host's own resolving of %2e%2e and ..) is an
    escape: a page must never fetch outside the model's folder."""

    def __init__(self, folder: Path):
        self.folder = folder

    async def get(self, url, start=None, end=None):
        if not url.startswith(BASE):
            raise Escape(f"fetched {url}")
        name = posixpath.normpath(urllib.parse.unquote(urllib.parse.urlsplit(url).path[len("/models/toy/"):]))
        if name.startswith(("../", "/")) or name == "..":
            raise Escape(f"fetched {url}")
        path = self.folder / name
        if "\0" in name or not path.is_file():
            return 404, {}, b""
        data = path.read_bytes()
        return range_reply(data, start, end)


async def _no_sleep(seconds):
    pass


def inspect_by_url(path) -> None:
    """What the chat card's "open a GGUF by URL" reads first: the header by Range, described and
    checked against the decoder (engine.tasks.model_urls.inspect)."""
    from engine.tasks import model_urls
    asyncio.run(model_urls.inspect("text-generation", BASE + path.name, transport=FolderTransport(path.parent),
                                   cache=False))


def read_split(folder) -> None:
    from engine.site import load_gguf, load_gguf_async
    first = None
    try:
        with load_gguf(folder / SPLIT_FIRST) as weights:
            _read_all(weights)
    except WeightsError as e:          # checked like any error, once the URL's path has run too
        first = e
    with asyncio.run(load_gguf_async(BASE + SPLIT_FIRST, transport=FolderTransport(folder), cache=False)) as weights:
        _read_all(weights)
    if first is not None:
        raise first


def read_site(path, case) -> None:
    """A built model folder: natively from disk (a GGUF folder opens as one file), and as the page
    reads it, over HTTP through its manifest (tensors, row tables, processor files)."""
    from engine.site import load_gguf
    from engine.site.folders import fetch_model
    first = None
    if case.source.startswith("gguf"):
        try:
            with load_gguf(path) as weights:
                _read_all(weights)
        except WeightsError as e:      # checked like any error, once the page's path has run too
            first = e
    checkpoint = asyncio.run(fetch_model(BASE, transport=FolderTransport(path), sleep=_no_sleep))
    _read_all(checkpoint.tensors)
    if first is not None:
        raise first


INSPECT = ("engine.formats.describe.inspect_file", "engine.formats.pth.read_pth_header")
IMAGES = ("engine.vision.image.read_image", "engine.vision.image.image_size")
READERS = {reader.name: reader for reader in (
    Reader("safetensors", inspected(read_safetensors), (WeightsError,), (WeightsError,),
           covers=("engine.site.load_safetensors", "engine.formats.safetensors.load_safetensors", *INSPECT)),
    # a tokenizer's errors (TokenizerError, an InputError) name the file; the text's need not
    Reader("gguf", inspected(read_gguf), (WeightsError, InputError), (WeightsError, TokenizerError),
           covers=("engine.site.load_gguf", "engine.formats.gguf.load_gguf", "engine.text.tokenizer.Tokenizer.from_gguf",
                   "engine.text.tokenizer.Tokenizer.apply_chat_template", "engine.formats.gguf_split.open_splits",
                   "engine.site.urls.open_splits_async", "engine.tasks.model_urls.inspect")),
    Reader("pth", inspected(read_pth), (WeightsError,), (WeightsError,), pickle_state,
           covers=("engine.formats.pth.load_pth", "engine.formats.pth.read_pth_arrays")),
    Reader("pth_modules", inspected(read_pth_modules), (WeightsError,), (WeightsError,), pickle_state,
           covers=("engine.formats.pth.read_module_checkpoint",)),
    Reader("ctranslate2", inspected(read_ctranslate2), (WeightsError,), (WeightsError,),
           covers=("engine.formats.ctranslate2.load_ctranslate2",)),
    Reader("onnx", read_onnx_file, (WeightsError,), (WeightsError,), covers=("buildtools.onnx_weights.read_onnx",)),
    Reader("png", read_image_file, (InputError,), (InputError,), covers=IMAGES),
    Reader("npy", read_image_file, (InputError,), (InputError,), covers=IMAGES),
    Reader("pillow", read_image_file, (InputError,), (InputError,), covers=IMAGES),
    # an empty WAV reaches log_mel_spectrogram, whose InputError (no samples) is about the call
    Reader("wav", read_audio, (InputError,), (AudioError,),
           covers=("engine.audio.wav.read_wav", "engine.audio.load.load_audio")),
    # errors of the text and the calls (InputError) need not name the file; the file's own must
    Reader("tokenizer", use_tokenizer, (InputError,), (TokenizerError,),
           covers=("engine.text.tokenizer.Tokenizer.from_file", "engine.text.tokenizer.Tokenizer.from_buffer",
                   "engine.text.tokenizer.Tokenizer.from_str")),
    Reader("manifest", read_site, (WeightsError,), (WeightsError,),
           covers=("engine.site.folders.fetch_model", "engine.site.folders.fetch_gguf", "engine.site.folders.open_gguf_folder")),
)}
