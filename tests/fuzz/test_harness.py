"""The fuzz harness itself: each kind of finding is caught, and cases are made again identically."""
import os
import pickle
import signal
import sys
import time

import pytest

from engine.errors import WeightsError
from tests.fuzz import harness
from tests.fuzz.payloads import PAYLOADS
from tests.fuzz.readers import MARKER, READERS, Reader, Seed

SHARED = {"loads": 0}                 # state a reader could leave behind (the "tamper" behaviour changes it)

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
    if what == "system":                     # the audit events code would raise
        os.system("true")
    if what == "eval":
        eval("1 + 1")
    if what == "marker":                     # code no audit event names: its marker is found
        open(MARKER, "w").close()
    if what == "unpickled":                  # what the unrestricted unpickler does with a payload
        payload = dict(PAYLOADS["code"])["reduce:builtins.exec"]
        pickle.loads(b"\x80\x02" + payload + b".")
    if what == "tamper":
        SHARED["loads"] += 1


@pytest.fixture
def selftest():
    READERS["selftest"] = Reader("selftest", misbehave, (WeightsError,), (WeightsError,), lambda: dict(SHARED))
    yield
    del READERS["selftest"]
    harness._SEEDS.pop("selftest", None)


@pytest.mark.parametrize("behaviour, verdict, kind", [
    ("ok", "ok", None), ("error", "error", "WeightsError"), ("unnamed", "unnamed", "WeightsError"),
    ("crash", "crash", "TypeError"), ("hang", "hang", "Hang"), ("stuck", "hang", "Killed"),
    ("memory", "memory", "MemoryError"), ("escape", "escape", "Escape"), ("died", "crash", "WorkerDied"),
    ("system", "code", "CodeRan"), ("eval", "code", "CodeRan"), ("marker", "code", "CodeRan"),
    ("unpickled", "code", "CodeRan"), ("tamper", "tamper", "CodeRan"),
])
def test_each_finding_is_caught(selftest, behaviour, verdict, kind):
    harness._SEEDS["selftest"] = [Seed(behaviour, {"x.bin": b"\0" * 16}, "x.bin")]
    report = harness.fuzz("selftest", seed=1, cases=2, timeout=0.5, hard_timeout=2, memory=256 << 20)
    assert report.cases == 2 and report.counts[verdict] == 2, report.describe()
    if kind is not None:
        assert {f.get("type") for f in report.findings} <= {kind}


def test_the_code_payloads_are_live():
    # through the unrestricted unpickler most of them run (the rest are ways of calling that must be
    # refused all the same: NEWOBJ of a function, classes that exist only where ultralytics is installed)
    import importlib
    for module in ("torch.serialization", "numpy.testing", "cProfile", "timeit", "runpy", "webbrowser", "pty"):
        importlib.import_module(module)       # once here, not in each child
    live = 0
    for name, payload in PAYLOADS["code"]:
        pid = os.fork()
        if pid == 0:
            folder = harness.tempfile.mkdtemp()
            os.chdir(folder)
            harness._register_extensions()
            ran = []

            def stop(event, args):               # note it and stop it there, as the harness does
                if event in harness.CODE_EVENTS or (event == "exec" and not harness._importing()):
                    ran.append(event)
                    raise harness.CodeRan(event)
            sys.addaudithook(stop)
            try:
                pickle.loads(b"\x80\x02" + payload + b".")
            except BaseException:
                pass
            time.sleep(0.05)
            os._exit(0 if ran or os.path.exists(MARKER) else 1)
        _, status = os.waitpid(pid, 0)
        live += os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert live >= 60, f"only {live} of {len(PAYLOADS['code'])} payloads run code through pickle.loads"


def test_cases_are_made_again_identically():
    for reader in ("safetensors", "png", "tokenizer", "manifest"):
        for index in (0, 17, 333):
            first, again = harness.make_case(reader, 5, index), harness.make_case(reader, 5, index)
            assert first.files == again.files and first.ops == again.ops and first.source == again.source
        assert harness.make_case(reader, 5, 0).files != harness.make_case(reader, 6, 0).files
