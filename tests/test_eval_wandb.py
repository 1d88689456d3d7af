"""``python -m unified.eval ... --wandb``: the run logged to wandb offline under ``OUT/wandb``.

The run directory is a fixture written through the run-directory store in the eval's own format;
the last test is a real ``--model gold`` run on one BFCL task with ``--wandb``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from unified.benchmarks.contract import Task
from unified.eval.records import load_summary
from unified.eval.report import benchmark_entry, build_summary, write_summary
from unified.eval.rundir import BenchmarkStore
from unified.eval.wandb_log import COLUMNS, episode_rows, log_run, summary_numbers
from unified.store import write_json_atomic
from unified.types import Episode, EpisodeResult, Step


@pytest.fixture()
def fixture_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    store = BenchmarkStore(run, "alpha")
    for i, score in enumerate((1.0, 0.0)):
        episode = Episode(benchmark="alpha", task_id=f"t{i}", stop_reason="answer", wall_seconds=1.5,
                          steps=[Step(index=0, prompt="p", completion="c", completion_tokens=5)])
        store.append(EpisodeResult(benchmark="alpha", task_id=f"t{i}", trial=0, score=score, passed=score > 0), episode)
    store.append(EpisodeResult(benchmark="alpha", task_id="t2", trial=0, score=0.0, skipped="no key"), None)
    results = list(store.load().values())
    entry = benchmark_entry(tasks=[Task(id=r.task_id, benchmark="alpha") for r in results], results=results,
                            runs=1, runs_protocol=1, aggregate={"score": 50.0, "metric": "fixture", "comparable": False})
    write_summary(run, build_summary(model="fixture", prompting="act", benchmarks={"alpha": entry}))
    write_json_atomic(run / "run.json", {"config": {"model": "fixture", "prompting": "act"}})
    return run


def test_rows_and_summary_numbers(fixture_run: Path):
    rows = [dict(zip(COLUMNS, r)) for r in episode_rows(fixture_run)]
    assert [(r["task_id"], r["score"], r["stop_reason"], r["steps"], r["skipped"]) for r in rows] == [
        ("t0", 1.0, "answer", 1, ""), ("t1", 0.0, "answer", 1, ""), ("t2", 0.0, "", 0, "no key")]
    numbers = summary_numbers(load_summary(fixture_run))
    assert numbers["alpha/score"] == 50.0 and numbers["alpha/tasks_run"] == 2 and numbers["alpha/tasks_skipped"] == 1


@pytest.mark.slow
def test_log_run_offline_under_the_run_dir_and_same_id_on_rerun(fixture_run: Path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DIR", raising=False)
    first = log_run(fixture_run)
    assert first.is_relative_to(fixture_run / "wandb") and first.name.startswith("offline-run-")
    run_id = (fixture_run / "wandb" / "run_id").read_text().strip()
    assert (first / f"run-{run_id}.wandb").is_file()
    assert b"alpha/score" in (first / f"run-{run_id}.wandb").read_bytes()
    table = json.loads(next(first.glob("files/media/table/episodes_*.table.json")).read_text())
    assert table["columns"] == COLUMNS and [row[1] for row in table["data"]] == ["t0", "t1", "t2"]
    assert "WANDB_MODE" not in os.environ and "WANDB_DIR" not in os.environ  # restored
    second = log_run(fixture_run)
    # A rerun (resume) logs to the same wandb run: the run file carries the same id. The folder's name is
    # wandb's (offline-run-<start second>-<id>, with "-1" appended when a rerun starts in the same second).
    assert second != first and (second / f"run-{run_id}.wandb").is_file()


@pytest.mark.slow
def test_eval_cli_wandb_flag(tmp_path: Path, capsys):
    pytest.importorskip("bfcl_eval")
    from unified.eval.cli import main

    out = tmp_path / "run"
    assert main(["--benchmarks", "bfcl_v4", "--split", "simple_python", "--limit", "1", "--model", "gold",
                 "--out", str(out), "--wandb"]) == 0
    printed = capsys.readouterr().out
    assert "wandb (offline): " in printed
    run_dir = Path(printed.split("wandb (offline): ")[1].split()[0])
    assert run_dir.is_relative_to(out / "wandb") and list(run_dir.glob("run-*.wandb"))
