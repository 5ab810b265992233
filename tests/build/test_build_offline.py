"""The service worker's list (dist/sw.js, buildtools/serviceworker.py): every file the page and its
runtime load, each with the sha256 of the file in dist/; no weights, no .gz copies; a new version
whenever a kept file changes."""
import hashlib
import json

from buildtools.serviceworker import kept, service_worker


def site_of(dist):
    text = (dist / "sw.js").read_text()
    start = text.index("self.SITE = ") + len("self.SITE = ")
    return json.loads(text[start:text.index(";\n", start)])


def test_sw_lists_this_builds_files(dist):
    site = site_of(dist)
    files = site["files"]
    for rel in ("index.html", "app.py", "bridge.py", "worker.js", "pyodide/pyodide.asm.wasm",
                "micropython/micropython.wasm", "pyscript/core.js", "models/mnist_cnn/manifest.json",
                "samples/chelsea.png"):
        assert rel in files, rel
    for rel, sha256 in files.items():
        assert hashlib.sha256((dist / rel).read_bytes()).hexdigest() == sha256, rel
    assert not [rel for rel in files if rel.endswith((".gz", ".safetensors", ".gguf")) or rel.startswith("bench")]
    assert (dist / "sw-core.js").is_file()


def test_a_changed_file_is_a_new_version():
    outputs = {"index.html": {"sha256": "a" * 64}, "pyodide/pyodide.asm.wasm": {"sha256": "b" * 64},
               "pyodide/pyodide.asm.wasm.gz": {"sha256": "c" * 64},
               "models/m/model-00001-of-00001.safetensors": {"sha256": "d" * 64}}
    files = kept(outputs)
    assert list(files) == ["index.html", "pyodide/pyodide.asm.wasm"]
    changed = kept({**outputs, "index.html": {"sha256": "e" * 64}})
    assert service_worker(files) != service_worker(changed)
    assert service_worker(files) == service_worker(dict(files))          # the same build: the same bytes
