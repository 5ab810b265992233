"""buildtools/compress.py keeps each compressed copy in the download cache by the input's sha256
and the encoder, so a fresh build (a new dist/, each test session's site) reuses it."""
import gzip
import shutil
import subprocess

import numpy as np
import pytest

from buildtools import compress


def test_a_second_build_takes_the_copies_from_the_store(tmp_path, monkeypatch):
    dist, store = tmp_path / "dist", tmp_path / "store"
    text = ("def f(x):\n    return x * 2\n" * 200).encode()
    noise = np.random.default_rng(0).bytes(4096)              # gzip cannot shrink it by 10%
    (dist / "js").mkdir(parents=True)
    (dist / "js" / "app.js").write_bytes(text)
    (dist / "noise.json").write_bytes(noise)
    compress.write_compressed(tmp_path / "one", dist, ["js/app.js", "noise.json"], store=store)
    assert gzip.decompress((tmp_path / "one" / "js" / "app.js.gz").read_bytes()) == text
    assert not (tmp_path / "one" / "noise.json.gz").exists()
    assert len(list(store.iterdir())) == 2 and not list(store.glob("*.partial"))

    def refuse(data):
        raise AssertionError("compressed again")
    monkeypatch.setattr(compress, "gzip_bytes", refuse)
    compress.write_compressed(tmp_path / "two", dist, ["js/app.js", "noise.json"], store=store)
    assert (tmp_path / "two" / "js" / "app.js.gz").read_bytes() == (tmp_path / "one" / "js" / "app.js.gz").read_bytes()
    assert not (tmp_path / "two" / "noise.json.gz").exists()

    (dist / "js" / "app.js").write_bytes(text + b"# changed\n")              # new bytes: a new copy
    with pytest.raises(AssertionError, match="compressed again"):
        compress.write_compressed(tmp_path / "three", dist, ["js/app.js"], store=store)


@pytest.mark.need(shutil.which("brotli") is not None, "no brotli command (Debian package brotli; "
                    "scripts/test.sh installs it)")
def test_brotli_copies_are_kept_per_brotli_version(tmp_path):
    dist, store = tmp_path / "dist", tmp_path / "store"
    text = ("<p>hello</p>\n" * 500).encode()
    dist.mkdir()
    (dist / "index.html").write_bytes(text)
    compress.write_compressed(tmp_path / "one", dist, ["index.html"], brotli="brotli 1.0.9", store=store)
    compress.write_compressed(tmp_path / "two", dist, ["index.html"], brotli="brotli 1.1.0", store=store)
    assert len(list(store.glob("*.brotli*"))) == 2                   # the version is part of the key
    packed = (tmp_path / "two" / "index.html.br").read_bytes()
    assert subprocess.run(["brotli", "-d", "-c"], input=packed, capture_output=True, check=True).stdout == text
