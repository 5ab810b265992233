"""Incremental build steps: skip what is up to date, never trust a half-written file.

A step has a name, a description of its inputs (versions, options, and the
sha256 of every file it reads) and a function that writes its outputs into an
empty staging folder. Its key is the sha256 of that description. The state file
`dist/.build-state.json` records, per step, the key and the size and sha256 of
each output. A step is skipped when its key is unchanged and every recorded
output is still there with the recorded bytes; otherwise it runs again.

Outputs are written under `dist/.staging/`, then renamed into place (rename is
atomic within a file system), and the state is written last, itself through a
rename. An interrupted build therefore leaves either old files the state still
describes, or new files the state does not describe yet: both make the step run
again, neither is ever trusted by mistake.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .fetch import sha256_file

STATE_NAME = ".build-state.json"
STAGING_NAME = ".staging"
STATE_FORMAT = 1


class BuildError(RuntimeError):
    """A build that cannot go on; the message is one line for the user."""


@dataclass
class Step:
    name: str
    inputs: dict                        # JSON-able: versions, options, {file: sha256}
    run: Callable[[Path], None]         # writes the outputs under the given folder


def write_atomic(path: Path, data: bytes) -> None:
    """Write beside the target, then rename: a reader sees the old bytes or the new ones."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        with open(temporary, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _human(nbytes: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1000 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    raise AssertionError


class Builder:
    """Runs steps into `dist`, keeping `dist/.build-state.json` up to date."""

    def __init__(self, dist: Path, log: Callable[[str], None] = print, force: bool = False):
        self.dist = Path(dist)
        self.log = log
        self.force = force
        self.dist.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dist, 0o755)
        self.state = self._load_state()
        self.claimed: dict[str, str] = {}       # output path -> the step that made it, this build
        self.ran: list[str] = []                # steps that ran (not up to date), in order
        self._dirty = False                     # digests learnt since the state was last saved
        staging = self.dist / STAGING_NAME
        if staging.exists():                    # left by an interrupted build: never trusted
            shutil.rmtree(staging)

    # --- state ------------------------------------------------------------------

    def _load_state(self) -> dict:
        try:
            state = json.loads((self.dist / STATE_NAME).read_text())
            if (state.get("format") == STATE_FORMAT and isinstance(state.get("steps"), dict)
                    and isinstance(state.get("digests"), dict)):
                return state
        except (OSError, ValueError, AttributeError):
            pass                                # missing or damaged: rebuild everything
        return {"format": STATE_FORMAT, "steps": {}, "digests": {}}

    def _save_state(self) -> None:
        digests = self.state["digests"]
        for path in [p for p in digests if not os.path.exists(p)]:
            del digests[path]                   # forget files that are gone (old temp folders)
        write_atomic(self.dist / STATE_NAME, json.dumps(self.state, indent=1, sort_keys=True).encode())
        self._dirty = False

    def finish(self) -> None:
        """Save what was learnt even when every step was up to date (file digests)."""
        if self._dirty:
            self._save_state()

    def outputs(self, step: str) -> dict[str, dict]:
        """{path in dist: {"size", "sha256"}} of a step that ran or was up to date."""
        return self.state["steps"][step]["outputs"]

    # --- hashing ------------------------------------------------------------------

    def digest(self, path: Path) -> str:
        """sha256 of a file, remembered by (size, mtime) so big inputs are hashed once."""
        path = Path(path).resolve()
        st = path.stat()
        memo = self.state["digests"].get(str(path))
        if isinstance(memo, list) and len(memo) == 3 and memo[:2] == [st.st_size, st.st_mtime_ns]:
            return memo[2]
        value = sha256_file(path)
        self.state["digests"][str(path)] = [st.st_size, st.st_mtime_ns, value]
        self._dirty = True
        return value

    def files(self, paths: Iterable[Path], base: Path) -> dict[str, str]:
        """{path relative to base: sha256} for a step's inputs."""
        return {Path(p).relative_to(base).as_posix(): self.digest(p) for p in sorted(paths)}

    @staticmethod
    def key(inputs: dict) -> str:
        return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()

    def _intact(self, outputs: dict[str, dict]) -> bool:
        for rel, record in outputs.items():
            path = self.dist / rel
            try:
                if not path.is_file() or path.stat().st_size != record["size"]:
                    return False
                if self.digest(path) != record["sha256"]:
                    return False
            except (OSError, KeyError, TypeError):
                return False
        return True

    # --- running ------------------------------------------------------------------

    def _claim(self, name: str, rels: Iterable[str]) -> None:
        for rel in rels:
            other = self.claimed.get(rel)
            if other is not None and other != name:
                raise BuildError(f"step {name!r} would overwrite dist/{rel}, which step {other!r} makes")
            self.claimed[rel] = name

    def run(self, step: Step) -> bool:
        """Run `step` unless it is up to date; True when it ran."""
        key = self.key(step.inputs)
        record = self.state["steps"].get(step.name)
        if (not self.force and record is not None and record.get("key") == key
                and isinstance(record.get("outputs"), dict) and self._intact(record["outputs"])):
            self._claim(step.name, record["outputs"])
            self.log(f"  {step.name}: up to date")
            return False
        started = time.perf_counter()
        staging = self.dist / STAGING_NAME / step.name.replace("/", "_")
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        try:
            step.run(staging)
            made = sorted(p for p in staging.rglob("*") if p.is_file())
            rels = [p.relative_to(staging).as_posix() for p in made]
            self._claim(step.name, rels)
            outputs = {}
            for path, rel in zip(made, rels):
                outputs[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
                self._move_into_place(path, rel, outputs[rel]["sha256"])
            old = (record or {}).get("outputs") or {}
            for rel in sorted(set(old) - set(outputs)):
                self._remove(rel)
        finally:
            shutil.rmtree(self.dist / STAGING_NAME, ignore_errors=True)
        self.state["steps"][step.name] = {"key": key, "outputs": outputs}
        self._save_state()                      # last: the outputs above are now in place
        self.ran.append(step.name)
        total = sum(o["size"] for o in outputs.values())
        self.log(f"  {step.name}: built ({len(outputs)} files, {_human(total)}) "
                 f"in {time.perf_counter() - started:.2f} s")
        return True

    def _move_into_place(self, staged: Path, rel: str, sha256: str) -> None:
        target = self.dist / rel
        for parent in reversed(target.relative_to(self.dist).parents[:-1]):
            folder = self.dist / parent
            if not folder.is_dir():
                folder.mkdir()
                os.chmod(folder, 0o755)         # a static host's workers must read the site
        if target.is_dir():
            raise BuildError(f"dist/{rel} is a folder; the build needs a file there")
        os.chmod(staged, 0o644)
        os.replace(staged, target)
        st = target.stat()
        # hashed in staging; a rename keeps the size and the mtime
        self.state["digests"][str(target.resolve())] = [st.st_size, st.st_mtime_ns, sha256]

    def _remove(self, rel: str) -> None:
        """Delete an output a step no longer makes, and the folders it leaves empty."""
        path = self.dist / rel
        path.unlink(missing_ok=True)
        self.state["digests"].pop(str(path.resolve()), None)
        for parent in path.relative_to(self.dist).parents[:-1]:
            try:
                (self.dist / parent).rmdir()
            except OSError:
                break
