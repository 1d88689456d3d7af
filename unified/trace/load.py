"""Read a saved eval run: its Episodes, EpisodeResults and summary JSON.

A run directory (``python -m unified.eval --out DIR``) holds append-only JSONL files and
summary JSON. This reader does not depend on the exact file names: every ``*.jsonl`` under
the directory is read line by line and each record is recognised by its fields
(an Episode has ``steps``; an EpisodeResult has ``score`` and no ``steps``; a record may also
wrap them as ``{"episode": {...}}`` / ``{"result": {...}}``). A truncated last line (a run
killed mid-write) is skipped with a warning; any other bad line is an error naming the file,
the line and the field. When a rerun resumed and a key (benchmark, task, trial) appears
twice, the first result and the last episode win (as ``unified.eval.rundir`` reads them). Every
``*.json`` at the top of the directory whose name contains ``summary`` is returned as the
summary (merged in name order), and ``run.json``'s ``config`` as the config.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from unified.types import Episode, EpisodeResult


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
            yield Episode.from_dict(obj["episode"], f"{where}: episode")
        if isinstance(obj.get("result"), dict):
            yield EpisodeResult.from_dict(obj["result"], f"{where}: result")
        return
    if "steps" in obj:
        yield Episode.from_dict(obj, where)
    elif "score" in obj and "task_id" in obj:
        yield EpisodeResult.from_dict(obj, where)
    # anything else (progress, metadata lines) is not ours to judge


def read_jsonl_records(path: str | Path) -> list[Episode | EpisodeResult]:
    """Episodes and EpisodeResults of one JSONL file, in order."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Episode | EpisodeResult] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                warnings.warn(f"{path}:{number}: skipping a truncated last line ({exc.msg})", stacklevel=2)
                continue
            raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        out.extend(_classify(obj, f"{path}:{number}"))
    return out


def load_run(path: str | Path) -> SavedRun:
    """Every Episode, EpisodeResult and the summary of a run directory (or of one JSONL file)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"run directory {path} does not exist")
    files = [path] if path.is_file() else sorted(path.rglob("*.jsonl"))
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
    if path.is_dir():
        for file in sorted(path.glob("*.json")):
            if "summary" in file.name:
                try:
                    data = json.loads(file.read_text(encoding="utf-8"))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
                if isinstance(data, dict):
                    summary.update(data)
    config: dict[str, Any] = {}
    if path.is_dir() and (path / "run.json").is_file():
        try:
            data = json.loads((path / "run.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path / 'run.json'}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(data, dict):
            config = data.get("config", data) if isinstance(data.get("config", data), dict) else {}
    if not episodes and not results:
        raise ValueError(f"{path}: no Episode or EpisodeResult records found in {len(files)} JSONL file(s)")
    return SavedRun(str(path), list(episodes.values()), list(results.values()), summary, config)
