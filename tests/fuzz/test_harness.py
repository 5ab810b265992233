"""The fuzz harness itself: each kind of finding is caught, and cases are made again identically."""
import os
import signal
import sys
import time

import pytest

from engine.errors import WeightsError
from tests.fuzz import harness
from tests.fuzz.readers import READERS, Reader, Seed

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the harness forks and uses Linux limits")


def misbehave(path, case):
    """A reader that does what its seed's name says, whatever the mutated bytes."""
    what = case.source
    if what == "ok":
        return
    if what == "error":
        raise WeightsError("refused", file=str(path))
    if what == "unnamed":
        raise WeightsError("refused, but where?")
    if what == "crash":
        raise TypeError("not an engine error")
    if what == "hang":
        while True:
            pass
    if what == "stuck":                      # in C code the alarm cannot interrupt
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    if what == "memory":
        bytearray(1 << 34)
    if what == "escape":
        open(os.path.join(os.path.dirname(path), "..", "outside.json")).read()
    if what == "died":
        os._exit(3)


@pytest.fixture
def selftest():
    READERS["selftest"] = Reader("selftest", misbehave, (WeightsError,), (WeightsError,))
    yield
    del READERS["selftest"]
    harness._SEEDS.pop("selftest", None)


@pytest.mark.parametrize("behaviour, verdict, kind", [
    ("ok", "ok", None), ("error", "error", "WeightsError"), ("unnamed", "unnamed", "WeightsError"),
    ("crash", "crash", "TypeError"), ("hang", "hang", "Hang"), ("stuck", "hang", "Killed"),
    ("memory", "memory", "MemoryError"), ("escape", "escape", "Escape"), ("died", "crash", "WorkerDied"),
])
def test_each_finding_is_caught(selftest, behaviour, verdict, kind):
    harness._SEEDS["selftest"] = [Seed(behaviour, {"x.bin": b"\0" * 16}, "x.bin")]
    report = harness.fuzz("selftest", seed=1, cases=2, timeout=0.5, hard_timeout=2, memory=256 << 20)
    assert report.cases == 2 and report.counts[verdict] == 2, report.describe()
    if kind is not None:
        assert {f.get("type") for f in report.findings} <= {kind}


def test_cases_are_made_again_identically():
    for reader in ("safetensors", "png", "tokenizer", "manifest"):
        for index in (0, 17, 333):
            first, again = harness.make_case(reader, 5, index), harness.make_case(reader, 5, index)
            assert first.files == again.files and first.ops == again.ops and first.source == again.source
        assert harness.make_case(reader, 5, 0).files != harness.make_case(reader, 6, 0).files
