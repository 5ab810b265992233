"""The whole op and module suite (tests/ops, tests/nn: every op against torch on odd shapes,
broadcasting, strided views, every dtype) again with webgpu as the default device."""
from __future__ import annotations

import os
import subprocess
import sys

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_op_suite_passes_on_webgpu(gpu):
    env = dict(os.environ, ENGINE_TEST_DEVICE="webgpu")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/ops", "tests/nn"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-2000:]
    assert run.returncode == 0, run.stdout[-6000:]
    assert " passed" in summary and "failed" not in summary, summary
