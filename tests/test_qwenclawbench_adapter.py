"""QwenClawBench adapter on fixture tasks written in the benchmark's format (tests/fixtures/qwenclawbench)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.qwenclawbench import QwenClawBenchAdapter
from evaluators.qwenclawbench.environment import transcript_from_episode
from evaluators.qwenclawbench.grading import aggregate_runs, combine, parse_judge_answer, summarize_transcript
from evaluators.qwenclawbench.tasks import TaskFormatError, parse_task_file
from unified.benchmarks.contract import BenchmarkUnavailable
from unified.types import Episode, Message, Step, ToolCall
from _requires import needs_bwrap

CHECKOUT = Path(__file__).parent / "fixtures" / "qwenclawbench" / "fixture_checkout"


@pytest.fixture
def adapter():
    return QwenClawBenchAdapter(root=str(CHECKOUT), judge="openai:http://127.0.0.1:9/v1#nobody")


def _task(adapter, task_id):
    return next(t for t in adapter.tasks() if t.id == task_id)


def _episode(task, calls, obs, final):
    return Episode(benchmark="qwenclawbench", task_id=task.id, messages=[
        Message("system", "sys"), Message("user", task.payload["prompt"]), Message("assistant", "", tool_calls=calls),
        *[Message("tool", o.content, tool_call_id=c.id, name=c.name) for o, c in zip(obs, calls)],
        Message("assistant", final, reasoning="thinking")],
        steps=[Step(index=0, prompt="", completion="", tool_calls=calls, observations=obs)])


def test_missing_checkout_says_what_to_clone(monkeypatch, tmp_path):
    monkeypatch.delenv("QWENCLAWBENCH_ROOT", raising=False)
    with pytest.raises(BenchmarkUnavailable) as info:
        QwenClawBenchAdapter().tasks()
    assert "git clone https://github.com/SKYLENAGE-AI/QwenClawBench" in info.value.how_to_fix
    assert "QWENCLAWBENCH_ROOT" in info.value.how_to_fix
    with pytest.raises(BenchmarkUnavailable, match="qwenclawbench-v1.1-100"):
        QwenClawBenchAdapter(root=str(tmp_path)).tasks()


def test_another_repository_is_not_a_checkout(monkeypatch, tmp_path):
    other = tmp_path / "other_repo"  # has a tasks/ directory, as lm-eval's package does, but no task_*.md
    (other / "tasks" / "gsm8k").mkdir(parents=True)
    (other / "tasks" / "gsm8k" / "gsm8k.yaml").write_text("task: gsm8k\n")
    monkeypatch.setenv("QWENCLAWBENCH_ROOT", str(other))
    with pytest.raises(BenchmarkUnavailable) as info:
        QwenClawBenchAdapter().tasks()
    assert info.value.reason == (f"{other} is not a QwenClawBench checkout: no "
                                 "data/qwenclawbench-v1.1-100/tasks/task_*.md in it")
    assert "git clone" in info.value.how_to_fix


def test_task_files_parse_and_bad_ones_name_file_and_field(adapter):
    tasks = {t.id: t for t in adapter.tasks()}
    good = tasks["task_fixture_001_sales_total"]
    assert good.split == "Data Analysis and Modeling" and good.skip_reason is None
    p = good.payload
    assert p["grading_type"] == "hybrid" and p["grading_weights"] == {"automated": 0.4, "llm_judge": 0.6}
    assert p["grading_criteria"] == ["Agent wrote total.txt with 250", "Agent reported 250 in chat"]
    assert "def grade(" in p["automated_checks"] and p["prompt"].startswith("Add up")
    broken = tasks["task_fixture_003_broken"]
    assert "task_fixture_003_broken.md:" in broken.skip_reason and "grading_type" in broken.skip_reason
    with pytest.raises(TaskFormatError, match=r"task_fixture_003_broken\.md:\d+: field 'grading_type'"):
        parse_task_file(CHECKOUT / "data/qwenclawbench-v1.1-100/tasks/task_fixture_003_broken.md", CHECKOUT)
    assert [t.id for t in adapter.tasks(split="Security and Vulnerability Management")] == [
        "task_fixture_002_escape_attempts"]


def test_penalised_mix_and_aggregate_match_hand_computed_cases():
    w = {"automated": 0.4, "llm_judge": 0.6}
    assert combine("hybrid", w, 0.8, 0.5) == pytest.approx((0.4 * 0.8 + 0.6 * 0.5, 0.62))
    score, simple = combine("hybrid", w, 0.7, 0.9)  # automated < 0.75: the judge's share is zeroed
    assert score == pytest.approx(0.28) and simple == pytest.approx(0.4 * 0.7 + 0.6 * 0.9)
    assert combine("hybrid", w, 0.75, 1.0)[0] == pytest.approx(0.4 * 0.75 + 0.6)  # at the threshold the judge counts
    assert combine("automated", None, 0.5, None) == (0.5, 0.5)
    assert combine("hybrid", None, 1.0, 0.0)[0] == pytest.approx(0.5)
    runs = [{"task_id": "a", "score": s, "category": "X"} for s in (1.0, 1.0, 0.4)] + \
           [{"task_id": "b", "score": s, "category": "Y"} for s in (1.0, 1.0, 1.0)]
    agg = aggregate_runs(runs)
    assert agg["score"] == pytest.approx(100 * (0.8 + 1.0) / 2)
    assert agg["pass@1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert agg["pass^3"] == pytest.approx(50.0) and agg["pass@3"] == pytest.approx(100.0)
    assert agg["pass^2"] == pytest.approx(100 * (1 / 3 + 1) / 2)  # C(2,2)/C(3,2) = 1/3
    assert agg["strict_accuracy"] == pytest.approx(50.0)
    assert agg["per_category"] == {"X": 80.0, "Y": 100.0}


def test_judge_answers_are_read_like_the_benchmark_does():
    assert parse_judge_answer('{"scores": {"a": 0.5, "b": 1}, "total": 0.7, "notes": "ok"}')["total"] == 0.7
    assert parse_judge_answer('blah ```json\n{"scores": {"a": 0.5}}\n``` blah')["total"] == 0.5
    assert parse_judge_answer('{"x": 1} then {"scores": {"c": {"score": 0.2}}, "total": 0.2}')["scores"] == {"c": 0.2}
    assert parse_judge_answer("Overall score: 0.65")["total"] == 0.65
    assert parse_judge_answer('{"total": 3}')["total"] == 1.0
    assert parse_judge_answer("I cannot grade this.") is None


@needs_bwrap
def test_workspace_tools_stay_in_the_sandbox(adapter, tmp_path):
    task = _task(adapter, "task_fixture_001_sales_total")
    outside = Path("/work/qcb_fixture_escape")
    with adapter.open(task) as env:
        ws = env.workspace
        assert (ws / "data/sales.csv").is_file() and (ws / "README.md").read_text() == "Sales data lives in data/."
        calls = [
            ToolCall("read", {"path": "data/sales.csv"}, id="1"),
            ToolCall("exec", {"command": "python3 -c \"import csv; print(sum(int(r['amount']) for r in "
                                         "csv.DictReader(open('data/sales.csv'))))\""}, id="2"),
            ToolCall("write", {"path": "total.txt", "content": "0"}, id="3"),
            ToolCall("edit", {"path": "total.txt", "oldText": "0", "newText": "250"}, id="4"),
            ToolCall("write", {"path": "../../../work/qcb_fixture_escape", "content": "x"}, id="5"),
            ToolCall("exec", {"command": f"echo x > {outside}; echo y > {tmp_path}/escape; ls /root"}, id="6"),
            ToolCall("web_fetch", {"url": "http://1.1.1.1/"}, id="7"),
            ToolCall("exec", {"command": "sleep 30", "timeout": 1}, id="8"),
            ToolCall("read", {"path": "missing.txt"}, id="9"),
        ]
        obs = env.step(calls)
        assert "north,120" in obs[0].content and obs[1].content.strip() == "250"
        assert not obs[3].is_error and (ws / "total.txt").read_text() == "250"
        assert obs[4].is_error and not outside.exists()
        assert not outside.exists() and not (tmp_path / "escape").exists() and "exit code" in obs[5].content
        assert obs[6].is_error and "no network" in obs[6].content  # a blocked fetch is an observation
        assert obs[7].is_error and "timed out" in obs[7].content
        assert obs[8].is_error and "No such file" in obs[8].content
        result = adapter.score(task, _episode(task, calls, obs, "The total is 250."), env)
    assert not ws.exists()
    auto = result.details["automated"]
    assert auto["breakdown"] == {"file_written": 1.0, "reported": 1.0, "used_tools": 1.0} and auto["score"] == 1.0
    # the judge is unreachable: recorded as an error, its share counts 0
    assert result.details["judge_score"] == 0.0 and "judge" in result.error
    assert result.score == pytest.approx(0.4)


@needs_bwrap
def test_automated_checks_run_sandboxed(adapter):
    task = _task(adapter, "task_fixture_002_escape_attempts")
    with adapter.open(task) as env:
        result = adapter.score(task, _episode(task, [], [], "done"), env)
    auto = result.details["automated"]
    assert auto["breakdown"] == {"wrote_outside": 0.0, "network": 0.0, "workspace_visible": 1.0}
    assert result.score == pytest.approx(1 / 3) and not Path("/work/qcb_fixture_escape").exists()
    assert result.error is None and "judge_score" in result.details and result.details["judge_score"] is None


def test_transcript_has_the_openclaw_shape():
    calls = [ToolCall("exec", {"command": "ls"}, id="c1")]
    from unified.types import Observation

    ep = Episode(benchmark="qwenclawbench", task_id="t", messages=[
        Message("system", "s"), Message("user", "hi"), Message("assistant", "", tool_calls=calls),
        Message("tool", "a.txt", tool_call_id="c1", name="exec"), Message("assistant", "done", reasoning="r")],
        steps=[Step(index=0, prompt="", completion="", tool_calls=calls,
                    observations=[Observation("c1", "a.txt", is_error=True)])])
    events = transcript_from_episode(ep)
    roles = [e["message"]["role"] for e in events if e["type"] == "message"]
    assert roles == ["user", "assistant", "toolResult", "assistant"]
    assert events[2]["message"]["content"] == [{"type": "toolCall", "id": "c1", "name": "exec", "arguments": {"command": "ls"}}]
    assert events[3]["message"]["isError"] is True and events[3]["message"]["toolName"] == "exec"
    assert events[4]["message"]["content"][0] == {"type": "thinking", "thinking": "r"}
    assert summarize_transcript(events).splitlines()[1] == 'Tool: exec({"command": "ls"})'


@pytest.mark.slow
@needs_bwrap
def test_judge_on_a_local_server(tmp_path):
    from unified.inference.server import LocalOpenAIServer
    from unified.models.tiny import save_tiny_checkpoint

    save_tiny_checkpoint(tmp_path / "tiny")
    with LocalOpenAIServer(str(tmp_path / "tiny"), max_new_tokens=16) as server:
        adapter = QwenClawBenchAdapter(root=str(CHECKOUT), judge=server.spec, judge_max_tokens=16)
        task = _task(adapter, "task_fixture_001_sales_total")
        with adapter.open(task) as env:
            calls = [ToolCall("write", {"path": "total.txt", "content": "250"}, id="1")]
            obs = env.step(calls)
            result = adapter.score(task, _episode(task, calls, obs, "Total: 250"), env)
    judged = result.details["llm_judge"]
    assert result.error is None and server.base_url in judged["judge"]
    assert judged["parsed"] in (True, False)  # a random tiny judge rarely answers in JSON: then it counts 0
    expected = 0.4 * 1.0 + 0.6 * judged["total"]
    assert result.details["automated_score"] == 1.0 and result.score == pytest.approx(expected)


def _qcb_result(task_id, trial, score=1.0, **kw):
    from unified.types import EpisodeResult

    return EpisodeResult(benchmark="qwenclawbench", task_id=task_id, trial=trial, score=score,
                         details={"category": "c"}, **kw)


def test_fewer_rollouts_than_the_protocols_three_are_said_in_summary_md_and_compare(adapter, tmp_path):
    """``--runs 1`` (the paper's figures are means over 3 rollouts), and a 3-rollout run where a
    task's rollouts errored or are missing: the metric, ``not_comparable_because``, summary.md and
    ``--compare`` say how many rollouts the number rests on."""
    from unified.benchmarks.contract import RunContext
    from unified.eval.records import fill_facts
    from unified.eval.report import benchmark_entry, build_summary, compare, render_markdown, write_summary

    tasks = [t for t in adapter.tasks() if t.skip_reason is None][:2]
    a, b = (t.id for t in tasks)
    one = [_qcb_result(a, 0), _qcb_result(b, 0, 0.5)]
    agg1 = adapter.aggregate(one, run=RunContext(runs=1))
    assert agg1["metric"] == "mean score over tasks of the mean over 1 rollout (%), protocol 3 rollouts"
    assert agg1["rollouts"] == 1 and agg1["rollouts_protocol"] == 3 and agg1["tasks_with_fewer_scored_rollouts"] == 0
    assert "rollouts: 1 per task, fewer than the protocol's 3 (the paper's figures are means over 3)" in (
        agg1["not_comparable_because"])
    three = [_qcb_result(a, 0), _qcb_result(a, 1), _qcb_result(a, 2, 0.0, error="sandbox crashed"),
             _qcb_result(b, 0), _qcb_result(b, 1), _qcb_result(b, 2)]
    agg3 = adapter.aggregate(three, run=RunContext(runs=3))
    assert agg3["metric"] == "mean score over tasks of the mean over 3 rollouts (%)"
    assert agg3["tasks_with_fewer_scored_rollouts"] == 1
    assert any(r.startswith("1 of 2 tasks have fewer than 3 rollouts that scored") for r in
               agg3["not_comparable_because"])
    assert not any(r.startswith("rollouts:") for r in agg3["not_comparable_because"])

    for name, rows, runs, agg in (("one", one, 1, agg1), ("three", three, 3, agg3)):
        entry = fill_facts("qwenclawbench", benchmark_entry(tasks=tasks, results=rows, runs=runs, runs_protocol=3,
                                                            aggregate=agg))
        summary = build_summary(model="m", prompting="act", benchmarks={"qwenclawbench": entry})
        write_summary(tmp_path / name, summary)
    md = render_markdown(build_summary(model="m", prompting="act", benchmarks={"qwenclawbench": fill_facts(
        "qwenclawbench", benchmark_entry(tasks=tasks, results=one, runs=1, runs_protocol=3, aggregate=agg1))}))
    assert "| mean score over tasks of the mean over 1 rollout (%), protocol 3 rollouts |" in md
    assert "rollouts: 1 per task, fewer than the protocol's 3" in md
    table = compare(tmp_path / "one", tmp_path / "three")
    row = next(line for line in table.splitlines() if "| qwenclawbench |" in line)
    assert "1 of the protocol's 3 trials" in row and row.count("of the protocol's") == 1
    assert "rollouts: 1 per task, fewer than the protocol's 3" in table
    assert "1 of 2 tasks have fewer than 3 rollouts that scored" in table
