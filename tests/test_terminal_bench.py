"""Terminal-Bench 2.0 adapter on the fixture tasks (tests/fixtures/terminal_bench, our own tasks in
the benchmark's folder format) with the local backend: gold scores 100%, doing nothing scores 0,
broken task folders are reported with file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.terminal_bench import TerminalBench2Adapter
from evaluators.terminal_bench.tasks import TaskFormatError, read_task
from unified.agent.loop import AgentLoop, Job
from unified.eval.adapter import BenchmarkUnavailable
from unified.execution import LocalBackend
from unified.policy.gold import GoldPolicy
from unified.types import Episode, ToolCall

FIXTURES = Path(__file__).parent / "fixtures" / "terminal_bench"
pytestmark = pytest.mark.skipif(LocalBackend().unavailable_reason() is not None, reason="bubblewrap missing")


def _adapter(**kw):
    adapter = TerminalBench2Adapter(root=str(FIXTURES), backend="local", **kw)
    adapter.name = "terminal_bench_2"
    return adapter


def test_fixture_tasks_are_read_from_the_task_folders():
    tasks = _adapter().tasks()
    assert [t.id for t in tasks] == ["fixture_error_count", "fixture_hello_file"]
    payload = tasks[0].payload
    assert payload["verifier_env"] == {"EXPECTED_FILE": "/app/errors.txt"} and payload["memory_mb"] == 1024
    assert payload["agent_timeout_s"] == 300 and payload["build_context"].endswith("environment")
    assert _adapter(tasks="fixture_hello_file").tasks()[0].id == "fixture_hello_file"


def test_gold_solutions_score_100_percent_on_the_local_backend():
    adapter = _adapter()
    results = AgentLoop(adapter, GoldPolicy()).run([Job(t, 0) for t in adapter.tasks()])
    assert [r.error for r in results] == [None, None]
    assert all(r.score == 1.0 and r.passed and r.details["backend"] == "local" for r in results)
    summary = adapter.aggregate(results)
    assert summary["score"] == 100.0 and summary["backends"] == ["local"]


def test_doing_nothing_scores_zero_and_a_wrong_answer_too():
    adapter = _adapter(tasks="fixture_error_count")
    task = adapter.tasks()[0]
    with adapter.open(task) as env:
        assert "service.log" in env.first_user_message and "$" in env.first_user_message
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
        assert result.score == 0.0 and not result.passed
    with adapter.open(task) as env:
        obs = env.step([ToolCall("send_keys", {"keystrokes": "grep -c ERROR data/service.log > errors.txt"}, "c0"),
                        ToolCall("send_keys", {"keystrokes": "cat errors.txt", "duration": 2}, "c1"),
                        ToolCall("rm_rf", {}, "c2")])
        assert "\n5\n" in obs[1].content  # grep -c also counts the WARN and DEBUG lines: wrong
        assert obs[2].is_error and "Unknown tool" in obs[2].content
        result = adapter.score(task, Episode(benchmark=adapter.name, task_id=task.id), env)
        assert result.score == 0.0 and "expected 3, got '5'" in result.details["verifier_output"]


def test_agent_timeout_ends_the_episode():
    adapter = _adapter(tasks="fixture_hello_file", agent_timeout_s=0.5)
    with adapter.open(adapter.tasks()[0]) as env:
        import time

        time.sleep(0.6)
        obs = env.step([ToolCall("send_keys", {"keystrokes": "ls"}, "c0")])
        assert obs[0].is_error and "Time limit" in obs[0].content and env.done


def test_broken_task_folders_name_file_and_field(tmp_path):
    bad = tmp_path / "broken"
    (bad / "tests").mkdir(parents=True)
    (bad / "tests" / "test.sh").write_text("true\n")
    (bad / "instruction.md").write_text("x")
    (bad / "task.toml").write_text("[agent]\ntimeout_sec = 'soon'\n")
    with pytest.raises(TaskFormatError, match=r"task.toml: \[agent\] timeout_sec must be a number"):
        read_task(bad)
    (bad / "task.toml").write_text("[agent]\ntimeout_sec = 10\n")
    with pytest.raises(TaskFormatError, match="neither environment/Dockerfile nor"):
        read_task(bad)
    tasks = TerminalBench2Adapter(root=str(tmp_path), backend="local").tasks()
    assert tasks[0].skip_reason and "Dockerfile" in tasks[0].skip_reason


def test_missing_source_is_a_clear_unavailability(monkeypatch):
    monkeypatch.delenv("TERMINAL_BENCH_ROOT", raising=False)
    monkeypatch.delenv("UNIFIED_FIXTURES_DIR", raising=False)
    with pytest.raises(BenchmarkUnavailable, match="TERMINAL_BENCH_ROOT"):
        TerminalBench2Adapter().tasks()
