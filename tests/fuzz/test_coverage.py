"""Every way the engine and the build read a file is fuzzed: the rule for what the next wave adds.

A public function named load_*, read_* or open_* (or a from_* constructor in engine.formats, engine.site, engine.text,
engine.audio and engine.vision) anywhere in engine/ or buildtools/ must be run by a fuzz reader
(`Reader.covers`, tests/fuzz/readers.py) or be listed below with why it needs none. So an ONNX reader
at build time, a GGUF split-set opener or a new audio or image decoder fails this test until the
fuzzer throws damaged files at it (docs/robustness.md, "Fuzzing").
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

from tests.fuzz.readers import READERS

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = ("load_", "read_", "open_")
CONSTRUCTOR_PACKAGES = ("engine.formats", "engine.site", "engine.text", "engine.audio", "engine.vision")

# entry points that read no file of their own, each with the reader that covers what they parse
NOT_READERS = {
    "engine.untrusted.load_json": "the JSON parser of every JSON reader (safetensors, tokenizer, manifest)",
    "engine.text.truncation.read_truncation": "a part of tokenizer.json (tokenizer reader)",
    "engine.text.truncation.read_padding": "a part of tokenizer.json (tokenizer reader)",
    "engine.text.models.read_vocab": "a part of tokenizer.json (tokenizer reader)",
    "engine.text.models.read_merges": "a part of tokenizer.json (tokenizer reader)",
    "engine.text.patterns.read_pattern": "a part of tokenizer.json (tokenizer reader)",
    "engine.runtime.load_packages": "Pyodide's own packages (jinja2) from its lock, checked by sha256: no user's file",
    "engine.tasks.load_packages": "as engine.runtime.load_packages, for a pipeline",
    "engine.formats.gguf.read_header": "load_gguf's header parser (gguf reader)",
    "engine.formats.safetensors_header.read_header": "load_safetensors' header parser (safetensors reader)",
    "engine.formats.ctranslate2.read_header": "load_ctranslate2's header parser (ctranslate2 reader)",
    "engine.formats.sources.open_source": "a byte source (path, bytes, URL), no format",
    "engine.site.urls.open_url": "a byte source over HTTP, no format",
    "engine.site.urls.load_folder": "a site folder by URL: fetch_model (manifest reader)",
    "engine.site.load_safetensors_async": "the bytes of a URL through load_safetensors (safetensors, manifest readers)",
    "engine.site.load_gguf_async": "the bytes of a URL through load_gguf (gguf, manifest readers)",
    "engine.site.load_pth_async": "the bytes of a URL through load_pth (pth readers)",
    "engine.site.urls.load_safetensors_async": "as engine.site.load_safetensors_async",
    "engine.site.urls.load_gguf_async": "as engine.site.load_gguf_async",
    "engine.site.urls.load_pth_async": "as engine.site.load_pth_async",
    "engine.site.browser.load_checkpoint": "the page's loader, in Pyodide: fetch_model (manifest reader)",
    "engine.site.folders.read_registry": "the site's own models.json, written by build.py",
    "engine.tasks.base.open_checkpoint": "a registry model's weights through the loaders above",
    "engine.tasks.base.open_checkpoint_async": "as open_checkpoint, awaited",
    "engine.backends.simd.library.load_library": "the engine's own compiled kernels, not input",
    "buildtools.runtime.read_tar_files": "Pyodide's release tarball, checked against its pinned sha256",
    "buildtools.convert.read_weights": "registry weights, pinned by sha256, through the engine's loaders",
    "buildtools.convert.read_checkpoint": "registry weights, pinned by sha256, through the engine's loaders",
    "engine.tasks.ocr.read_text": "the page's RGBA pixels, or an image file's bytes through read_image (png, npy, "
                                  "pillow readers)",
}


def entry_points() -> set[str]:
    found = set()
    for path in sorted([*(ROOT / "engine").rglob("*.py"), *(ROOT / "buildtools").rglob("*.py")]):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(PREFIXES):
                found.add(f"{module}.{node.name}")
            if isinstance(node, ast.ClassDef) and module.startswith(CONSTRUCTOR_PACKAGES):
                for item in node.body:
                    # from_config builds a part from an already parsed document: its format's reader runs it
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("from_") \
                            and item.name != "from_config" and any(
                            isinstance(d, ast.Name) and d.id == "classmethod" for d in item.decorator_list):
                        found.add(f"{module}.{node.name}.{item.name}")
    return found


def test_every_reader_of_files_is_fuzzed():
    covered = {name for reader in READERS.values() for name in reader.covers}
    missing = sorted(entry_points() - covered - set(NOT_READERS))
    assert not missing, ("entry points that read files but no fuzz reader runs (add one to tests/fuzz/readers.py "
                         f"with seeds, or say in NOT_READERS why none is needed): {missing}")


def test_the_lists_name_what_exists():
    for name in {n for reader in READERS.values() for n in reader.covers} | set(NOT_READERS):
        parts = name.split(".")
        for split in range(len(parts) - 1, 0, -1):       # the longest importable module prefix
            try:
                target = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            for attribute in parts[split:]:
                target = getattr(target, attribute)
            break
        else:
            raise AssertionError(f"{name} names no module")
