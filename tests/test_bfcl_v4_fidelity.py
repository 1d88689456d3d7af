"""BFCL v4 as bfcl scores it: partial runs, unknown functions, keyword argument names, inference limits."""

from __future__ import annotations

import pytest

pytest.importorskip("bfcl_eval")

from unified.benchmarks.discovery import load_adapter  # noqa: E402
from unified.types import EpisodeResult  # noqa: E402

from evaluators.bfcl_v4 import data, scoring  # noqa: E402


def _perfect(tasks):
    return [EpisodeResult(benchmark="bfcl_v4", task_id=t.id, trial=0, score=1.0, passed=True,
                          details={"category": t.payload["category"]}) for t in tasks if t.scored]


@pytest.fixture(scope="module")
def adapter():
    return load_adapter("bfcl_v4")


def test_partial_run_prints_no_official_overall(adapter):
    agg = adapter.aggregate(_perfect(adapter.tasks(limit=5)))
    assert agg["overall"] == "N/A" and agg["complete"] is False and agg["comparable"] is False
    assert agg["score"] == 100.0 and "not BFCL's overall" in agg["metric"]  # accuracy over the 5 tasks run
    assert all(g["display_accuracy"] == "N/A" and g["accuracy"] is None for g in agg["groups"].values())
    assert any(r.startswith("partial: bfcl's overall needs every category") for r in agg["not_comparable_because"])


def test_one_task_per_category_is_not_complete(adapter):
    one_each = [next(t for t in data.load_category(c) if t.scored) for c in data.resolve_categories("all")]
    agg = adapter.aggregate(_perfect(one_each))
    assert agg["complete"] is False and agg["overall"] == "N/A"
    assert agg["categories"]["simple_python"] == {"accuracy": 100.0, "n": 1, "size": 400, "complete": False}


def test_complete_groups_show_numbers_and_the_rest_na():
    sizes = data.dataset_sizes(data.resolve_categories("all"))
    full_multi_turn = {c: (0.5, sizes[c]) for c in scoring.GROUP_MEMBERS["multi_turn"]}
    agg = scoring.aggregate_categories({**full_multi_turn, "simple_python": (1.0, 3)}, sizes)
    assert agg["groups"]["multi_turn"] == {"accuracy": 50.0, "display_accuracy": 50.0, "complete": True}
    assert agg["groups"]["non_live"]["display_accuracy"] == "N/A" and agg["overall"] is None
    everything = {c: (1.0, sizes[c]) for cats in scoring.GROUP_MEMBERS.values() for c in cats}
    full = scoring.aggregate_categories(everything, sizes)
    assert full["complete"] and full["overall"] == pytest.approx(100.0)


def test_web_search_without_key_is_not_ok(adapter, monkeypatch):
    monkeypatch.delenv("SERPAPI_API_KEY", raising=False)
    tasks = data.select_tasks(["web_search_base"], 2)
    results = [EpisodeResult(benchmark="bfcl_v4", task_id=t.id, trial=0, score=0.0, skipped=t.skip_reason,
                             details={"category": "web_search_base"}) for t in tasks]
    agg = adapter.aggregate(results)
    assert any(r.startswith("key missing: web search") for r in agg["not_comparable_because"])
    assert agg["comparable"] is False


# --------------------------------------------------------------------------------------
# inference under bfcl's rules, and scoring agreement with bfcl's own handler + checker

import copy  # noqa: E402
import json  # noqa: E402

from unified.benchmarks.contract import AgentLimits, RunContext  # noqa: E402
from unified.agent.loop import AgentLoop, Job  # noqa: E402
from unified.agent.replay import Replayer  # noqa: E402
from unified.inference.base import PolicyOutput  # noqa: E402

DONE = "</think>\n\nDone."


def _qwen_call(name, arguments) -> str:
    """A tool call in the format bfcl's Qwen FC handler extracts (``<tool_call>\\n{json}\\n</tool_call>``)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _step(*calls: str) -> str:
    return "</think>\n\n" + "\n".join(calls)


class ScriptedPolicy(Replayer):
    """Per task id, per user turn, the completions of its steps; then "Done." (ends the turn)."""

    name = model = "scripted"

    def __init__(self, scripts):
        self.scripts = scripts

    def respond(self, adapter, task, messages):
        turn = sum(1 for m in messages if m["role"] == "user") - 1
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        step = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        script = self.scripts.get(task.id, [])
        steps = script[turn] if turn < len(script) else []
        return PolicyOutput(text=steps[step] if step < len(steps) else DONE)


def _run_scripted(adapter, tasks, scripts, tmp_path, limits=None):
    results, episodes = {}, {}

    def keep(result, episode):
        results[result.task_id] = result
        episodes[episode.task_id] = episode

    AgentLoop(adapter, ScriptedPolicy(scripts), max_in_flight=4, on_result=keep,
              limits=adapter.agent_limits(limits or AgentLimits()),
              run=RunContext(work_dir=tmp_path)).run([Job(t) for t in tasks])
    return results, episodes


def _gold_steps(adapter, task):
    return [[_step(*[_qwen_call(c.name, c.arguments) for c in turn])] if turn else [] for turn in adapter.gold_turns(task)]


@pytest.fixture(scope="module")
def multi_turn():
    adapter = load_adapter("bfcl_v4", categories="multi_turn_base", limit_order="per_category")
    return adapter, adapter.tasks(limit=6)


def test_a_20_step_turn_is_accepted_and_no_40_call_cap(multi_turn, tmp_path):
    adapter, tasks = multi_turn
    task = tasks[0]
    turns = len(task.payload["entry"]["question"])
    script = {task.id: [[_step(_qwen_call("pwd", {}))] * 20 for _ in range(turns)]}
    results, episodes = _run_scripted(adapter, [task], script, tmp_path)
    episode = episodes[task.id]
    assert episode.stop_reason == "answer", episode.stop_reason  # the run's 20-step / 40-call limits did not cut it
    assert len(episode.steps) == 21 * turns > 40
    assert results[task.id].details["error_type"] != "multi_turn:force_terminated"
    # 21 executed steps in one turn: bfcl force-quits the entry (fewer turns than the ground truth)
    script = {task.id: [[_step(_qwen_call("pwd", {}))] * 21]}
    results, episodes = _run_scripted(adapter, [task], script, tmp_path / "b")
    assert episodes[task.id].stop_reason == "max_steps_per_turn" and len(episodes[task.id].steps) == 21
    assert results[task.id].details["error_type"] == "multi_turn:force_terminated"


def test_a_step_of_malformed_calls_ends_the_turn(multi_turn, tmp_path):
    adapter, tasks = multi_turn
    task = tasks[0]
    bad = _step("<tool_call>\n{\"name\": \"ls\", \"arguments\": {oops}\n</tool_call>")
    results, episodes = _run_scripted(adapter, [task], {task.id: [[bad, _step(_qwen_call("pwd", {}))]]}, tmp_path)
    messages = episodes[task.id].messages
    first_assistant = next(i for i, m in enumerate(messages) if m.role == "assistant")
    assert messages[first_assistant + 1].role == "user"  # no error observation, no second step in this turn
    assert episodes[task.id].steps[0].extras["turn_ended_by"] == "malformed_calls"
    unified = load_adapter("bfcl_v4", categories="multi_turn_base", limit_order="per_category", inference="unified")
    _, episodes = _run_scripted(unified, [task], {task.id: [[bad, _step(_qwen_call("pwd", {}))]]}, tmp_path / "u")
    messages = episodes[task.id].messages
    first_assistant = next(i for i, m in enumerate(messages) if m.role == "assistant")
    assert messages[first_assistant + 1].role == "tool" and "could not parse" in messages[first_assistant + 1].content


def _bfcl_verdict(task, episode) -> dict:
    """bfcl's own scoring of our transcript: its Qwen FC handler decodes each step's completion and
    ``eval_runner._evaluate_single_multi_turn_entry`` checks it (private model name)."""
    from evaluators.bfcl_v4.isolation import import_bfcl, private_checker_namespace

    qwen = import_bfcl("bfcl_eval.model_handler.local_inference.qwen_fc")
    runner = import_bfcl("bfcl_eval.eval_checker.eval_runner")
    handler = qwen.QwenFCHandler("Qwen/Qwen3-8B-FC", 0.0, "Qwen/Qwen3-8B-FC", True)
    turns, steps = [], iter(episode.steps)
    for message in episode.messages:
        if message.role == "user":
            turns.append([])
        elif message.role == "assistant":
            turns[-1].append(next(steps).completion.split("</think>")[-1].lstrip("\n"))
    with private_checker_namespace() as model_name:
        return runner._evaluate_single_multi_turn_entry(
            handler, task.id, turns, task.payload["ground_truth"], copy.deepcopy(task.payload["entry"]), model_name,
            task.payload["category"])


def test_same_transcripts_same_verdicts_as_bfcl(multi_turn, tmp_path):
    """Unknown functions (alone in a step, or beside gold calls), a Python keyword as an argument
    name, a held-out method called, a malformed step: ours == bfcl's handler + checker."""
    adapter, tasks = multi_turn
    scripts = {}
    for i, task in enumerate(tasks):
        gold = _gold_steps(adapter, task)
        first = next(k for k, turn in enumerate(gold) if turn)
        if i == 0:
            gold[first][0] += "\n" + _qwen_call("frobnicate", {"x": 1})
        elif i == 1:
            gold[first].insert(0, _step(_qwen_call("ls", {"class": 1})))
        elif i == 2:
            gold[first] = [_step(_qwen_call("frobnicate", {}))]
        elif i == 3:
            gold[first].insert(0, _step(_qwen_call("frobnicate", {"lambda": "x", "y": 2})))
        elif i == 4:
            gold[first].insert(0, _step("<tool_call>\n{\"name\": \"ls\", \"arguments\": {oops}\n</tool_call>"))
        scripts[task.id] = gold
    results, episodes = _run_scripted(adapter, tasks, scripts, tmp_path)
    assert not [r.error for r in results.values() if r.error]  # a keyword argument name no longer crashes scoring
    for task in tasks:
        theirs = _bfcl_verdict(task, episodes[task.id])
        ours = results[task.id]
        assert ours.passed == theirs["valid"], (task.id, ours.details, theirs.get("error"))
        if not theirs["valid"]:
            assert ours.details["error_type"] == theirs["error"]["error_type"], task.id
    assert {results[t.id].passed for t in tasks} == {True, False}  # both verdicts occur
