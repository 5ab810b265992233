"""Every reader against mutated files: a result or the engine's own error naming the file, nothing else.

A fixed set of cases per reader (seed SUITE_SEED), each made from a valid seed file by one to three
mutations and run in a forked worker with a time limit, a memory limit and an audit of every file
it opens (tests/fuzz/harness.py). A failure lists each finding with the command that replays it;
scripts/fuzz.py runs many more cases and keeps the mutated files.
"""
import sys

import pytest

from tests.fuzz.harness import fuzz
from tests.fuzz.readers import READERS

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the harness forks and uses Linux limits")

SUITE_SEED = 20_240_613
CASES = {"safetensors": 500, "gguf": 600, "ctranslate2": 400, "pth": 500, "pth_modules": 500, "png": 300, "npy": 400, "pillow": 300, "tokenizer": 300,
         "manifest": 400, "wav": 400, "onnx": 300}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_mutated_files_give_results_or_engine_errors(reader):
    report = fuzz(reader, SUITE_SEED, CASES[reader], timeout=10.0, memory=512 << 20)
    assert report.cases == CASES[reader]
    assert not report.findings, "\n" + report.describe() + "\nreplay one: PYTHONPATH=. python scripts/fuzz.py --replay ..."
    # the mutations must reach past the first checks: some cases read whole files
    assert report.counts["ok"] > 0
