"""Fuzz the file readers: mutated valid files against every reader, findings kept as reproducers.

    PYTHONPATH=. python scripts/fuzz.py --cases 10000                 # spread over all readers
    PYTHONPATH=. python scripts/fuzz.py --reader png --cases 2000 --seed 7 --timeout 2
    PYTHONPATH=. python scripts/fuzz.py --replay png:7:123            # one case again, here, with its traceback

A case passes when the reader returns or raises the engine's error for its kind of file, naming the
file; anything else is a finding: a crash (another exception type), a hang (past --timeout), a
memory blow-up (an allocation past --memory-mb), an escape (a file outside the case opened or
fetched), or an error that does not name the file. Each finding is written under --out as the
mutated file(s) plus finding.json (seed, index, mutations, traceback). The design and the
mutations: tests/fuzz/harness.py and tests/fuzz/mutate.py; the seed corpus: tests/fuzz/make_seeds.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz.harness import FINDINGS, fuzz, replay, write_reproducer  # noqa: E402
from tests.fuzz.readers import READERS  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases in all, split evenly over the readers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first case index (to continue a run)")
    parser.add_argument("--reader", action="append", choices=sorted(READERS), help="only these (repeatable)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds a case may take")
    parser.add_argument("--memory-mb", type=int, default=512, help="memory a case may allocate")
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings"), help="where reproducers go")
    parser.add_argument("--json", type=Path, help="also write the per-reader counts here")
    parser.add_argument("--replay", metavar="READER:SEED:INDEX", help="run one case here and show its traceback")
    args = parser.parse_args(argv)

    if args.replay:
        reader, seed, index = args.replay.split(":")
        case, record = replay(reader, int(seed), int(index))
        print(f"{case.replay}: {case.source} with {', '.join(case.ops)} -> {record['verdict']} "
              f"({record['seconds']:.3f} s)")
        print(record.get("traceback") or f"{record.get('type', '')}: {record.get('message', '')}")
        return 1 if record["verdict"] in FINDINGS else 0

    readers = args.reader or sorted(READERS)
    per_reader = max(1, args.cases // len(readers))
    summary, total = {}, Counter()
    for name in readers:
        started = time.perf_counter()

        def progress(report, last=[0.0]):
            if time.perf_counter() - last[0] > 5:
                last[0] = time.perf_counter()
                print(f"  {name}: {report.cases}/{per_reader} ...", file=sys.stderr, flush=True)
        report = fuzz(name, args.seed, per_reader, start=args.start, timeout=args.timeout,
                      memory=args.memory_mb << 20, progress=progress)
        print(report.describe(limit=30))
        print(f"  ({time.perf_counter() - started:.1f} s; slowest cases: "
              f"{', '.join(f'{i} {s:.2f} s' for s, i in report.slowest)})", flush=True)
        for record in report.findings:
            write_reproducer(args.out, report, record)
        summary[name] = {"cases": report.cases, **{k: report.counts.get(k, 0) for k in ("ok", "error", *FINDINGS)},
                         "classes": dict(report.classes()), "seconds": round(report.seconds, 1)}
        total.update(report.counts)
    print("\n" + _table(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    findings = sum(total[k] for k in FINDINGS)
    if findings:
        print(f"\n{findings} findings; reproducers in {args.out}/")
    return 1 if findings else 0


def _table(summary: dict) -> str:
    columns = ("cases", "ok", "error", *FINDINGS)
    lines = [f"{'reader':12s}" + "".join(f"{c:>9s}" for c in columns)]
    for name, row in summary.items():
        lines.append(f"{name:12s}" + "".join(f"{row[c]:9d}" for c in columns))
    lines.append(f"{'all':12s}" + "".join(f"{sum(r[c] for r in summary.values()):9d}" for c in columns))
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.exit(130)
