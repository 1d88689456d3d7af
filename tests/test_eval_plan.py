"""The run plan (unified.eval.plan): plan.json, execute, summarize; the gold run pinned byte for byte; --merge
without the runner; --dry-run; every adapter call contained per benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixture_eval_bench import FixtureAdapter
from gold_run_fixture import DEPENDS, DEPENDS_NAME, ECHO, ECHO_NAME, EXPECTED, FAILING, FAILING_NAME, gold_argv, \
    normalised
from unified.benchmarks.contract import AgentLimits
from unified.eval.cli import main
from unified.eval.plan import PLAN_FILE, read_plan

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _fixture_path(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def expected() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(EXPECTED.iterdir())}


def test_the_gold_run_is_byte_identical_to_the_one_captured_before_the_run_plan(tmp_path):
    run = tmp_path / "run"
    assert main(gold_argv(run)) == 0
    got = normalised(run)
    want = expected()
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name
    plan = read_plan(run)  # strict: written through unified.store, read back through from_dict
    assert [b.name for b in plan.benchmarks][:2] == [ECHO_NAME, DEPENDS_NAME]
    assert [b.adapter_path for b in plan.benchmarks][:2] == [ECHO, DEPENDS]  # recorded, never loaded from
    echo = plan.benchmark(ECHO_NAME)
    assert echo.tasks == [f"echo_{i}" for i in range(5)] + ["crash_0"] and echo.to_run == echo.pairs
    assert [b.status for b in plan.benchmarks][-2:] == ["skipped", "error"]
    # a rerun resumes: its plan has nothing to run and the summary is the same bytes
    assert main(gold_argv(run)) == 0
    assert all(not b.to_run for b in read_plan(run).benchmarks)
    assert normalised(run) == got


def test_shards_then_merge_give_the_gold_run_and_the_merge_never_enters_the_runner(tmp_path, monkeypatch):
    shards = [tmp_path / f"shard-{i}" for i in range(3)]
    for i, d in enumerate(shards):
        assert main(gold_argv(d) + ["--shard", f"{i}/3"]) == 0
        plan = read_plan(d)
        assert plan.config.shard == f"{i}/3" and all(p in plan.benchmark(ECHO_NAME).pairs for p in plan.benchmark(ECHO_NAME).to_run)
    import unified.eval.runner as runner

    def refuse(*args, **kwargs):
        raise AssertionError("--merge entered the runner")

    monkeypatch.setattr(runner, "run_eval", refuse)
    monkeypatch.setattr(runner, "execute", refuse)
    merged = tmp_path / "merged"
    benchmarks = gold_argv(merged)[gold_argv(merged).index("--benchmarks"):][:7]  # the code paths, from this command line
    assert main(["--merge", *map(str, shards), "--out", str(merged), *benchmarks]) == 0
    assert normalised(merged) == expected()
    assert read_plan(merged).config.shard is None and all(not b.to_run for b in read_plan(merged).benchmarks)
    assert json.loads((merged / "summary.json").read_text())["merged_from"]["shards"][0]["dir"] == str(shards[0])


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(gold_argv(out)[:-2] + ["--dry-run", "--shard", "1/2"]) == 0
    text = capsys.readouterr().out
    assert f"# plan: {ECHO_NAME}: 6 tasks x 1 trial(s) = 6 episodes, shard 1/2: " in text
    assert "each episode <= 40 turns, <= 20 calls a user turn, <= 32768 tokens, <= 3600 s" in text
    total = next(line for line in text.splitlines() if line.startswith("# plan: in all: "))
    assert "each policy call <= 512 tokens, thinking on" in total and "estimate: " in total
    assert f"# plan: {FAILING_NAME}: error: ValueError: the task file is corrupt" in text
    assert not any(FAILING in line for line in text.splitlines() if line.startswith("# "))  # one name per benchmark
    assert text.splitlines()[-1] == f"# --out {out}: new run directory"
    assert not out.exists()


class Tau2ShapedAdapter(FixtureAdapter):
    """An outside adapter written to an older contract: its limits name a field AgentLimits no longer has."""

    name = "tau2_shaped"

    def agent_limits(self, limits):
        return AgentLimits(max_tool_calls_per_user_turn=30)  # TypeError: no such field, even under the SDK 0.1 names


class AggregateFails(FixtureAdapter):
    name = "aggregate_fails"

    def aggregate(self, results, *, run=None):
        raise KeyError("pass^k")


class ImportsLate(FixtureAdapter):
    name = "imports_late"

    def tasks(self, split=None, limit=None):
        import tau2_not_installed_here  # noqa: F401

        return super().tasks(split, limit)


def test_an_adapter_failing_in_agent_limits_aggregate_or_an_import_stops_only_itself(tmp_path, capsys):
    out = tmp_path / "run"
    bad = ["test_eval_plan:Tau2ShapedAdapter", "test_eval_plan:AggregateFails", "test_eval_plan:ImportsLate"]
    assert main(["--model", "gold", "--out", str(out), "--benchmarks", bad[0], ECHO, bad[1], bad[2]]) == 0
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]
    assert list(summary) == ["tau2_shaped", ECHO_NAME, "aggregate_fails", "imports_late"]
    tau2 = summary["tau2_shaped"]
    assert tau2["status"] == "error" and tau2["reason"].startswith("agent_limits() raised TypeError")
    assert "max_tool_calls_per_user_turn" in tau2["reason"] and "Traceback" in tau2["traceback"]
    assert summary[ECHO_NAME]["status"] == "ok" and summary[ECHO_NAME]["aggregate"]["score"] == 100.0
    agg = summary["aggregate_fails"]
    assert agg["status"] == "error" and agg["reason"] == "aggregate() raised KeyError: 'pass^k'"
    assert agg["tasks_run"] == 6 and agg["results"] == 6  # its episodes ran and are recorded
    late = summary["imports_late"]
    assert late["status"] == "skipped" and "tau2_not_installed_here" in late["reason"]
    md = (out / "summary.md").read_text()
    assert "error: agent_limits() raised TypeError" in md and "| fixture_echo | 100.00 |" in md
    err = capsys.readouterr().err
    assert "tau2_shaped: failed before any episode: TypeError" in err
    assert "imports_late: skipped: tasks() needs the module 'tau2_not_installed_here'" in err
    assert (out / PLAN_FILE).is_file()
