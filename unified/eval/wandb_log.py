"""``python -m unified.eval ... --wandb``: an eval run logged to Weights & Biases, offline by default.

Like the warmup's logging (:func:`unified.warmup.trainer.configure_wandb`): every wandb directory
lies under ``<out>/wandb``, the mode is ``offline`` unless ``--wandb-mode online`` is given (then
``wandb sync`` is not needed), and the run id is kept in ``<out>/wandb/run_id`` so a resumed run
logs to the same wandb run. Logged once the run's summary is written:

- config: the run's resolved config (``run.json``);
- summary: per benchmark ``<name>/score`` (the headline aggregate, only for a benchmark that ran),
  ``<name>/tasks_run``, ``/tasks_skipped``, ``/tasks_errored``, ``/status``;
- a table ``episodes``: one row per result (benchmark, task_id, trial, score, passed, skipped,
  error's first line, stop_reason, steps, completion_tokens, wall_seconds).

``wandb sync <out>/wandb/wandb/offline-run-*`` uploads an offline run later.
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Literal

from unified.eval.records import RunSummary
from unified.eval.rundir import BenchmarkStore
from unified.store import read_jsonl
from unified.types import EpisodeResult

COLUMNS = ["benchmark", "task_id", "trial", "score", "passed", "skipped", "error", "stop_reason", "steps",
           "completion_tokens", "wall_seconds"]
"""Columns of the ``episodes`` table."""


@contextmanager
def _wandb_env(root: Path, mode: str) -> Iterator[None]:
    """wandb's directories under ``root`` and its mode, for the duration of the block."""
    env = {"WANDB_MODE": mode, "WANDB_DIR": str(root), "WANDB_CACHE_DIR": str(root / "cache"),
           "WANDB_CONFIG_DIR": str(root / "config"), "WANDB_DATA_DIR": str(root / "data"),
           "WANDB_ARTIFACT_DIR": str(root / "artifacts"), "WANDB_SILENT": "true"}
    for key in ("cache", "config", "data", "artifacts"):
        (root / key).mkdir(parents=True, exist_ok=True)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:200] if (text or "").strip() else ""


def episode_rows(run_dir: str | Path) -> list[list[Any]]:
    """The ``episodes`` table's rows (:data:`COLUMNS`), read without writing to the run directory."""
    rows = []
    for results_file in sorted(Path(run_dir).glob("*/results.jsonl")):
        bench = results_file.parent.name
        episodes = BenchmarkStore(run_dir, bench).episodes()
        seen: set[tuple[str, int]] = set()
        for number, row in enumerate(read_jsonl(results_file), 1):
            r = EpisodeResult.from_row(row, where=f"{results_file}:{number}")
            if (r.task_id, r.trial) in seen:  # the first result of a key is the one that counts
                continue
            seen.add((r.task_id, r.trial))
            e = episodes.get((r.task_id, r.trial))
            rows.append([r.benchmark, r.task_id, r.trial, r.score, r.passed, r.skipped or "", _first_line(r.error),
                         e.stop_reason if e else "", len(e.steps) if e else 0,
                         sum(s.completion_tokens for s in e.steps) if e else 0, e.wall_seconds if e else 0.0])
    return rows


def summary_numbers(summary: RunSummary) -> dict[str, Any]:
    """``<benchmark>/<key>`` -> value for the wandb run summary (module docstring)."""
    out: dict[str, Any] = {}
    for name, entry in summary.benchmarks.items():
        score = entry.score()
        if score is not None:
            out[f"{name}/score"] = score
        for key in ("tasks_run", "tasks_skipped", "tasks_errored", "status"):
            if getattr(entry, key) is not None:
                out[f"{name}/{key}"] = getattr(entry, key)
    return out


def log_run(run_dir: str | Path, *, mode: Literal["offline", "online"] = "offline",
            project: str = "unified-eval") -> Path:
    """Log a finished (or partly finished) run directory to wandb; returns the wandb run's directory."""
    import wandb

    from unified.eval.records import load_summary

    run_dir = Path(run_dir).resolve()
    summary = load_summary(run_dir)
    config: dict[str, Any] = {}
    if (run_dir / "run.json").is_file():
        data = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        config = data.get("config", data) if isinstance(data, dict) else {}
    root = run_dir / "wandb"
    root.mkdir(parents=True, exist_ok=True)
    id_file = root / "run_id"
    if not id_file.is_file():
        id_file.write_text(uuid.uuid4().hex[:12])
    with _wandb_env(root, mode):
        run = wandb.init(project=project, id=id_file.read_text().strip(), resume="allow", dir=str(root),
                         name=run_dir.name, job_type="eval", config=config)
        try:
            run.summary.update(summary_numbers(summary))
            run.log({"episodes": wandb.Table(columns=COLUMNS, data=episode_rows(run_dir))})
            where = Path(run.dir).parent
        finally:
            run.finish()
            wandb.teardown()  # waits for wandb's service to write the run out (finish alone may return first)
    return where
