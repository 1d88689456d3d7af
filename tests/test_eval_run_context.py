"""What the runner tells an adapter about the run comes as arguments (RunContext), and ``--model gold``
is the loop's replayer, not a model fed the adapter through its requests."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from fixture_eval_bench import FixtureAdapter
from unified.agent.loop import AgentLoop, Job
from unified.agent.replay import GoldReplayer, replayer_for
from unified.benchmarks import RunContext, SDKDeprecationWarning
from unified.eval.config import EvalConfig
from unified.eval.runner import run_eval
from unified.inference.base import PolicyRequest, make_chat_model
from unified.inference.spec import SpecError

SEEN: dict[str, list] = {}


class RecordingAdapter(FixtureAdapter):
    """Keeps every RunContext it is given (fixture adapter, two trials by protocol)."""

    name = "fixture_recording"
    runs_default = 2

    def open(self, task, *, run=None):
        SEEN.setdefault("open", []).append(run)
        return super().open(task)

    def aggregate(self, results, *, run=None):
        SEEN.setdefault("aggregate", []).append(run)
        return super().aggregate(results, run=run)


class OldContractAdapter(FixtureAdapter):
    """An adapter of the earlier contract: open and aggregate without ``run``, reading attributes."""

    name = "fixture_old_contract"

    def open(self, task):
        SEEN.setdefault("old_open", []).append(getattr(self, "work_dir", None))
        return super().open(task)

    def aggregate(self, results):
        SEEN.setdefault("old_runs", []).append(getattr(self, "runs_requested", None))
        return super().aggregate(results)


def test_the_runner_passes_work_dir_and_runs_and_sets_no_attribute(tmp_path):
    SEEN.clear()
    spec = "test_eval_run_context:RecordingAdapter"
    summary = run_eval(EvalConfig(benchmarks=[spec], model="gold", out=str(tmp_path), runs=1,
                                  benchmark_config={spec: {"n": 2}}))
    assert summary.benchmarks["fixture_recording"].tasks_run == 2
    work = tmp_path / "fixture_recording" / "work"
    # each open() also learns the policy's sampling and backend (issue 43: request fields named per run)
    assert [(c.work_dir, c.runs, c.policy_backend) for c in SEEN["open"]] == [(work, 1, "gold")] * 2
    assert all(c.sampling is not None for c in SEEN["open"])
    assert [(c.work_dir, c.runs) for c in SEEN["aggregate"]] == [(work, 1)]
    assert "work_dir" not in vars(RecordingAdapter) and "runs_requested" not in vars(RecordingAdapter)


def test_an_adapter_of_the_earlier_contract_still_runs_with_a_deprecation_warning(tmp_path):
    SEEN.clear()
    spec = "test_eval_run_context:OldContractAdapter"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = run_eval(EvalConfig(benchmarks=[spec], model="gold", out=str(tmp_path),
                                      benchmark_config={spec: {"n": 1}}))
    assert summary.benchmarks["fixture_old_contract"].status == "ok"
    assert SEEN["old_open"] == [tmp_path / "fixture_old_contract" / "work"] and SEEN["old_runs"] == [1]
    assert any(issubclass(w.category, SDKDeprecationWarning) and "run: RunContext" in str(w.message) for w in caught)


def test_outside_a_run_the_context_is_empty_and_trials_are_the_protocols():
    adapter = RecordingAdapter(n=1)
    assert RunContext().work_dir is None and RunContext().trials(adapter) == 2
    assert RunContext(runs=1).trials(adapter) == 1


def test_gold_is_no_chat_model_and_requests_carry_no_adapter():
    with pytest.raises(SpecError, match="not a chat model"):
        make_chat_model("gold")
    assert isinstance(replayer_for("gold"), GoldReplayer) and replayer_for("embedded") is None
    assert "context" not in {f.name for f in dataclasses.fields(PolicyRequest)}


def test_the_gold_replay_scores_every_fixture_task_in_the_loop():
    adapter = FixtureAdapter(n=4, crash=1)
    results = {r.task_id: r for r in AgentLoop(adapter, GoldReplayer(), max_in_flight=2).run(
        [Job(t, trial) for t in adapter.tasks() for trial in range(2)])}
    assert all(results[f"echo_{i}"].passed for i in range(4))
    assert "fixture environment crashed" in results["crash_0"].error


def test_a_replayer_that_raises_ends_only_its_own_episode():
    class Broken(GoldReplayer):
        def respond(self, adapter, task, messages):
            if task.id == "echo_1":
                raise RuntimeError("no ground truth for echo_1")
            return super().respond(adapter, task, messages)

    adapter = FixtureAdapter(n=3)
    results = {r.task_id: r for r in AgentLoop(adapter, Broken()).run([Job(t) for t in adapter.tasks()])}
    assert results["echo_0"].passed and results["echo_2"].passed
    assert "no ground truth for echo_1" in results["echo_1"].error
