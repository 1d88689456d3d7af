"""Run directories: append-only JSONL results that survive SIGKILL, atomic summaries.

Layout of ``--out DIR``::

    DIR/run.json                      the resolved config of the run (rewritten atomically)
    DIR/identity.json                 what defines the results (unified.eval.identity); checked on rerun
    DIR/summary.json, DIR/summary.md  aggregates per benchmark and suite (atomic)
    DIR/<benchmark>/episodes.jsonl    one Episode per line, appended as episodes finish
    DIR/<benchmark>/results.jsonl     one EpisodeResult per line, appended after its episode
                                      (every row carries ``"schema"``: :data:`unified.types.ROW_SCHEMA`)
    DIR/<benchmark>/work/             adapter state that outlives an episode (BFCL memory)
    DIR/.lock                         while a run uses DIR: its pid, command and start time

A result line is written (flushed and fsync'ed) only after its episode line, so a result on
disk always has its episode. A process killed mid-write leaves at most one partial last line:
:meth:`BenchmarkStore.load` cuts it off before anything is appended. Resuming skips every
(task, trial) that has a result, so each ends with exactly one.

One run at a time: :class:`RunDirLock` holds ``fcntl.flock`` on ``DIR/.lock`` for the whole
run, so a second run on the same directory stops at once with a message naming the first
(pid, command, start time) instead of interleaving its lines with it. The kernel drops the
lock when its process dies, so a lock file left by a killed run never blocks; a finished run
removes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any

from unified.store import append_jsonl, read_jsonl, repair_tail
from unified.types import Episode, EpisodeResult


class BenchmarkStore:
    """Results and episodes of one benchmark in a run directory."""

    def __init__(self, run_dir: str | os.PathLike[str], benchmark: str) -> None:
        self.dir = Path(run_dir) / benchmark
        self.results_path = self.dir / "results.jsonl"
        self.episodes_path = self.dir / "episodes.jsonl"
        self.work_dir = self.dir / "work"

    def load(self, *, repair: bool = True) -> dict[tuple[str, int], EpisodeResult]:
        """Recorded results by (task_id, trial): the first record of each key wins. ``repair``: cut a torn
        last line first (a writer's job; a reader such as ``--dry-run`` passes False and skips it)."""
        if repair:
            for path in (self.results_path, self.episodes_path):
                repair_tail(path)
        out: dict[tuple[str, int], EpisodeResult] = {}
        for number, row in enumerate(read_jsonl(self.results_path), 1):
            result = EpisodeResult.from_row(row, where=f"{self.results_path}:{number}")
            out.setdefault((result.task_id, result.trial), result)
        return out

    def append(self, result: EpisodeResult, episode: Episode | None) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if episode is not None:
            append_jsonl(self.episodes_path, episode.to_row())
            result.episode_path = str(self.episodes_path.name)
        append_jsonl(self.results_path, result.to_row())

    def episodes(self) -> dict[tuple[str, int], Episode]:
        """Recorded episodes by (task_id, trial): the last record of each key wins."""
        out = {}
        for number, row in enumerate(read_jsonl(self.episodes_path), 1):
            episode = Episode.from_row(row, where=f"{self.episodes_path}:{number}")
            out[(episode.task_id, episode.trial)] = episode
        return out


class RunDirError(RuntimeError):
    """The run directory cannot be used: it cannot be created or written, or another run holds it."""


class RunDirLock:
    """Exclusive use of a run directory (a context manager; see the module docstring).

    ``__enter__`` creates the directory, takes ``flock(LOCK_EX | LOCK_NB)`` on ``DIR/.lock`` and
    writes the holder (pid, host, command, start time) into it; ``__exit__`` removes the file
    and releases the lock. Raises :class:`RunDirError` naming the holder when the lock is taken,
    or the OS's reason when the directory cannot be created or written.
    """

    NAME = ".lock"

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(run_dir)
        self.path = self.dir / self.NAME
        self._fd: int | None = None

    def __enter__(self) -> "RunDirLock":
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(f"cannot create the run directory {self.dir}: {exc.strerror or exc}") from None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise RunDirError(f"cannot write in the run directory {self.dir}: {exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunDirError(f"the run directory {self.dir} is in use by another run: {holder}. Wait for it "
                                  "to finish, stop it, or give another --out") from None
            try:  # the previous holder may have removed the file between our open and our lock
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "command": shlex.join(getattr(sys, "orig_argv", sys.argv)), "started_at": time.time()}
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(holder).encode() + b"\n")
        self._fd = fd
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # removed while still locked: no one can take a dead file
        finally:
            os.close(self._fd)
            self._fd = None


def _read_holder(fd: int) -> str:
    """The lock holder, in words (the file may still be empty if it has just been taken)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(data["started_at"])))
        command = str(data["command"]).replace("\n", "\\n")  # one line, whatever the command was
        return f"pid {data['pid']} on {data.get('host', '?')}, started {started}, command: {command[:1000]}"
    except (ValueError, KeyError, TypeError, OSError):
        return "a process that has just started"
