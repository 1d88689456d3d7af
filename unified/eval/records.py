"""The records of an eval run's ``summary.json``: :class:`RunSummary` and its :class:`BenchmarkEntry`.

Written by :func:`write_summary` through :mod:`unified.store` (atomic) and read back by
:func:`load_summary` through :func:`unified.config.from_dict`, strictly: an unknown field is an
error that names the field and the file. A summary written by an older version still loads: a
field it lacks takes its default here, and one it recorded under an old name is read under the new
one with a deprecation line (the ``RENAMED`` tables). A benchmark entry that predates the recorded
adapter facts (``suites``, ``paper_reference``) gets the installed adapter's, once, on load.

What each field means (status, counts, comparability) is :mod:`unified.eval.report`'s docstring;
the general suite's section is :mod:`unified.eval.general_report`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from unified.benchmarks.contract import PaperReference
from unified.config import ConfigError, from_dict, to_dict
from unified.store import read_regular_file, write_json_atomic

Status = Literal["ok", "partial", "skipped", "error"]


@dataclass
class ShardPart:
    """A ``--shard I/N`` run's share of one benchmark (:mod:`unified.eval.shards`)."""

    shard: str
    """``I/N``."""
    pairs: int
    """(task, trial) pairs of this benchmark in this shard."""
    pairs_total: int
    """(task, trial) pairs of this benchmark in the whole run."""


@dataclass
class ShardRun:
    """What a ``--shard I/N`` run's summary says about the run as a whole: not a whole run, and how to
    merge it (:func:`unified.eval.summarize.run_kind`)."""

    shard: str
    """``I/N``."""
    index: int
    count: int
    pairs: int
    """(task, trial) pairs in this shard, all benchmarks."""
    pairs_total: int
    """(task, trial) pairs of the whole run, all benchmarks."""
    merge_command: str
    """The ``python -m unified.eval --merge ...`` command that joins the shards."""
    note: str


@dataclass
class BenchmarkEntry:
    """One benchmark of a run: what ran, its status, the adapter's aggregate and whether the number
    can be put next to the official one. A benchmark that could not even list its tasks (skipped
    or errored before any episode) has ``reason`` / ``how_to_fix`` and no counts (None)."""

    status: Status
    comparable: bool = False
    """True only when the adapter says so and no reason below applies (``report.benchmark_entry``)."""
    not_comparable_because: list[str] = field(default_factory=list)
    aggregate: dict[str, Any] = field(default_factory=dict)
    """The adapter's own ``aggregate`` (``score``, ``metric``, ... as the benchmark defines them)."""
    tasks: int | None = None
    """Scored tasks selected for this run."""
    tasks_run: int | None = None
    tasks_skipped: int | None = None
    tasks_errored: int | None = None
    tasks_not_recorded: int | None = None
    skip_reasons: dict[str, int] = field(default_factory=dict)
    """First line of a skip reason -> tasks."""
    error_reasons: dict[str, int] = field(default_factory=dict)
    """First line of an error -> tasks."""
    tasks_in_benchmark: int | None = None
    """Scored tasks of the whole benchmark, when ``--limit`` / ``--task-ids`` / ``--split`` cut the selection."""
    runs: int | None = None
    """Trials per task this run asked for."""
    runs_protocol: int | None = None
    """Trials per task the benchmark's protocol asks for (the adapter's ``runs_default``)."""
    results: int | None = None
    """Episodes recorded (``results.jsonl`` lines of the selected pairs)."""
    errors: int | None = None
    """Episodes with an error or a grader error."""
    skipped: int | None = None
    """Episodes recorded as skipped."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Episodes by outcome (``report.outcome_counts``): ``pass``, ``agent_fail``, ``infrastructure_fail``
    and their denominator ``episodes`` (every episode not skipped)."""
    reason: str | None = None
    """Why nothing ran (status ``skipped`` / ``error``)."""
    how_to_fix: str | None = None
    traceback: str | None = None
    """The traceback of an adapter that failed before any episode."""
    runs_dir: str | None = None
    """The benchmark's directory in the run (``results.jsonl``, ``episodes.jsonl``, ``work/``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The adapter's parsed ``Config``, defaults included."""
    limits: dict[str, Any] = field(default_factory=dict)
    """The :class:`unified.benchmarks.AgentLimits` the episodes ran under (after ``agent_limits``)."""
    suites: list[str] | None = None
    """Suites the adapter declares (None: not recorded, a summary of an older version)."""
    paper_reference: PaperReference | None = None
    """The study's published numbers the adapter declares."""
    shard: ShardPart | None = None
    """A ``--shard I/N`` run's share of this benchmark (None, and left out of the JSON, otherwise)."""

    def score(self) -> float | None:
        """The headline number, only for a benchmark whose tasks (some or all) ran."""
        if self.status not in ("ok", "partial"):
            return None
        value = self.aggregate.get("score")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def ran_comparably(self) -> bool:
        """``comparable``, false whatever it says when nothing ran (a skipped or errored benchmark, no
        task run: also in a summary written by an older version)."""
        return self.comparable and self.status in ("ok", "partial") and self.tasks_run != 0


@dataclass
class GeneralSection:
    """The general suite (lm-evaluation-harness) of a run; see :mod:`unified.eval.general_report`."""

    model: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    """The lm-eval options of the run."""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Task -> lm-eval's record of it (``status``, ``metrics``, ``subtasks``, ``n_samples``, ...)."""


@dataclass
class RunSummary:
    """A run's ``summary.json``: per benchmark its entry, per suite its benchmarks' scores."""

    model: str = ""
    prompting: str = ""
    updated_at: float = 0.0
    """``time.time()`` of the write."""
    benchmarks: dict[str, BenchmarkEntry] = field(default_factory=dict)
    """In run order."""
    suites: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Suite -> benchmark -> score (None when it did not run); each benchmark under one suite."""
    general: GeneralSection | None = None
    """Present when the run asked for the general suite."""
    shard: ShardRun | None = None
    """Present in a ``--shard I/N`` run's summary (:mod:`unified.eval.shards`)."""
    merged_from: dict[str, Any] | None = None
    """Present in a ``--merge`` run's summary: the contents of its ``shards.json`` (the shard
    directories, the work files copied and their conflicts; :func:`unified.eval.merge.merge_runs`)."""


SUMMARY_FILE = "summary.json"
SUMMARY_MAX_BYTES = 64 << 20
"""Largest ``summary.json`` :func:`load_summary` reads."""
_OMITTED_WHEN_NONE = ("general", "shard", "merged_from")


def write_summary_json(out: str | Path, summary: RunSummary) -> Path:
    """``out/summary.json``, atomically (:func:`unified.store.write_json_atomic`)."""
    path = Path(out) / SUMMARY_FILE
    data = to_dict(summary)
    for key in _OMITTED_WHEN_NONE:  # a plain run's summary has none of these keys
        if data.get(key) is None:
            data.pop(key, None)
    for entry in data["benchmarks"].values():
        if entry.get("shard") is None:
            entry.pop("shard", None)
    write_json_atomic(path, data)
    return path


def load_summary(run_dir: str | Path) -> RunSummary:
    """The :class:`RunSummary` of a run directory; ConfigError naming the file (and field) when it is
    not one, FileNotFoundError when the run has none yet."""
    path = Path(run_dir) / SUMMARY_FILE
    try:  # a regular file only: never through a link, never waiting on a FIFO, at most 64 MiB
        raw = read_regular_file(path, max_bytes=SUMMARY_MAX_BYTES)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no summary (is {run_dir} an eval run directory?)") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    summary = from_dict(RunSummary, data, source=str(path))
    summary.benchmarks = {_one_name(name, entry): entry for name, entry in summary.benchmarks.items()}
    for name, entry in summary.benchmarks.items():
        if entry.suites is None:  # written before the adapter's facts were recorded: the installed adapter's
            fill_facts(name, entry)
    return summary


def _one_name(key: str, entry: BenchmarkEntry) -> str:
    """The name of a summary entry: a summary written before one name per benchmark keyed a ``--benchmarks
    module:Class`` benchmark by that text; it is read under its records' directory (its class's ``name``)."""
    if ":" in key and entry.runs_dir:
        directory = Path(entry.runs_dir).name
        return directory if directory and ":" not in directory else key
    return key


def fill_facts(name: str, entry: BenchmarkEntry, path: str | None = None) -> BenchmarkEntry:
    """Set ``entry``'s adapter-declared facts (``suites``, ``paper_reference``) from the adapter class
    installed here, or at ``path`` (the ``module:Class`` the user's command gave), no suites when it
    cannot be loaded; returns ``entry``."""
    from unified.benchmarks.discovery import benchmark_facts

    facts = benchmark_facts(name, path)
    entry.suites = list(facts.get("suites") or [])
    if entry.paper_reference is None and facts.get("paper_reference"):
        entry.paper_reference = PaperReference(**facts["paper_reference"])
    return entry
