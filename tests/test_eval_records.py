"""summary.json as typed records: written through unified.store, read back strictly, old run directories load.

``_old_format_summary`` is a fixture in the format the untyped writer produced (a dict built by
hand in ``report.build_summary`` + ``attach_general``): every field that writer wrote, a benchmark
that could not list its tasks, and one entry from before the adapter's facts were recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unified.config import ConfigError
from unified.eval.cli import main
from unified.eval.config import EvalConfig
from unified.eval.records import BenchmarkEntry, RunSummary, ShardPart, ShardRun, load_summary
from unified.eval.runner import run_eval
from unified.eval.rundir import BenchmarkStore
from unified.eval.merge import merge_runs
from unified.types import EpisodeResult

FIXTURE = "fixture_eval_bench:FixtureAdapter"
ECHO = "fixture_echo"  # its one name (the class's `name`)


def _old_format_summary() -> dict:
    """A summary.json as the dict writer wrote it (old format fixture)."""
    ran = {"status": "partial", "aggregate": {"score": 50.0, "metric": "mean score (%)", "n": 2}, "tasks": 3,
           "tasks_run": 2, "tasks_skipped": 0, "tasks_errored": 1, "tasks_not_recorded": 0, "skip_reasons": {},
           "error_reasons": {"RuntimeError: boom": 1}, "tasks_in_benchmark": None, "runs": 1, "runs_protocol": 1,
           "results": 3, "errors": 1, "skipped": 0, "comparable": False,
           "not_comparable_because": ["1 of 3 tasks errored"], "runs_dir": "/old/run/fixture_echo",
           "settings": {"n": 3}, "limits": {"max_turns": 40, "max_steps_per_turn": 20, "max_episode_tokens": 32768,
                                            "max_seconds": 3600.0},
           "suites": [], "paper_reference": None}
    paper = {"label": "BFCL-V4", "sft": 62.29, "lwm_rl": 71.25, "source": "Qwen-AgentWorld report, Paradigm II"}
    failed = {"suites": ["ood"], "paper_reference": paper, "status": "error", "reason": "OSError: no data",
              "traceback": "Traceback (most recent call last):\nOSError: no data", "comparable": False}
    before_facts = {"status": "skipped", "reason": "no key", "how_to_fix": "export KEY", "comparable": False}
    general = {"model": "embedded", "settings": {"tasks": ["arc_easy"], "num_fewshot": 0},
               "tasks": {"arc_easy": {"task": "arc_easy", "status": "ok", "n_samples": 10, "seconds": 1.0,
                                      "metrics": [{"name": "acc", "filter": "none", "value": 0.4, "stderr": 0.1}]}}}
    return {"model": "embedded", "prompting": "act", "updated_at": 1.0,
            "benchmarks": {"fixture_echo": ran, "bfcl_v4": failed, "claw_eval": before_facts},
            "suites": {"ood": {"bfcl_v4": None, "claw_eval": None}, "other": {"fixture_echo": 50.0}},
            "general": general}


def _write(run: Path, data: dict) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "summary.json").write_text(json.dumps(data), encoding="utf-8")
    return run


def test_an_old_format_summary_loads_as_records(tmp_path):
    summary = load_summary(_write(tmp_path / "old", _old_format_summary()))
    assert isinstance(summary, RunSummary) and list(summary.benchmarks) == ["fixture_echo", "bfcl_v4", "claw_eval"]
    ran, failed, before = summary.benchmarks.values()
    assert ran.score() == 50.0 and ran.tasks_errored == 1 and ran.limits["max_turns"] == 40
    assert failed.score() is None and failed.tasks_run is None and failed.paper_reference.sft == 62.29
    assert before.suites == ["ood"]  # not recorded then: the installed adapter's, on load
    assert summary.general.tasks["arc_easy"]["metrics"][0]["value"] == 0.4


def test_old_format_summaries_still_compare_view_and_trace(tmp_path, capsys):
    from unified import view
    from unified.trace.load import load_run

    old = _write(tmp_path / "old", _old_format_summary())
    BenchmarkStore(old, "fixture_echo").append(EpisodeResult(benchmark="fixture_echo", task_id="echo_0", trial=0,
                                                             score=1.0, passed=True), None)
    assert main(["--compare", str(old), str(old)]) == 0
    table = capsys.readouterr().out
    assert "| other | fixture_echo | 50.00 (partial; 2/3 run, 0 skipped, 1 errored; not comparable)" in table
    assert "| arc_easy | acc |" in table
    page, _ = view.render(old)
    assert "fixture_echo" in page and "no key" in page
    assert load_run(old).summary["benchmarks"]["fixture_echo"]["status"] == "partial"


def test_an_unknown_field_is_an_error_naming_the_field_and_the_file(tmp_path, capsys):
    data = _old_format_summary()
    data["benchmarks"]["fixture_echo"]["tasks_runn"] = 2
    run = _write(tmp_path / "bad", data)
    with pytest.raises(ConfigError) as err:
        load_summary(run)
    assert "tasks_runn" in str(err.value) and str(run / "summary.json") in str(err.value)
    assert "tasks_run" in str(err.value)  # did you mean
    with pytest.raises(SystemExit):
        main(["--compare", str(run), str(run)])
    assert "tasks_runn" in capsys.readouterr().err


def test_a_run_writes_records_that_read_back_equal(tmp_path):
    summary = run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path),
                                  benchmark_config={FIXTURE: {"n": 2}}))
    assert isinstance(summary.benchmarks[ECHO], BenchmarkEntry)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert not [k for k in on_disk["benchmarks"][ECHO] if k.startswith("_")]  # no live objects through a dict
    assert "general" not in on_disk  # the run did not ask for it
    assert "shard" not in on_disk and "merged_from" not in on_disk  # a plain run: neither key
    assert "shard" not in on_disk["benchmarks"][ECHO]
    assert load_summary(tmp_path) == summary


def test_a_merge_of_shards_still_reads_its_summary(tmp_path):
    for i in (0, 1):
        run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path / f"s{i}"), shard=f"{i}/2",
                            benchmark_config={FIXTURE: {"n": 4}}))
    for i in (0, 1):  # a shard's summary reads back typed: the run's ShardRun, each entry's ShardPart
        shard = load_summary(tmp_path / f"s{i}")
        assert isinstance(shard.shard, ShardRun) and (shard.shard.shard, shard.shard.count) == (f"{i}/2", 2)
        part = shard.benchmarks[ECHO].shard
        assert isinstance(part, ShardPart) and part.pairs_total == 4 and part.pairs == shard.shard.pairs
        assert shard.merged_from is None
    merged = merge_runs([str(tmp_path / "s0"), str(tmp_path / "s1")], str(tmp_path / "m"), trusted={FIXTURE})
    assert merged.benchmarks[ECHO].tasks_run == 4 and load_summary(tmp_path / "m") == merged
    assert merged.shard is None and merged.benchmarks[ECHO].shard is None
    assert [s["shard"] for s in merged.merged_from["shards"]] == ["0/2", "1/2"]


def test_every_row_carries_its_schema_version_and_older_or_newer_rows_are_told_apart(tmp_path):
    """Issue 44 item 3: results, episodes (and the warmup's metrics) rows say their schema version; a row
    without one (written before versioning) reads as version 1, a row of a newer version is an error
    naming the file and line."""
    from unified.types import ROW_SCHEMA

    run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path), benchmark_config={FIXTURE: {"n": 2}}))
    store = BenchmarkStore(tmp_path, "fixture_echo")
    for path in (store.results_path, store.episodes_path):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert rows and all(row["schema"] == ROW_SCHEMA for row in rows)
    loaded = store.load()
    unversioned = [{k: v for k, v in json.loads(line).items() if k != "schema"}
                   for line in store.results_path.read_text().splitlines()]
    store.results_path.write_text("".join(json.dumps(row) + "\n" for row in unversioned))
    assert store.load() == loaded  # version 1: the same fields
    newer = [{**row, "schema": ROW_SCHEMA + 1} for row in unversioned]
    store.results_path.write_text("".join(json.dumps(row) + "\n" for row in newer))
    with pytest.raises(ValueError, match=rf"results\.jsonl:1: row schema {ROW_SCHEMA + 1}.*newer unified"):
        store.load()


def test_read_run_gives_the_plan_summary_identity_and_typed_records_without_adapter_code(tmp_path):
    """Issue 44 item 3: one reader API for analysis outside the viewer (docs/architecture.md)."""
    import subprocess
    import sys

    from unified.eval.reader import read_run

    run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path), runs=2,
                        benchmark_config={FIXTURE: {"n": 3}}))
    run = read_run(tmp_path)
    assert run.plan is not None and run.summary is not None and run.identity["fields"]["model"] == "gold"
    bench = run.benchmarks[ECHO]
    assert bench.directory == "fixture_echo" and len(bench.results) == 6 and len(bench.episodes) == 6
    assert bench.entry.aggregate["score"] == 100.0
    rows = run.rows()
    assert [(r["task_id"], r["trial"]) for r in rows] == [(r.task_id, r.trial) for r in bench.results]
    assert all(r["score"] == 1.0 and r["steps"] >= 1 and r["benchmark"] == ECHO for r in rows)
    # a fresh interpreter reads it without the adapter's module on the path and never imports it
    code = ("import sys; from unified.eval.reader import read_run; r = read_run(sys.argv[1]); "
            "assert 'fixture_eval_bench' not in sys.modules; print(len(r.rows()))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "6", proc.stderr[-2000:]
