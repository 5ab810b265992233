"""The one rule for missing dependencies (tests/helpers.py): outside CI a test skips and says why;
under CI (CI=true, as .ci/run sets it) it fails, since CI must have everything installed."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import need, need_import, under_ci

ROOT = Path(__file__).resolve().parents[1]
MISSING = "no_such_package_for_the_skip_rule"


@pytest.mark.parametrize("value, expected", [("true", True), ("1", True), ("TRUE", True), ("yes", True),
                                             (" on ", True), ("false", False), ("0", False), ("", False)])
def test_under_ci_reads_a_true_value(monkeypatch, value, expected):
    monkeypatch.setenv("CI", value)
    assert under_ci() is expected


def test_under_ci_is_false_without_the_variable(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert under_ci() is False


def test_outside_ci_a_missing_module_skips_with_the_reason(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"the reference: No module named '{MISSING}'"):
        need_import(MISSING, "the reference")
    with pytest.raises(pytest.skip.Exception, match="^no tool$"):
        need(False, "no tool")


@pytest.mark.parametrize("value", ["true", "1"])
def test_under_ci_a_missing_module_fails(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match=f"No module named '{MISSING}'.*under CI"):
        need_import(MISSING)
    with pytest.raises(pytest.fail.Exception, match="no tool"):
        need(False, "no tool")


def test_a_present_dependency_passes_either_way(monkeypatch):
    for value in ("true", "false"):
        monkeypatch.setenv("CI", value)
        assert need_import("json").dumps([1]) == "[1]"
        need(True, "never said")


def test_our_own_modules_are_never_imported_through_it():
    for name in ("engine.formats.pth", "models", "buildtools.fetch", "tests.helpers"):
        with pytest.raises(ValueError, match="import the project's own modules normally"):
            need_import(name)


def test_an_import_error_inside_an_installed_package_is_not_a_missing_one(tmp_path, monkeypatch):
    (tmp_path / "broken_package_for_the_skip_rule").mkdir()
    (tmp_path / "broken_package_for_the_skip_rule" / "__init__.py").write_text(
        "raise ImportError('a bug, not an absence')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(ImportError, match="a bug, not an absence"):
        need_import("broken_package_for_the_skip_rule")


@pytest.mark.parametrize("ci, outcome", [("", "1 skipped"), ("true", "1 error")])
def test_at_a_module_top_it_skips_or_fails_the_module(tmp_path, ci, outcome):
    (tmp_path / "test_needs_it.py").write_text(
        f"from tests.helpers import need_import\n{MISSING} = need_import({MISSING!r})\n\n"
        "def test_uses_it():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-rs", "test_needs_it.py"], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CI": ci})
    assert outcome in r.stdout, r.stdout + r.stderr
    assert f"No module named '{MISSING}'" in r.stdout, r.stdout


def test_the_suite_decides_skip_or_fail_only_through_the_rule():
    """No importorskip (it skips even under CI), and no other reading of the CI variable."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name in ("helpers.py", "test_skip_rule.py"):
            continue
        text = path.read_text()
        if "importorskip(" in text or re.search(r"environ(\.get)?[(\[]\s*[\"']CI[\"']", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"use tests.helpers.need / need_import instead in: {offenders}"
