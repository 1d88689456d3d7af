"""Run directories: append-only JSONL results that survive SIGKILL, atomic summaries.

Layout of ``--out DIR``::

    DIR/run.json                      the resolved config of the run (rewritten atomically)
    DIR/summary.json, DIR/summary.md  aggregates per benchmark and suite (atomic)
    DIR/<benchmark>/episodes.jsonl    one Episode per line, appended as episodes finish
    DIR/<benchmark>/results.jsonl     one EpisodeResult per line, appended after its episode
    DIR/<benchmark>/work/             adapter state that outlives an episode (BFCL memory)

A result line is written (flushed and fsync'ed) only after its episode line, so a result on
disk always has its episode. A process killed mid-write leaves at most one partial last line:
:meth:`BenchmarkStore.load` cuts it off before anything is appended. Resuming skips every
(task, trial) that has a result, so each ends with exactly one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from unified.types import Episode, EpisodeResult


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _repair_tail(path: Path) -> None:
    """Cut a partial last line (a write interrupted by a kill)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        data = path.read_bytes()
        handle.truncate(data.rfind(b"\n") + 1)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of ``path``; a bad line is an error naming file and line."""
    rows = []
    if not path.exists():
        return rows
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    complete = lines[:-1]  # the last element is "" or a partial line
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON line ({exc})") from None
    return rows


class BenchmarkStore:
    """Results and episodes of one benchmark in a run directory."""

    def __init__(self, run_dir: str | os.PathLike[str], benchmark: str) -> None:
        self.dir = Path(run_dir) / benchmark
        self.results_path = self.dir / "results.jsonl"
        self.episodes_path = self.dir / "episodes.jsonl"
        self.work_dir = self.dir / "work"

    def load(self) -> dict[tuple[str, int], EpisodeResult]:
        """Recorded results by (task_id, trial): the first record of each key wins."""
        for path in (self.results_path, self.episodes_path):
            _repair_tail(path)
        out: dict[tuple[str, int], EpisodeResult] = {}
        for number, row in enumerate(read_jsonl(self.results_path), 1):
            result = EpisodeResult.from_dict(row, where=f"{self.results_path}:{number}")
            out.setdefault((result.task_id, result.trial), result)
        return out

    def append(self, result: EpisodeResult, episode: Episode | None) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if episode is not None:
            _append_line(self.episodes_path, episode.to_dict())
            result.episode_path = str(self.episodes_path.name)
        _append_line(self.results_path, result.to_dict())

    def episodes(self) -> dict[tuple[str, int], Episode]:
        """Recorded episodes by (task_id, trial): the last record of each key wins."""
        out = {}
        for number, row in enumerate(read_jsonl(self.episodes_path), 1):
            episode = Episode.from_dict(row, where=f"{self.episodes_path}:{number}")
            out[(episode.task_id, episode.trial)] = episode
        return out


def json_line(data: dict[str, Any]) -> bytes:
    """One record as a UTF-8 JSON line. Text that is not valid Unicode (a lone surrogate from a
    model or a tool) is written \\u-escaped, so the file stays valid UTF-8 and reads back the same."""
    line = json.dumps(data, default=str, ensure_ascii=False) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(data, default=str, ensure_ascii=True) + "\n").encode("ascii")


def _append_line(path: Path, data: dict[str, Any]) -> None:
    """Append :func:`json_line` of ``data``, encoded whole before anything is written (a value that
    cannot be written leaves the file untouched), flushed and fsync'ed."""
    encoded = json_line(data)
    with open(path, "ab") as handle:
        handle.write(encoded)
        handle.flush()
        os.fsync(handle.fileno())
