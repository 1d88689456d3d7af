"""Read a saved eval run: its Episodes, EpisodeResults and summary JSON.

A run directory (``python -m unified.eval --out DIR``) holds append-only JSONL files and
summary JSON. Only the run's own record files are read, at the places the runner writes them:
``episodes.jsonl`` and ``results.jsonl`` at the top of the directory and in each benchmark
directory one level down (``DIR/<benchmark>/``), ``DIR/summary.json`` and ``DIR/run.json``.
Nothing under ``<benchmark>/work/`` (adapter state, files sandboxed episodes left) is read, nor
any other file: a stray or forged ``*.jsonl`` cannot replace a transcript or add a task. Each
record file must be a regular file, opened without following a link and without blocking (a
FIFO is an error, never a wait; :func:`unified.store.read_regular_file`), of at most
:data:`MAX_JSONL_BYTES` (JSONL) or :data:`MAX_JSON_BYTES` (JSON) bytes; otherwise a ValueError
names the file. JSONL is streamed a line at a time, each line of at most
:data:`unified.store.JSONL_LINE_MAX_BYTES` (a longer one is an error naming file and line), so memory
follows the records read, not the file's size. A benchmark directory that is a link is skipped with a warning.

Each record is recognised by its fields (an Episode has ``steps``; an EpisodeResult has
``score`` and no ``steps``; a record may also wrap them as ``{"episode": {...}}`` /
``{"result": {...}}``). A truncated last line (a run killed mid-write) is skipped with a
warning; any other bad line is an error naming the file, the line and the field. When a rerun
resumed and a key (benchmark, task, trial) appears twice, the first result and the last
episode win (as ``unified.eval.rundir`` reads them). ``summary.json`` is returned as the
summary and ``run.json``'s ``config`` as the config. A path to one JSONL file reads that file.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from unified.store import jsonl_lines, read_regular_file
from unified.types import Episode, EpisodeResult

RECORD_FILES = ("episodes.jsonl", "results.jsonl")
"""The JSONL files read, at the top of a run directory and in each benchmark directory."""
MAX_JSONL_BYTES = 4 << 30
"""Largest JSONL record file read (4 GiB; a whole SWE-bench Verified run's episodes are far less)."""
MAX_JSON_BYTES = 64 << 20
"""Largest ``summary.json`` / ``run.json`` read."""


@dataclass
class SavedRun:
    """What a run directory holds."""

    path: str
    """The directory (or file) read."""
    episodes: list[Episode] = field(default_factory=list)
    """Episodes, one per (benchmark, task, trial), in file order."""
    results: list[EpisodeResult] = field(default_factory=list)
    """EpisodeResults, one per (benchmark, task, trial)."""
    summary: dict[str, Any] = field(default_factory=dict)
    """The summary JSON (aggregates per benchmark/suite), when the run wrote one."""
    config: dict[str, Any] = field(default_factory=dict)
    """The resolved config of the run (``run.json``'s ``config``: model, prompting, sampling ...)."""


def _key(record: Episode | EpisodeResult) -> tuple[str, str, int]:
    return (record.benchmark, record.task_id, record.trial)


def _classify(obj: Any, where: str) -> Iterable[Episode | EpisodeResult]:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if isinstance(obj.get("episode"), dict) or isinstance(obj.get("result"), dict):
        if isinstance(obj.get("episode"), dict):
            yield Episode.from_row(obj["episode"], f"{where}: episode")
        if isinstance(obj.get("result"), dict):
            yield EpisodeResult.from_row(obj["result"], f"{where}: result")
        return
    if "steps" in obj:
        yield Episode.from_row(obj, where)
    elif "score" in obj and "task_id" in obj:
        yield EpisodeResult.from_row(obj, where)
    # anything else (progress, metadata lines) is not ours to judge


def read_jsonl_records(path: str | Path) -> list[Episode | EpisodeResult]:
    """Episodes and EpisodeResults of one JSONL file, in order."""
    path = Path(path)
    out: list[Episode | EpisodeResult] = []
    for number, line, _, last in jsonl_lines(path, max_bytes=MAX_JSONL_BYTES):  # streamed, a line at a time
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if last:
                warnings.warn(f"{path}:{number}: skipping a truncated last line ({exc.msg})", stacklevel=2)
                continue
            raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        out.extend(_classify(obj, f"{path}:{number}"))
    return out


def record_files(run_dir: str | Path) -> list[Path]:
    """The JSONL record files of a run directory, in name order (module docstring: which)."""
    run_dir = Path(run_dir)
    dirs = [run_dir]
    for child in sorted(run_dir.iterdir()):
        if child.is_symlink():
            if any(os.path.lexists(child / name) for name in RECORD_FILES):
                warnings.warn(f"{child}: a symbolic link, not read (a benchmark directory is read only in place)",
                              stacklevel=3)
        elif child.is_dir():
            dirs.append(child)
    return sorted(d / name for d in dirs for name in RECORD_FILES if os.path.lexists(d / name))


def _read_json(file: Path) -> Any:
    try:
        return json.loads(read_regular_file(file, max_bytes=MAX_JSON_BYTES).decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def load_run(path: str | Path) -> SavedRun:
    """Every Episode, EpisodeResult and the summary of a run directory (or of one JSONL file)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"run directory {path} does not exist")
    files = [path] if not path.is_dir() else record_files(path)
    episodes: dict[tuple[str, str, int], Episode] = {}
    results: dict[tuple[str, str, int], EpisodeResult] = {}
    for file in files:
        for record in read_jsonl_records(file):
            if isinstance(record, Episode):
                episodes.pop(_key(record), None)  # the last episode of a key wins, at its new position
                episodes[_key(record)] = record
            else:
                results.setdefault(_key(record), record)  # the first result wins (a resume never re-runs it)
    summary: dict[str, Any] = {}
    config: dict[str, Any] = {}
    if path.is_dir():
        if os.path.lexists(path / "summary.json"):
            data = _read_json(path / "summary.json")
            if isinstance(data, dict):
                summary = data
        if os.path.lexists(path / "run.json"):
            data = _read_json(path / "run.json")
            if isinstance(data, dict):
                config = data.get("config", data) if isinstance(data.get("config", data), dict) else {}
    if not episodes and not results:
        raise ValueError(f"{path}: no Episode or EpisodeResult records found in {len(files)} JSONL file(s)")
    return SavedRun(str(path), list(episodes.values()), list(results.values()), summary, config)
