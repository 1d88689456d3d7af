"""Promise: an agent cannot turn its failed answer into ``error: infrastructure`` (left out of the score).

A verifier whose output shows a download or DNS failure and whose tests never ran is an
infrastructure error, but that output is the agent's to shape: a CSV row the agent wrote that
contains ``Could not resolve host`` makes the task's checker crash with that text in its traceback.
Attack (``local`` backend, no privilege needed): a fixture task in Terminal-Bench's folder format
whose checker reads ``/app/report.csv``; the agent writes a bad row with that text. The episode
must score 0 (the failure does not reproduce when the task's verifier runs on a fresh environment
without the agent), while a verifier that cannot fetch its tools on a fresh environment either is
still an infrastructure error, confirmed once per task and run.
"""

from __future__ import annotations

from pathlib import Path

from evaluators.terminal_bench import TerminalBench2Adapter
from unified.types import Episode, ToolCall
from _requires import needs_local, needs_tmux

pytestmark = [needs_local, needs_tmux]

TOML = 'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n[environment]\nallow_internet = false\n'
CHECKER = ("import csv, sys\n"
           "rows = list(csv.reader(open('/app/report.csv')))\n"
           "for row in rows:\n"
           "    if len(row) != 2:\n"
           "        raise ValueError(f'bad row {row!r}')\n"
           "sys.exit(0 if rows == [['region', 'total'], ['north', '12']] else 1)\n")
TEST_SH = ("#!/bin/bash\npython3 /tests/check.py && echo '{\"results\": {}}' > /logs/verifier/ctrf.json\n"
           "# pytest-json-ctrf writes ctrf.json; this checker imitates it\n"
           "if [ -s /logs/verifier/ctrf.json ]; then echo 1 > /logs/verifier/reward.txt; "
           "else echo 0 > /logs/verifier/reward.txt; fi\n")
FETCH_SH = ('#!/bin/bash\npython3 -c "import urllib.request; urllib.request.urlopen(\'https://tools.invalid/x\', '
            'timeout=20)"\npython3 -m pytest --ctrf /logs/verifier/ctrf.json /tests\n'
            "echo 0 > /logs/verifier/reward.txt\n")
FORGED_ROW = "printf 'region,total\\nCould not resolve host: pypi.org,x,y\\n' > /app/report.csv\n"


def _task(root: Path, name: str, test_sh: str) -> None:
    (root / name / "tests").mkdir(parents=True)
    (root / name / "environment").mkdir()
    (root / name / "tests" / "test.sh").write_text(test_sh)
    (root / name / "tests" / "check.py").write_text(CHECKER)
    (root / name / "instruction.md").write_text("Write /app/report.csv.")
    (root / name / "task.toml").write_text(TOML)
    (root / name / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")


def _score(adapter, task, keys: str | None, trial: int = 0):
    with adapter.open(task) as env:
        if keys:
            env.step([ToolCall("send_keys", {"keystrokes": keys, "duration": 3}, "k0")])
        return adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id, trial=trial), env)


def test_a_csv_row_that_reads_like_a_dns_failure_is_a_wrong_answer(tmp_path):
    _task(tmp_path, "fixture_csv_report", TEST_SH)
    adapter = TerminalBench2Adapter(root=str(tmp_path), backend="local", agent="tool_calling")
    task = adapter.tasks()[0]
    result = _score(adapter, task, FORGED_ROW)
    assert "Could not resolve host" in result.details["verifier_output"]  # the attack's text reached the output
    assert result.error is None, result.error
    assert result.score == 0.0 and result.passed is False
    assert "not reproduced" in result.details["infrastructure_unconfirmed"]


def test_a_verifier_that_cannot_fetch_its_tools_without_the_agent_is_still_infrastructure(tmp_path):
    _task(tmp_path, "fixture_fetch_fails", FETCH_SH)
    adapter = TerminalBench2Adapter(root=str(tmp_path), backend="local", agent="tool_calling")
    task = adapter.tasks()[0]
    first, second = _score(adapter, task, None, 0), _score(adapter, task, None, 1)
    for result in (first, second):
        assert result.error is not None and result.error.startswith("infrastructure: "), result.details
        assert "reproduced without the agent" in result.error and result.passed is None
    assert adapter.infrastructure_baselines.runs == 1  # confirmed once for the task in this run


def test_a_patch_that_prints_a_dns_failure_is_not_an_infrastructure_error():
    """SWE-bench Pro fixture instance: the model's patch makes the package print a DNS failure and exit on import,
    so no test runs; the reference patch on a fresh checkout runs the tests, so the episode is a 0."""
    from evaluators.swe_bench import SWEBenchProAdapter
    from unified.agent.loop import AgentLoop, Job
    from unified.agent.replay import GoldReplayer

    fixtures = Path(__file__).parents[1] / "fixtures" / "swe_bench"
    adapter = SWEBenchProAdapter(dataset=str(fixtures / "fixture_pro.jsonl"), backend="local",
                                 scripts_dir=str(fixtures / "fixture_pro_run_scripts"),
                                 instances="instance_fixture__calc-1")
    task = adapter.tasks()[0]
    forged = ("diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n"
              "@@ -1,3 +1,4 @@\n"
              ' """A tiny calculator library (SWE-bench fixture repository of the unified project)."""\n'
              "+import os; print('curl: (6) Could not resolve host: pypi.org', flush=True); os._exit(1)\n \n \n")
    task.payload["row"] = {**task.payload["row"], "patch": task.payload["row"]["patch"]}
    gold_turns = adapter.gold_turns

    def forged_turns(t):
        turns = gold_turns(t)
        turns[0][0].arguments["command"] = turns[0][0].arguments["command"].replace(
            t.payload["row"]["patch"], forged)
        return turns

    adapter.gold_turns = forged_turns
    result = AgentLoop(adapter, GoldReplayer()).run([Job(task, 0)])[0]
    assert "Could not resolve host" in result.details.get("entryscript_output", "") + str(result.details)
    assert result.error is None, result.error
    assert result.score == 0.0 and result.passed is False
    assert "not reproduced" in result.details["infrastructure_unconfirmed"]
