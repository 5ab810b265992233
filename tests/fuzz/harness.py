"""Running fuzz cases: deterministic case generation, isolation, and the verdict on each case.

Case `index` of reader R under seed S is made by `random.Random(f"{S}/{R}/{index}")`: it picks a
seed file and stacks one to three mutations (tests/fuzz/mutate.py), so any case can be made again
from (R, S, index) alone. Cases run in a forked worker process, which

- writes each case to a fresh folder (beside decoys: `../outside.safetensors` and friends exist, and
  every case folder holds the directories `sub/` and `dir.safetensors/`);
- limits the time of each case with SIGALRM (`timeout`), and the parent kills a worker that stops
  answering (C code the alarm cannot interrupt) after `hard_timeout`;
- limits its address space (RLIMIT_AS) to what it had plus `memory` bytes, so an allocation sized
  by a number the file claims fails at once (a MemoryError, or one caught and wrapped);
- audits every `open`: a path outside the case folder (and outside Python's own files) raises
  `Escape` before anything is read;
- audits what only code the file smuggled in would do: start a process (os.system, subprocess,
  exec*, spawn, fork), run Python from a string (exec, eval), load native code (ctypes), open a
  socket, remove or rename files. Each raises `CodeRan` where it happens, so it is stopped too.
  The one exec allowed is jinja2's own: a chat template compiles to Python that jinja2's
  environment execs (`<template>`, from Environment.from_code), which its sandbox then bounds;
- runs each case inside its folder, and looks there afterwards for the file a payload would write
  (`MARKER`: hostile pickles ask os.system, eval, open... to create it), in case something ran
  that no audit event names;
- asks the reader for a fingerprint of the engine's shared state (`Reader.state`, such as the
  pickle readers' stand-ins) before and after each case.

Verdicts: "ok" (read), "error" (an allowed engine error), and the findings "crash" (any other
exception, or the worker died), "hang", "memory", "escape", "unnamed" (an engine error that does not
name the file), "code" (the file ran code) and "tamper" (a case changed state a later read would see).
"""
from __future__ import annotations

import json
import os
import random
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import mutate
from .readers import BASE, MARKER, READERS, CodeRan, Escape, Seed

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ("crash", "hang", "memory", "escape", "unnamed", "code", "tamper")
# audit events only code the file smuggled in would raise while a reader runs
CODE_EVENTS = frozenset(("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                         "subprocess.Popen", "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function",
                         "socket.connect", "socket.bind", "socket.sendto", "webbrowser.open",
                         "os.remove", "os.rmdir", "os.rename", "shutil.rmtree", "shutil.move", "os.kill",
                         "os.killpg", "os.truncate", "os.chmod", "os.symlink", "os.link", "os.putenv",
                         "os.unsetenv"))


class Hang(BaseException):
    """The case ran past its time limit (raised by SIGALRM; a BaseException so no reader's
    `except Exception` can swallow it)."""


@dataclass
class Case:
    reader: str
    seed: int
    index: int
    source: str                  # the seed file it was made from
    files: dict                  # relative path -> bytes, or None for a directory
    main: str                    # what the reader opens, relative to the case folder
    ops: list = field(default_factory=list)

    @property
    def replay(self) -> str:
        return f"{self.reader}:{self.seed}:{self.index}"


class _Context:
    """What a mutation may use besides its input: other seeds to splice with; it notes what it did."""

    def __init__(self, others: list[bytes]):
        self.ops: list[str] = []
        self._others = others

    def note(self, op: str) -> None:
        self.ops.append(op)

    def other(self, rng) -> bytes:
        return rng.choice(self._others) if self._others else b""


_SEEDS: dict[str, list[Seed]] = {}


def seeds(reader: str) -> list[Seed]:
    if reader not in _SEEDS:
        _SEEDS[reader] = READERS[reader].seeds()
    return _SEEDS[reader]


def make_case(reader: str, seed: int, index: int) -> Case:
    rng = random.Random(f"{seed}/{reader}/{index}")
    corpus = seeds(reader)
    source = rng.choice(corpus)
    files = dict(source.files)
    names = sorted(files)
    # in a folder the JSON files (index, manifest) are the interesting part, but not the only one
    target = rng.choices(names, [6 if n.endswith(".json") else 1 for n in names])[0]
    kind = target.rsplit(".", 1)[-1]
    ctx = _Context([data for s in corpus for n, data in s.files.items() if n.rsplit(".", 1)[-1] == kind])
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
        if len(names) > 1 and rng.random() < 0.05:        # the folder itself: a file gone or a directory
            victim = rng.choice(names)
            if rng.random() < 0.5:
                files.pop(victim, None)
                ctx.note("folder:remove-file")
            else:
                files[victim] = None
                ctx.note("folder:file-is-a-directory")
            continue
        data = files.get(target)
        if data is None:
            continue
        files[target] = mutate.mutate_bytes(rng, data, ctx, mutate.operators_for(target, data))
    return Case(reader, seed, index, source.name, files, source.main, ctx.ops)


# --- one case -------------------------------------------------------------------------------------------

class _Guard:
    root: str | None = None      # the case folder while a case runs
    allowed: tuple = ()


_guard = _Guard()


def _audit(event: str, args) -> None:
    if _guard.root is None:
        return
    if event in CODE_EVENTS or (event == "exec" and not _importing() and not _jinja_compiling(args[0])):
        detail = getattr(args[0], "co_filename", None) if event == "exec" else args[0] if args else ""
        raise CodeRan(f"{event}: {str(detail)[:200]}")
    if event != "open":
        return
    path = args[0]
    if isinstance(path, int):
        return
    try:
        full = os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return
    if not full.startswith(_guard.allowed):
        raise Escape(f"opened {full}")


def _jinja_compiling(code) -> bool:
    """Whether this exec is jinja2's Environment.from_code running the code it compiled from a
    template (the engine's chat templates: engine/text/template_sandbox.py)."""
    if getattr(code, "co_filename", None) != "<template>":
        return False
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "from_code" and frame.f_code.co_filename.endswith(
                os.path.join("jinja2", "environment.py")):
            return True
        frame = frame.f_back
    return False


def _importing() -> bool:
    """Whether the import machinery is on the stack (a module's own code runs through exec)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _install_guards() -> None:
    """In the worker only: an audit hook cannot be removed again."""
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    python |= {p for p in sys.path if p and os.path.isabs(p) and "site-packages" in p}
    _guard.allowed = tuple(os.path.join(p, "") for p in sorted(python)) + (
        str(ROOT / "engine") + os.sep, str(ROOT / "models") + os.sep, str(ROOT / "buildtools") + os.sep,
        "/usr/", "/proc/", "/dev/", "/sys/")          # buildtools: the build's ONNX reader (onnx reader)
    sys.addaudithook(_audit)

    def alarm(signum, frame):
        raise Hang()
    signal.signal(signal.SIGALRM, alarm)


def _limit_memory(budget: int) -> None:
    if budget <= 0:
        return
    with open("/proc/self/status") as f:
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size + budget
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _register_extensions() -> None:
    """copyreg's extension registry as a hostile environment might have it: EXT opcodes then name
    globals that run code, and a reader must still refuse them (payloads.py uses these codes)."""
    import copyreg
    from .payloads import EXTENSIONS
    for code, (module, name) in EXTENSIONS.items():
        if copyreg._inverted_registry.get(code) != (module, name):
            copyreg.add_extension(module, name, code)


def materialize(case: Case, folder: Path) -> Path:
    """Write the case into `folder` (emptied first); the path the reader opens."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "sub").mkdir()
    (folder / "dir.safetensors").mkdir()
    for name, data in case.files.items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            target.mkdir(exist_ok=True)
        else:
            target.write_bytes(data)
    return folder / case.main if case.main else folder


def _decoys(root: Path) -> None:
    """Files a hostile name could reach from the case folder: opening one is an escape."""
    for reader, name in (("safetensors", "mixed.safetensors"), ("gguf", "mixed.gguf"), ("png", "pillow_L.png")):
        data = next(s.files[name] for s in seeds(reader) if s.name == name)
        (root / f"outside.{name.rsplit('.', 1)[1]}").write_bytes(data)
    (root / "outside.json").write_text('{"weight_map": {}}')


def _where(error: BaseException) -> str:
    """The innermost frame in the engine (else the innermost frame) of the error's traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f.filename.startswith(str(ROOT / "engine"))]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    name = os.path.relpath(frame.filename, ROOT) if frame.filename.startswith(str(ROOT)) else os.path.basename(frame.filename)
    return f"{name}:{frame.lineno} in {frame.name}"


def _text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception as e:           # a message that cannot even be made is a finding too
        return f"<str() raised {type(e).__name__}: {e}>"


def _caused_by_memory(error: BaseException) -> bool:
    seen = 0
    while error is not None and seen < 50:
        if isinstance(error, MemoryError):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def run_case(case: Case, folder: Path, timeout: float) -> dict:
    """Run one case in this process (guards as installed) and return its verdict."""
    reader = READERS[case.reader]
    path = materialize(case, folder)
    verdict, error = "ok", None
    before = reader.state() if reader.state else None
    started = time.perf_counter()
    home = os.getcwd()
    os.chdir(folder)                   # where a payload's relative MARKER lands
    _guard.root = str(folder) + os.sep
    _guard.allowed = (_guard.root,) + tuple(a for a in _guard.allowed if a != _guard.root)
    try:
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            reader.run(path, case)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Hang as e:
        verdict, error = "hang", e
    except CodeRan as e:
        verdict, error = "code", e
    except Escape as e:
        verdict, error = "escape", e
    except MemoryError as e:
        verdict, error = "memory", e
    except reader.allowed as e:
        error = e
        if _caused_by_memory(e):
            verdict = "memory"
        elif isinstance(e, reader.named) and str(folder) not in _text(e) and BASE not in _text(e):
            verdict = "unnamed"
        else:
            verdict = "error"
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        verdict, error = "crash", e
    finally:
        _guard.root = None
        os.chdir(home)
    seconds = time.perf_counter() - started
    if verdict not in FINDINGS and (folder / MARKER).exists():
        verdict, error = "code", CodeRan(f"the payload wrote {MARKER}")
    if verdict not in FINDINGS and reader.state and reader.state() != before:
        verdict, error = "tamper", CodeRan(f"the reader's shared state changed: {_changed(before, reader.state())}")
    record = {"index": case.index, "verdict": verdict, "seconds": round(seconds, 4), "ops": case.ops,
              "source": case.source}
    if error is not None:
        record.update(type=type(error).__name__, where=_where(error), message=_text(error)[:400])
        if verdict in FINDINGS:
            record["traceback"] = "".join(traceback.format_exception(error))[-3000:]
    return record


# --- many cases in a worker process ---------------------------------------------------------------

def _changed(before: dict, after: dict) -> str:
    return ", ".join(f"{k}: {str(before.get(k))[:80]} -> {str(after.get(k))[:80]}"
                     for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k))[:400]


def _worker(reader: str, seed: int, indices: list[int], out: int, root: Path, timeout: float, memory: int) -> None:
    _decoys(root)
    _register_extensions()
    _install_guards()
    _limit_memory(memory)
    folder = root / "case"
    for index in indices:
        try:
            case = make_case(reader, seed, index)
        except BaseException:            # the fuzzer's own bug: stop the run, do not blame the reader
            os.write(out, ("E " + json.dumps(f"making case {index}:\n{traceback.format_exc()}") + "\n").encode())
            raise
        os.write(out, f"S {index}\n".encode())
        record = run_case(case, folder, timeout)
        os.write(out, ("R " + json.dumps(record) + "\n").encode())


@dataclass
class Report:
    reader: str
    seed: int
    cases: int = 0
    counts: Counter = field(default_factory=Counter)
    findings: list = field(default_factory=list)
    slowest: list = field(default_factory=list)          # (seconds, index) of the slowest cases
    seconds: float = 0.0

    def add(self, record: dict) -> None:
        self.cases += 1
        self.counts[record["verdict"]] += 1
        if record["verdict"] in FINDINGS:
            self.findings.append(record)
        self.slowest = sorted(self.slowest + [(record.get("seconds", 0.0), record["index"])], reverse=True)[:5]

    def classes(self) -> Counter:
        """Findings by verdict, exception type and where it was raised."""
        return Counter(f"{r['verdict']}: {r.get('type', '?')} at {r.get('where', '?')}" for r in self.findings)

    def describe(self, limit: int = 20) -> str:
        lines = [f"{self.reader}: {self.cases} cases, " + ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))]
        for text, count in self.classes().most_common(limit):
            lines.append(f"  {count:5d}  {text}")
        for record in self.findings[:limit]:
            lines.append(f"  replay {self.reader}:{self.seed}:{record['index']} ({', '.join(record['ops'])} on "
                         f"{record['source']}): {record['verdict']} {record.get('type', '')}: "
                         f"{record.get('message', '')[:160]}")
        return "\n".join(lines)


def fuzz(reader: str, seed: int, cases: int, *, start: int = 0, timeout: float = 2.0, memory: int = 512 << 20,
         hard_timeout: float | None = None, progress=None) -> Report:
    """Run cases [start, start + cases) of `reader` in forked workers; a Report of the verdicts."""
    hard_timeout = hard_timeout or max(10.0, 5 * timeout)
    report = Report(reader, seed)
    seeds(reader)                                       # read once, shared with the workers
    pending = list(range(start, start + cases))
    began = time.perf_counter()
    while pending:
        root = Path(tempfile.mkdtemp(prefix=f"fuzz-{reader}-"))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:                                    # the worker: never returns into the caller
            code = 1
            try:
                os.close(read)
                _worker(reader, seed, pending, write, root, timeout, memory)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(write)
        current, buffer, done = None, b"", set()
        try:
            while True:
                ready, _, _ = select.select([read], [], [], hard_timeout)
                if not ready:                           # stuck where the alarm cannot reach
                    os.kill(pid, signal.SIGKILL)
                    if current is not None:
                        report.add({"index": current, "verdict": "hang", "type": "Killed",
                                    "where": f"no answer in {hard_timeout:.0f} s", "message": "", "ops": [],
                                    "source": "", "seconds": hard_timeout})
                        done.add(current)
                    break
                chunk = os.read(read, 1 << 16)
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.startswith(b"S "):
                        current = int(line[2:])
                    elif line.startswith(b"E "):
                        raise RuntimeError(json.loads(line[2:]))
                    elif line.startswith(b"R "):
                        record = json.loads(line[2:])
                        report.add(record)
                        done.add(record["index"])
                        current = None
                        if progress is not None:
                            progress(report)
        finally:
            os.close(read)
            _, status = os.waitpid(pid, 0)
            shutil.rmtree(root, ignore_errors=True)
        if current is not None and current not in done:    # the worker died inside a case
            how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            report.add({"index": current, "verdict": "crash", "type": "WorkerDied", "where": how, "message": "",
                        "ops": [], "source": "", "seconds": 0.0})
            done.add(current)
        if current is None and not done.issuperset(pending) and os.WIFEXITED(status) and os.WEXITSTATUS(status):
            raise RuntimeError(f"the {reader} fuzz worker failed outside any case (exit {os.WEXITSTATUS(status)})")
        pending = [i for i in pending if i not in done]
    report.seconds = time.perf_counter() - began
    return report


def replay(reader: str, seed: int, index: int, folder: Path | None = None) -> tuple[Case, dict]:
    """Make case `index` again and run it here, unguarded and unlimited: for a debugger."""
    case = make_case(reader, seed, index)
    folder = folder or Path(tempfile.mkdtemp(prefix="fuzz-replay-")) / "case"
    return case, run_case(case, folder, timeout=0)


def write_reproducer(out: Path, report: Report, record: dict) -> Path:
    """The mutated file(s) of a finding and how to make and run it again."""
    case = make_case(report.reader, report.seed, record["index"])
    folder = out / report.reader / f"{record['verdict']}-{record.get('type', '')}-{record['index']}"
    materialize(case, folder / "case")
    (folder / "finding.json").write_text(json.dumps(
        {"reader": case.reader, "seed": case.seed, "index": case.index, "source": case.source, "opens": case.main,
         "ops": case.ops, "replay": f"python scripts/fuzz.py --replay {case.replay}", **record}, indent=1))
    return folder
