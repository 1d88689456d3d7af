"""Claw-Eval figures a paper reader can compare (issue 52): a run in which no task ran has no Avg@3
and no Pass^3 (shown as not run / n/a, never 0.00); the score column names Avg@3 and Pass^3 and the
paper column its label; a recording script that exits for a reason of this machine (Playwright
missing) is named as such (unconfirmed evidence: the agent can print the same words, so the trial is
still graded, tests/test_claw_eval_browser.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from evaluators.claw_eval import ClawEvalAdapter, failed_snapshot_commands
from unified.eval.report import benchmark_entry, build_summary, render_markdown
from unified.benchmarks.contract import Task
from unified.types import EpisodeResult

CHECKOUT = Path(__file__).parent / "fixtures" / "claw_eval" / "fixture_checkout"


def _adapter() -> ClawEvalAdapter:
    return ClawEvalAdapter(root=str(CHECKOUT), judge="openai:http://127.0.0.1:9/v1#judge")


def _crashed(task: str, trial: int) -> EpisodeResult:
    return EpisodeResult(benchmark="claw_eval", task_id=task, trial=trial, score=0.0, passed=None,
                         details={"split": "general"}, error="infrastructure: the endpoint refused the connection")


def test_a_run_with_no_task_has_no_avg_3_and_no_pass_3():
    for results in ([], [_crashed("a", i) for i in range(3)]):
        out = _adapter().aggregate(results)
        assert out["score"] is None and out["pass^3"] is None, results
        assert "not run" in out["metric"] and "0.00" not in out["metric"]


def _markdown(results: list[EpisodeResult], task_ids: list[str]) -> str:
    adapter = _adapter()
    tasks = [Task(id=t, benchmark="claw_eval") for t in task_ids]
    entry = benchmark_entry(tasks=tasks, results=results, runs=3, runs_protocol=3,
                            aggregate=adapter.aggregate(results))
    entry = replace(entry, paper_reference=adapter.paper_reference)
    return render_markdown(build_summary(model="m", prompting="native", benchmarks={"claw_eval": entry}))


def test_the_table_names_avg_3_and_pass_3_and_shows_an_empty_run_as_not_run():
    empty = next(line for line in _markdown([], ["a"]).splitlines() if line.startswith("| claw_eval"))
    assert "not run (Avg@3, Pass^3: n/a)" in empty and "0.00" not in empty.split("|")[2]
    scores = {"a": [1.0, 0.9, 0.8], "b": [1.0, 0.5, 1.0]}
    results = [EpisodeResult(benchmark="claw_eval", task_id=t, trial=i, score=s, passed=s >= 0.75,
                             details={"split": "general", "prompts": "checkout"})
               for t, row in scores.items() for i, s in enumerate(row)]
    row = next(line for line in _markdown(results, ["a", "b"]).splitlines() if line.startswith("| claw_eval"))
    assert "Avg@3 86.67 · Pass^3 50.00" in row
    assert "Claw-Eval (Avg@3): 53.60 → 64.88" in row


def test_a_recording_script_failing_for_a_missing_playwright_is_named_as_infrastructure_evidence():
    snapshot = {
        "cmd:python fixtures/take_recording.py": {
            "exit_code": 1, "stdout": "",
            "stderr": "Traceback (most recent call last):\n  File \"take_recording.py\", line 3\n"
                      "ModuleNotFoundError: No module named 'playwright'\n"},
        "cmd:python fixtures/take_shot.py": {
            "exit_code": 1, "stdout": "",
            "stderr": "playwright._impl._errors.Error: BrowserType.launch: Executable doesn't exist at /ms/chrome\n"},
        "cmd:sqlite3 db.sqlite 'select 1'": {"exit_code": 1, "stdout": "", "stderr": "Error: no such table: notes\n"},
    }
    failed = {f["command"]: f for f in failed_snapshot_commands(snapshot)}
    assert failed["python fixtures/take_recording.py"]["infrastructure"] == \
        "ModuleNotFoundError: No module named 'playwright'"
    assert "BrowserType.launch" in failed["python fixtures/take_shot.py"]["infrastructure"]
    # the agent broke the database: graded as the benchmark grades it, not an infrastructure failure
    assert failed["sqlite3 db.sqlite 'select 1'"]["infrastructure"] is None
