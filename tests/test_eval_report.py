"""Reports that never overstate: status, task counts, comparability in summary.json/.md and --compare."""

from __future__ import annotations

import json

import pytest

from unified.benchmarks.contract import Task
from unified.eval.cli import main
from unified.eval.records import RunSummary, fill_facts
from unified.eval.report import NOT_STATED, benchmark_entry, render_markdown
from unified.eval.config import EvalConfig
from unified.eval.runner import run_eval
from unified.types import EpisodeResult

FIXTURE = "fixture_eval_bench:FixtureAdapter"
SKIPPING = "test_eval_report:SkippingFixtureAdapter"
STATING = "test_eval_report:ComparableFixtureAdapter"
# one name per benchmark: a --benchmarks module:Class benchmark is summarised under its class's `name`
ECHO_NAME, SKIPPING_NAME, STATING_NAME = "fixture_echo", "fixture_skipping", "fixture_comparable"


from fixture_eval_bench import FixtureAdapter  # noqa: E402


class SkippingFixtureAdapter(FixtureAdapter):
    """Every task needs something this machine lacks."""

    name = "fixture_skipping"

    def tasks(self, split=None, limit=None):
        return [Task(id=t.id, benchmark=self.name, payload=t.payload, skip_reason="needs ffmpeg (not installed)")
                for t in super().tasks(split, limit)]


class ComparableFixtureAdapter(FixtureAdapter):
    """States that its number is computed as the official one; protocol of 2 trials."""

    name = "fixture_comparable"
    runs_default = 2

    def aggregate(self, results, *, run=None):
        return {**super().aggregate(results, run=run), "comparable": True, "not_comparable_because": []}


class ComparableSkippingFixtureAdapter(ComparableFixtureAdapter):
    """Vouches for its number although every task is skipped (its aggregate has 0 scored episodes)."""

    name = "fixture_comparable_skipping"

    def tasks(self, split=None, limit=None):
        return [Task(id=t.id, benchmark=self.name, payload=t.payload, skip_reason="needs ffmpeg (not installed)")
                for t in super().tasks(split, limit)]


STATING_SKIPPING = "test_eval_report:ComparableSkippingFixtureAdapter"
STATING_SKIPPING_NAME = "fixture_comparable_skipping"


def _result(task_id, trial=0, score=1.0, **kw):
    return EpisodeResult(benchmark="b", task_id=task_id, trial=trial, score=score, **kw)


def test_every_task_skipped_is_never_ok(tmp_path):
    summary = run_eval(EvalConfig(benchmarks=[SKIPPING], model="gold", out=str(tmp_path),
                                  benchmark_config={SKIPPING: {"n": 3}}))
    entry = summary.benchmarks[SKIPPING_NAME]
    assert entry.status == "skipped" and entry.tasks_run == 0 and entry.tasks_skipped == 3
    assert entry.skip_reasons == {"needs ffmpeg (not installed)": 3}
    assert summary.suites["other"][SKIPPING_NAME] is None and entry.comparable is False
    md = (tmp_path / "summary.md").read_text()
    row = [line for line in md.splitlines() if line.startswith(f"| {SKIPPING_NAME} |")][0]
    assert "0.00" not in row and "| ok |" not in row and "skipped: every task was skipped" in row


def test_every_task_errored_is_error_without_a_score(tmp_path):
    summary = run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path),
                                  benchmark_config={FIXTURE: {"n": 0, "crash": 2}}))
    entry = summary.benchmarks[ECHO_NAME]
    assert entry.status == "error" and entry.tasks_errored == 2 and entry.tasks_run == 0
    assert "fixture environment crashed" in next(iter(entry.error_reasons))
    row = [line for line in (tmp_path / "summary.md").read_text().splitlines() if line.startswith(f"| {ECHO_NAME} |")][0]
    assert "0.00" not in row and "| ok |" not in row and "| error: no task ran" in row


def test_limit_and_missing_statement_make_a_run_not_comparable(tmp_path):
    summary = run_eval(EvalConfig(benchmarks=[FIXTURE, STATING], model="gold", out=str(tmp_path), limit=2,
                                  benchmark_config={FIXTURE: {"n": 5}, STATING: {"n": 5}}))
    plain, stating = summary.benchmarks[ECHO_NAME], summary.benchmarks[STATING_NAME]
    assert plain.status == "ok" and plain.tasks_run == 2 and plain.tasks_in_benchmark == 5
    assert NOT_STATED in plain.not_comparable_because
    assert "partial: 2 of 5 tasks selected" in plain.not_comparable_because and not plain.comparable
    assert stating.not_comparable_because == ["partial: 2 of 5 tasks selected"] and not stating.comparable
    md = (tmp_path / "summary.md").read_text()
    assert f"**{STATING_NAME}** not comparable: partial: 2 of 5 tasks selected" in md


def test_a_full_run_the_adapter_vouches_for_is_comparable_and_fewer_trials_is_not(tmp_path):
    full = run_eval(EvalConfig(benchmarks=[STATING], model="gold", out=str(tmp_path / "full"),
                               benchmark_config={STATING: {"n": 2}})).benchmarks[STATING_NAME]
    assert full.status == "ok" and full.comparable and full.not_comparable_because == []
    one = run_eval(EvalConfig(benchmarks=[STATING], model="gold", out=str(tmp_path / "one"), runs=1,
                              benchmark_config={STATING: {"n": 2}})).benchmarks[STATING_NAME]
    assert one.not_comparable_because == ["fewer trials than the protocol's 2 (1)"] and not one.comparable


def test_partial_status_grader_errors_and_missing_trials():
    tasks = [Task(id=i, benchmark="b") for i in ("a", "b", "c", "d", "e")]
    results = [_result("a"), _result("a", 1),
               _result("b", skipped="no key"), _result("b", 1, skipped="no key"),
               _result("c", score=0.0, details={"grader_error": "grader timed out after 900s"}), _result("c", 1),
               _result("d"),  # one of two trials recorded
               _result("e", error="boom"), _result("e", 1)]
    entry = benchmark_entry(tasks=tasks, results=results, runs=2, runs_protocol=2,
                            aggregate={"score": 40.0, "comparable": True})
    assert (entry.status, entry.tasks_run, entry.tasks_skipped, entry.tasks_errored,
            entry.tasks_not_recorded) == ("partial", 1, 1, 2, 1)
    assert entry.errors == 2 and entry.error_reasons == {"grader: grader timed out after 900s": 1, "boom": 1}
    assert entry.comparable is False
    assert "1 of 5 tasks skipped (1 no key)" in entry.not_comparable_because
    assert "2 of 5 tasks errored" in entry.not_comparable_because
    md = render_markdown(RunSummary(model="m", prompting="act", benchmarks={"b": entry}, suites={"other": {"b": 40.0}}))
    assert "| b | 40.00* |" in md and "| 1/5 | 1 | 2 | partial | no |" in md


def test_compare_shows_status_counts_and_marks_partial_deltas(tmp_path, capsys):
    run_eval(EvalConfig(benchmarks=[FIXTURE, SKIPPING], model="gold", out=str(tmp_path / "a"),
                        benchmark_config={FIXTURE: {"n": 2, "crash": 1}, SKIPPING: {"n": 2}}))
    run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path / "b"),
                        benchmark_config={FIXTURE: {"n": 4, "crash": 1}}))
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    table = capsys.readouterr().out
    row = [line for line in table.splitlines() if f"| {ECHO_NAME} |" in line][0]
    assert "66.67 (partial; 2/3 run, 0 skipped, 1 errored; not comparable)" in row
    assert "80.00 (partial; 4/5 run, 0 skipped, 1 errored; not comparable)" in row
    assert row.endswith("| +13.33* NOT COMPARABLE |")  # other data (n=2 vs n=4), other selection
    skipped = [line for line in table.splitlines() if f"| {SKIPPING_NAME} |" in line][0]
    assert "— (skipped; 0/2 run, 2 skipped, 0 errored; not comparable)" in skipped
    assert "1 of 3 tasks errored" in table


def test_paper_column_marks_non_comparable_rows():
    entry = benchmark_entry(tasks=[Task(id="t", benchmark="bfcl_v4")], results=[_result("t")], runs=1,
                            runs_protocol=1, aggregate={"score": 50.0, "comparable": False,
                                                        "not_comparable_because": ["simulated search"]})
    fill_facts("bfcl_v4", entry)  # the runner records the adapter's declared facts (its paper numbers) once
    md = render_markdown(RunSummary(model="m", prompting="act", benchmarks={"bfcl_v4": entry},
                                    suites={"ood": {"bfcl_v4": 50.0}}))
    assert "62.29 → 71.25 (not comparable)" in md and "**bfcl_v4** not comparable: simulated search" in md


@pytest.mark.parametrize("n", [0, 1])
def test_json_round_trip(tmp_path, n):
    run_eval(EvalConfig(benchmarks=[FIXTURE], model="gold", out=str(tmp_path), benchmark_config={FIXTURE: {"n": n}}))
    entry = json.loads((tmp_path / "summary.json").read_text())["benchmarks"][ECHO_NAME]
    assert entry["status"] == ("ok" if n else "skipped")
    assert {"tasks_run", "tasks_skipped", "tasks_errored", "comparable", "not_comparable_because"} <= set(entry)


def test_long_reasons_are_cut_at_a_word_boundary():
    from unified.eval.report import shorten

    text = "the verifier could not download CPython 3.13 from github.com because the sandbox has no network access"
    cut = shorten(text, 60)
    assert len(cut) <= 60 and cut.endswith("…") and text.startswith(cut[:-1]) and text[len(cut) - 1] == " "
    assert shorten("short", 60) == "short"


def test_nothing_ran_is_never_comparable_in_summary_json_or_compare(tmp_path, capsys):
    summary = run_eval(EvalConfig(benchmarks=[STATING_SKIPPING], model="gold", out=str(tmp_path / "a"),
                                  benchmark_config={STATING_SKIPPING: {"n": 2}}))
    entry = summary.benchmarks[STATING_SKIPPING_NAME]
    assert entry.status == "skipped" and entry.comparable is False
    assert entry.aggregate["comparable"] is False  # the adapter said True with 0 scored episodes
    assert "nothing ran: no scored episode" in entry.not_comparable_because
    on_disk = json.loads((tmp_path / "a" / "summary.json").read_text())["benchmarks"][STATING_SKIPPING_NAME]
    assert '"comparable": true' not in json.dumps(on_disk)
    # every trial errored: same
    errored = benchmark_entry(tasks=[Task(id="t", benchmark="b")], results=[_result("t", error="boom")], runs=1,
                              runs_protocol=1, aggregate={"score": 0.0, "comparable": True})
    assert errored.comparable is False and errored.aggregate["comparable"] is False
    # a summary that says comparable for a benchmark that did not run (an older writer): --compare says not
    stale = {"model": "old", "prompting": "act", "updated_at": 0, "suites": {"other": {"x": None}},
             "benchmarks": {"x": {"status": "skipped", "reason": "no key", "comparable": True, "tasks_run": 0,
                                  "tasks": 2, "tasks_skipped": 2, "tasks_errored": 0, "aggregate": {}}}}
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "summary.json").write_text(json.dumps(stale))
    assert main(["--compare", str(tmp_path / "b"), str(tmp_path / "b")]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if "| x |" in line][0]
    assert "not comparable" in row and "; comparable)" not in row


def test_every_score_has_pass_agent_fail_and_infrastructure_fail_counts_beside_it():
    def result(task, **kw):
        return EpisodeResult(benchmark="b", task_id=task, trial=0, **{"score": 0.0, **kw})

    results = [result("t1", score=1.0, passed=True), result("t2", score=0.0, passed=False),
               result("t3", score=1.0),  # no pass flag: a full score passes
               result("t4", score=0.5),  # partial credit without a pass flag: judged, not passed
               result("t5", error="infrastructure: the verifier's download failed"),
               result("t6", error="RuntimeError: endpoint refused"), result("t7", skipped="needs ffmpeg"),
               result("t8", score=0.0, passed=False, details={"grader_error": "judge timed out"})]
    entry = benchmark_entry(tasks=[Task(id=f"t{i}", benchmark="b") for i in range(1, 9)], results=results,
                            runs=1, runs_protocol=1, aggregate={"score": 40.0, "comparable": False})
    assert entry.outcomes == {"pass": 2, "agent_fail": 2, "infrastructure_fail": 3, "episodes": 7}
    summary = RunSummary(model="m", prompting="act", benchmarks={"b": entry}, suites={"ood": {"b": 40.0}})
    assert "| b | 40.00* | 2 / 2 / 3 of 7 |" in render_markdown(summary)
