"""The site's start against a bare Pyodide start, in headless Chromium over nginx.

    python scripts/startup_bench.py [--site dist] [--runs 5] [--reloads 2] [--json out.json]
    python scripts/startup_bench.py --variant before=dist-before     # another build (python build.py --out dist-before)

Each run takes two fresh browser profiles (empty HTTP cache, no service worker), one for the
bare start (bare-start.html: a worker that runs loadPyodide(), loadPackage("numpy") and
`import numpy` from the site's own pyodide/ folder) and one for the site (index.html), the order
alternating between runs. Each profile visits once, then reloads (`--reloads` times): the site's
reload waits first for what a visitor's would have, the service worker in control and the
worker's memory snapshot stored. Ready is when the page sets body[data-ready="true"], in ms since
its navigation began (a MutationObserver records it, so polling adds nothing). Prints, per visit,
the medians and spreads of both, the ratio of the medians (site / bare) and the median of the
ratios paired by run, and the stages of both workers (their times count from each worker's
creation, which is also recorded).

nginx serves the site as the tests do (tests/web/conftest.py: deploy/nginx.conf, brotli), and
Chromium gets the tests' flags. The machine's load (`/proc/loadavg`) is printed before and after:
a shared machine's numbers hold only within one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.web.conftest import CHROMIUM, CHROMIUM_ARGS, start_nginx

# Runs before the page's own scripts: when body[data-ready] first turns "true", and when each
# worker was created (Worker is subclassed, nothing else changes), in the page's performance.now().
RECORD = """(() => {
  const seen = () => {
    if (window.__readyAt === undefined && document.body && document.body.dataset.ready === "true")
      window.__readyAt = performance.now();
  };
  new MutationObserver(seen).observe(document, { subtree: true, childList: true, attributes: true,
                                                  attributeFilter: ["data-ready"] });
  const Base = window.Worker;
  window.__workers = [];
  window.Worker = class extends Base {
    constructor(...args) { super(...args); window.__workers.push([String(args[0]), performance.now()]); }
  };
})();"""

PAGES = {"bare": "bare-start.html", "site": "index.html"}

# what each page says about its worker once ready
DETAILS = {
    "bare": "JSON.parse(document.querySelector('[data-testid=bare-results]').textContent)",
    "site": "(() => { const i = window.engineClient.snapshot().info; return {timings: i.timings, runtime: i.runtime}; })()",
}
SNAPSHOT_STORED = """async () => {
    const cache = await caches.open("engine-pyodide-snapshot");
    return (await cache.keys()).length > 0;
}"""


def browser_cpu_ms(profile: str) -> float | None:
    """CPU time used so far by the browser that runs `profile` and every process below it (Linux
    /proc; None elsewhere). The difference across a start is the work it took, which other load on
    a shared machine stretches in wall time but hardly changes."""
    procs = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        procs[int(stat.parent.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]), cmdline)
    if not procs:
        return None
    roots = [pid for pid, (_, _, cmd) in procs.items() if f"--user-data-dir={profile}".encode() in cmd]
    tree, ticks = set(roots), 0
    for _ in range(4):                       # browser -> zygotes -> renderers, GPU, network, ...
        tree |= {pid for pid, (ppid, _, _) in procs.items() if ppid in tree}
    ticks = sum(procs[pid][1] for pid in tree)
    return ticks * 1000 / os.sysconf("SC_CLK_TCK") if roots else None


def wait_ready(page, timeout_ms: float = 120_000) -> dict:
    page.wait_for_function("window.__readyAt !== undefined || document.body?.dataset.ready === 'error' || "
                           "document.querySelector('[data-testid=engine-status]')?.textContent === 'error'",
                           timeout=timeout_ms)
    ready = page.evaluate("window.__readyAt")
    if ready is None:
        raise RuntimeError(f"{page.url} failed to start: {page.text_content('body')[:500]}")
    return {"ready_ms": round(ready, 1), "workers": page.evaluate("window.__workers")}


def profile_run(playwright, kind: str, base_url: str, reloads: int, args: list[str]) -> list[dict]:
    """A first visit and `reloads` reloads of one page ("bare" or "site"), in a fresh profile."""
    visits = []
    with tempfile.TemporaryDirectory(prefix="startup-profile-") as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=args, headless=True, viewport={"width": 1200, "height": 900})
        try:
            context.add_init_script(RECORD)
            page = context.pages[0] if context.pages else context.new_page()
            for visit in range(reloads + 1):
                cpu = browser_cpu_ms(profile)
                if visit:
                    page.reload()
                else:
                    page.goto(base_url + PAGES[kind])
                record = wait_ready(page)
                after = browser_cpu_ms(profile)
                record["cpu_ms"] = round(after - cpu) if cpu is not None and after is not None else None
                record["details"] = page.evaluate(DETAILS[kind])
                visits.append(record)
                if visit == reloads:
                    break
                if kind == "site":           # what a visitor's reload has: the snapshot and the service worker
                    if record["details"]["runtime"].get("snapshot_stored") is not None:
                        page.wait_for_function(f"({SNAPSHOT_STORED})()", timeout=60_000)
                    # the page registers its service worker 3 s after ready (a build may have none)
                    page.wait_for_function(f"performance.now() > {record['ready_ms'] + 4000}", timeout=60_000)
                    if page.evaluate("navigator.serviceWorker.getRegistration().then((r) => !!r)"):
                        page.wait_for_function("navigator.serviceWorker.controller !== null", timeout=180_000)
                time.sleep(1.5)              # both: let the background work of the visit settle
        finally:
            context.close()
    return visits


def stages(kind: str, record: dict) -> dict:
    """The worker's stages (ms since its creation for worker_start_ms; durations otherwise)."""
    details = record["details"]
    timings = details.get("timings", {})
    created = next((at for url, at in record["workers"] if ("bare-start" in url) == (kind == "bare")), None)
    out = {"worker_created_ms": created}
    out.update({k: v for k, v in timings.items() if isinstance(v, (int, float))})
    if kind == "site":
        out["start"] = details.get("runtime", {}).get("start")
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values) / 1000:.2f} s ({min(values) / 1000:.2f}-{max(values) / 1000:.2f})"


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()
    except OSError:
        return "?"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default=str(ROOT / "dist"), help="the built site (default: dist/)")
    parser.add_argument("--runs", type=int, default=5, help="fresh profiles per page (default 5)")
    parser.add_argument("--reloads", type=int, default=2, help="reloads after each first visit (default 2)")
    parser.add_argument("--only", choices=sorted(PAGES), help="measure one page only")
    parser.add_argument("--variant", action="append", default=[], metavar="LABEL=SITE",
                        help="also measure index.html of another build (its own host), e.g. the build before a change")
    parser.add_argument("--json", help="also write every record to this file")
    opts = parser.parse_args(argv)
    site = Path(opts.site).resolve()
    if not (site / "bare-start.html").exists():
        parser.error(f"{site} has no bare-start.html: build the site first (python build.py)")
    from playwright.sync_api import sync_playwright

    # label -> (page kind, site folder); every site on its own host (origin)
    measured = {kind: (kind, site) for kind in PAGES if opts.only in (None, kind)}
    for variant in opts.variant:
        label, _, path = variant.partition("=")
        if not path or label in measured:
            parser.error(f"--variant {variant!r}: give LABEL=SITE with a new label")
        measured[label] = ("site", Path(path).resolve())
    load_before = loadavg()
    records = {label: [] for label in measured}
    hosts = {}
    with tempfile.TemporaryDirectory(prefix="startup-nginx-") as tmp:
        try:
            for folder in {folder for _, folder in measured.values()}:
                hosts[folder] = start_nginx(folder, Path(tmp) / str(len(hosts)))
            with sync_playwright() as playwright:
                for run in range(opts.runs):
                    labels = list(records) if run % 2 == 0 else list(records)[::-1]
                    for label in labels:
                        kind, folder = measured[label]
                        visits = profile_run(playwright, kind, hosts[folder].url, opts.reloads, CHROMIUM_ARGS)
                        records[label].append(visits)
                        print(f"run {run + 1} {label:6}: " + "  ".join(f"{v['ready_ms'] / 1000:.2f}" for v in visits)
                              + " s", flush=True)
        finally:
            for host in hosts.values():
                host.stop()
    load_after = loadavg()

    names = ["first visit"] + ["reload" if i == 1 else f"reload {i}" for i in range(1, opts.reloads + 1)]
    print(f"\nready, since navigation (median (min-max) of {opts.runs} profiles); load {load_before} -> {load_after}")
    for visit, name in enumerate(names):
        line = {label: [r[visit]["ready_ms"] for r in records[label]] for label in records}
        text = "  ".join(f"{label} {spread(values)}" for label, values in line.items())
        if "bare" in line:
            bare = statistics.median(line["bare"])
            text += "  ratio " + ", ".join(f"{label} {statistics.median(values) / bare:.2f}x"
                                           for label, values in line.items() if label != "bare")
        print(f"  {name:12} {text}")
        # each profile against the bare one of the same run (measured back to back): steadier when
        # the machine's load drifts during the whole
        for label, values in line.items():
            if label != "bare" and "bare" in line:
                paired = [v / b for v, b in zip(values, line["bare"])]
                print(f"  {'':12} {label} / bare, paired by run: median {statistics.median(paired):.2f}x "
                      f"({min(paired):.2f}-{max(paired):.2f})")
    cpu = {label: [[r[visit]["cpu_ms"] for r in records[label]] for visit in range(len(names))] for label in records}
    if all(v is not None for per in cpu.values() for visit in per for v in visit):
        print("\nCPU time of the browser's processes from navigation to ready (median (min-max), s):")
        for visit, name in enumerate(names):
            text = "  ".join(f"{label} {spread(per[visit])}" for label, per in cpu.items())
            if "bare" in cpu:
                bare = statistics.median(cpu["bare"][visit])
                text += "  ratio " + ", ".join(f"{label} {statistics.median(per[visit]) / bare:.2f}x"
                                               for label, per in cpu.items() if label != "bare")
            print(f"  {name:12} {text}")
    print("\nworker stages, medians (ms):")
    for visit, name in enumerate(names):
        for label, profiles in records.items():
            kind = measured[label][0]
            rows = [stages(kind, r[visit]) for r in profiles]
            keys = [k for k in rows[0] if all(isinstance(row.get(k), (int, float)) for row in rows)]
            text = ", ".join(f"{k.removesuffix('_ms')} {statistics.median(row[k] for row in rows):.0f}" for k in keys)
            start = {row.get("start") for row in rows} - {None}
            print(f"  {name:12} {label:6} {text}" + (f" (pyodide: {'/'.join(sorted(start))})" if start else ""))
    if opts.json:
        Path(opts.json).write_text(json.dumps({"load": [load_before, load_after], "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
