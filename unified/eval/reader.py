"""``read_run(dir)``: one typed reader of an eval run directory, for analysis outside the viewer.

    from unified.eval.reader import read_run
    run = read_run("runs/eval/ood")
    run.summary.benchmarks["bfcl_v4"].aggregate["score"]      # the summary (typed RunSummary)
    run.benchmarks["bfcl_v4"].results[0].score                # every EpisodeResult, typed
    run.benchmarks["bfcl_v4"].episodes[("simple_0", 0)].steps # every Episode, by (task, trial)
    import pandas as pd; pd.DataFrame(run.rows())             # one flat row per (benchmark, task, trial)

It reads only the run's own records, each as a regular file (never through a link, never waiting on
a FIFO, within a size cap, streamed a line at a time with a per-line cap, so that memory follows the
records and a sparse multi-GiB file is one line of refusal: :func:`unified.store.jsonl_lines`), strictly typed (:mod:`unified.config`'s loader; an
unknown field or a row of a newer schema is an error naming the file and line): ``plan.json``
(:class:`unified.eval.plan.RunPlan`), ``summary.json`` (:class:`unified.eval.records.RunSummary`),
``identity.json`` (a dict), and each benchmark's ``results.jsonl`` / ``episodes.jsonl``
(:class:`unified.types.EpisodeResult` / :class:`unified.types.Episode`; rows carry
``schema`` = :data:`unified.types.ROW_SCHEMA`, unversioned rows read as version 1). Nothing a run
directory names is imported or run: no adapter code is needed to read any of it. A run still in
progress reads as far as it got (a torn last line is left out, not repaired: the reader never writes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unified.eval.plan import RunPlan, read_plan
from unified.eval.records import BenchmarkEntry, RunSummary, load_summary
from unified.eval.rundir import BenchmarkStore
from unified.store import read_identity
from unified.types import ROW_SCHEMA, Episode, EpisodeResult


@dataclass
class BenchmarkRecords:
    """One benchmark's records in a run directory."""

    name: str
    """As the run named it (its summary entry's key)."""
    directory: str
    """``RUN/<directory>`` holds its records."""
    results: list[EpisodeResult] = field(default_factory=list)
    """One per (task, trial), the first recorded (as the summary counts them), in task then trial order."""
    episodes: dict[tuple[str, int], Episode] = field(default_factory=dict)
    """(task id, trial) -> its Episode (the last recorded, as a resumed run keeps it)."""
    entry: BenchmarkEntry | None = None
    """Its summary entry, when the run has a summary."""


@dataclass
class RunRecord:
    """What an eval run directory holds, typed (:func:`read_run`)."""

    path: str
    schema: int = ROW_SCHEMA
    """The newest row schema this reader reads."""
    plan: RunPlan | None = None
    """``plan.json`` (None: a run made before plans)."""
    summary: RunSummary | None = None
    """``summary.json`` (None: no benchmark finished yet)."""
    identity: dict[str, Any] | None = None
    """``identity.json``: what defines the results (model, weights digest, settings)."""
    benchmarks: dict[str, BenchmarkRecords] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per (benchmark, task, trial): benchmark, task_id, trial, score, passed, skipped,
        error, turns and tokens of its episode (None without one) — a table for pandas or a CSV."""
        out = []
        for name, bench in self.benchmarks.items():
            for r in bench.results:
                episode = bench.episodes.get((r.task_id, r.trial))
                out.append({"benchmark": name, "task_id": r.task_id, "trial": r.trial, "score": r.score,
                            "passed": r.passed, "skipped": r.skipped, "error": r.error,
                            "steps": len(episode.steps) if episode else None,
                            "completion_tokens": sum(s.completion_tokens for s in episode.steps) if episode else None,
                            "stop_reason": episode.stop_reason if episode else None})
        return out


def _directories(run: Path, plan: RunPlan | None) -> dict[str, str]:
    """name -> directory of the benchmarks with records: the plan's, else every ``RUN/<dir>/results.jsonl``."""
    if plan is not None:
        return {b.name: b.directory for b in plan.benchmarks if b.status == "run"}
    return {p.parent.name: p.parent.name for p in sorted(run.glob("*/results.jsonl")) if not p.parent.is_symlink()}


def read_run(run_dir: str | Path) -> RunRecord:
    """The :class:`RunRecord` of ``run_dir`` (module docstring). FileNotFoundError when it is not a
    directory; ValueError/ConfigError naming the file (and line, field) for a record that cannot be read."""
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"{run}: not a run directory")
    try:
        plan = read_plan(run)
    except FileNotFoundError:
        plan = None
    try:
        summary = load_summary(run)
    except FileNotFoundError:
        summary = None
    record = RunRecord(path=str(run), plan=plan, summary=summary, identity=read_identity(run, lambda: None))
    for name, directory in _directories(run, plan).items():
        store = BenchmarkStore(run, directory)
        results = sorted(store.load(repair=False).values(), key=lambda r: (r.task_id, r.trial))
        entry = summary.benchmarks.get(name) if summary else None
        record.benchmarks[name] = BenchmarkRecords(name, directory, results, store.episodes(), entry)
    return record


__all__ = ["BenchmarkRecords", "RunRecord", "read_run"]
