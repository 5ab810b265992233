"""The layer order holds (docs/design.md, "Layers"): import-linter's contracts in pyproject.toml
([tool.importlinter]: no import cycles, and each layer imports only from those below it), and no
module of ours takes a standard library module's name."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import need, need_import

ROOT = Path(__file__).resolve().parents[1]
# Standard library names our packages may reuse: modules every CPython start imports before any
# of ours (io; site, unless -S), so a folder of ours on sys.path can never shadow them.
IMPORTED_AT_START = {"io", "site"}


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """`lint-imports` (from this interpreter's environment) on the packages under `root`."""
    need_import("importlinter", "the import contracts need import-linter (pip install -e .[test])")
    script = Path(sys.executable).parent / "lint-imports"
    need(script.exists(), f"no lint-imports beside {sys.executable}")
    return subprocess.run([str(script), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PATH": str(script.parent), "PYTHONPATH": str(root)})


def test_the_import_contracts_hold():
    r = lint_imports(ROOT)
    assert r.returncode == 0, f"import-linter found a broken contract:\n{r.stdout}\n{r.stderr}"
    assert "0 broken" in r.stdout, r.stdout


def test_imports_that_once_went_in_circles_break_them(tmp_path):
    """The check can fail: a copy of the packages where the GGUF parser calls up into the site, nn
    imports the site and generation imports the engine's facade, as they did, breaks the engine's
    layers (formats under site, nn under both), the facade rule and the no-cycles rule."""
    for name in ("engine", "models"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "engine" / "formats" / "gguf.py", "a") as f:
        f.write("\n\ndef _folder(location):\n    from ..site.folders import open_gguf_folder\n"
                "    return open_gguf_folder(location)\n")
    with open(tmp_path / "engine" / "nn" / "functional.py", "a") as f:
        f.write("\n\ndef _load(location):\n    from ..site import load_gguf\n    return load_gguf(location)\n")
    with open(tmp_path / "engine" / "generation.py", "a") as f:
        f.write("\n\ndef _pipeline(task):\n    from . import pipeline\n    return pipeline(task)\n")
    r = lint_imports(tmp_path)
    assert r.returncode != 0, r.stdout
    assert "engine.formats is not allowed to import engine.site" in r.stdout, r.stdout
    assert "engine.formats.gguf -> engine.site.folders" in r.stdout, r.stdout
    assert "engine.nn is not allowed to import engine.site" in r.stdout, r.stdout
    assert "No cycles are allowed in engine." in r.stdout and ".formats -> .site" in r.stdout, r.stdout
    assert "engine.generation is not allowed to import engine" in r.stdout, r.stdout


def test_no_module_takes_a_standard_library_name():
    """engine/inspect.py once did: with engine/ on sys.path (a script run from it), every
    `import inspect`, dataclasses' included, found ours."""
    names = {p.stem if p.suffix == ".py" else p.name
             for package in ("engine", "models") for p in (ROOT / package).rglob("*")
             if (p.suffix == ".py" or (p / "__init__.py").exists()) and "__pycache__" not in p.parts}
    taken = sorted(names & set(sys.stdlib_module_names) - IMPORTED_AT_START)
    assert not taken, f"modules named as standard library ones: {taken}"


def test_only_the_runtime_asks_where_it_runs():
    """`sys.platform` is read in engine/runtime.py alone (in_browser() and the rest); the browser's
    modules are imported only by the runtime, the browser glue and the device layers (the
    "browser" contract of pyproject.toml)."""
    import ast
    readers = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "platform" and \
                    isinstance(node.value, ast.Name) and node.value.id == "sys":
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers and all(r.startswith("engine/runtime.py:") for r in readers), readers


def test_the_browser_contract_can_fail(tmp_path):
    for name in ("engine", "models"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "engine" / "threads.py", "a") as f:
        f.write("\n\ndef _isolated():\n    import js\n    return js.crossOriginIsolated\n")
    r = lint_imports(tmp_path)
    assert r.returncode != 0 and "engine is not allowed to import js" in r.stdout, r.stdout
    assert "engine.threads -> js" in r.stdout, r.stdout
