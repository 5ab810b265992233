"""The start-up comparison: the bare Pyodide start (web/bare-start.html, bare-start.js), the bench
page's section that runs it beside the site's own start (bench.html?startup=N), and
scripts/startup_bench.py, which measures both in fresh browser profiles. These check that each runs
and reports its numbers, not how fast: timings belong to docs/benchmarks.md."""
from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from tests.web.conftest import ROOT

BARE_STAGES = {"worker_start_ms", "pyodide_ms", "numpy_ms", "import_ms", "total_ms"}


def test_bare_start_page(nginx_server, session_factory):
    s = session_factory(nginx_server.url)
    page = s.open("bare-start.html", ready=False)
    page.wait_for_function("document.body.dataset.ready !== 'false'", timeout=90_000)
    results = json.loads(page.text_content("[data-testid=bare-results]"))
    assert results["ok"] is True and page.evaluate("document.body.dataset.ready") == "true", results
    timings = results["timings"]
    assert set(timings) == BARE_STAGES and all(timings[k] > 0 for k in BARE_STAGES)
    # the stages follow one another within the worker's total (a loaded machine may pause the
    # worker between two of them), and the page saw the answer after the worker sent it
    parts = timings["worker_start_ms"] + timings["pyodide_ms"] + timings["numpy_ms"] + timings["import_ms"]
    assert parts <= timings["total_ms"] + 1 and parts > 0.5 * timings["total_ms"]
    assert results["ready_ms"] > timings["total_ms"]
    # NumPy really imported in that worker: nothing of the site's engine, from the site's own runtime
    paths = [urlsplit(u).path for u in s.requests if not u.startswith("data:")]
    assert all(p.startswith(("/bare-start", "/pyodide/")) for p in paths), paths
    assert any(u.endswith(".whl") and "numpy" in u for u in s.requests)
    assert s.console_errors == [], s.console_errors


def test_bench_page_compares_with_a_bare_start(nginx_server, session_factory):
    s = session_factory(nginx_server.url)
    page = s.open("bench.html?startup=2&repeat=1&gemm=0&ops=0&qlinear=0&effnet=0&minilm=0", ready=False)
    page.wait_for_function("document.body.dataset.done === 'true'", timeout=300_000)
    results = json.loads(page.text_content("[data-testid=bench-results]"))
    assert "error" not in results, results
    startup = results["startup"]
    assert startup["rounds"] == 2 and startup["snapshot_stored"] is True
    assert len(startup["runs"]["bare"]) == 2 and len(startup["runs"]["site"]) == 2
    for run in startup["runs"]["bare"]:
        assert run["ms"] > 0 and set(run["stages"]) == BARE_STAGES
    for run in startup["runs"]["site"]:
        # the snapshot the page's own first start took (after its answer) is what these restore
        assert run["ms"] > 0 and run["start"] == "snapshot"
        assert {"pyodide_ms", "numpy_ms", "engine_ms", "weights_ms"} <= set(run["stages"])
    bare = sorted(r["ms"] for r in startup["runs"]["bare"])
    site = sorted(r["ms"] for r in startup["runs"]["site"])
    assert startup["bare_ms"] == pytest.approx(sum(bare) / 2, abs=0.1)
    assert startup["site_ms"] == pytest.approx(sum(site) / 2, abs=0.1)
    assert startup["ratio"] == pytest.approx(startup["site_ms"] / startup["bare_ms"], abs=0.01)
    assert "startup" in results["sections_ms"]
    # the page's own first start: a full one, whose snapshot is taken after its answer
    assert results["cold_start"]["runtime"]["start"] == "full"
    assert s.console_errors == [], s.console_errors


def test_startup_script(site, tmp_path):
    out = tmp_path / "startup.json"
    r = subprocess.run([sys.executable, "scripts/startup_bench.py", "--site", str(site), "--runs", "1",
                        "--reloads", "1", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "first visit" in r.stdout and "ratio site" in r.stdout, r.stdout
    records = json.loads(out.read_text())["records"]
    assert set(records) == {"bare", "site"}
    for label in ("bare", "site"):
        [visits] = records[label]                     # one profile: a first visit and a reload
        assert len(visits) == 2 and all(v["ready_ms"] > 0 for v in visits)
    # the site's reload is what a visitor's is: Pyodide from the snapshot its first visit took
    assert [v["details"]["runtime"]["start"] for v in records["site"][0]] == ["full", "snapshot"]
    assert all(v["details"]["ok"] is True for v in records["bare"][0])
