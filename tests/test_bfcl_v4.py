"""BFCL v4 adapter: gold replay, agreement with bfcl-eval's own runner, isolation, safety."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("bfcl_eval")

from unified.agent.loop import AgentLoop, Job  # noqa: E402
from unified.chatformat.toolcalls import render_tool_call  # noqa: E402
from unified.benchmarks.contract import RunContext  # noqa: E402
from unified.benchmarks.discovery import load_adapter  # noqa: E402
from unified.agent.replay import GoldReplayer  # noqa: E402
from unified.inference.base import PolicyOutput  # noqa: E402
from unified.types import ToolCall  # noqa: E402

from evaluators.bfcl_v4.scoring import checker_call, step_call_strings  # noqa: E402


def _run(adapter, tasks, policy, work_dir=None):
    results, episodes = [], {}

    def keep(result, episode):
        results.append(result)
        episodes[episode.task_id] = episode

    AgentLoop(adapter, policy, max_in_flight=32, on_result=keep,
              run=RunContext(work_dir=work_dir)).run([Job(t) for t in tasks])
    return results, episodes


@pytest.mark.slow
def test_gold_policy_scores_100_on_all_multi_turn(tmp_path):
    adapter = load_adapter("bfcl_v4", categories="multi_turn")
    tasks = adapter.tasks()
    assert len(tasks) == 800
    results, _ = _run(adapter, tasks, GoldReplayer(), work_dir=tmp_path)
    failed = [(r.task_id, r.details.get("error_type"), r.error) for r in results if not r.passed]
    assert not failed, failed[:3]
    agg = adapter.aggregate(results)
    assert agg["groups"]["multi_turn"]["accuracy"] == 100.0 and agg["groups"]["multi_turn"]["complete"]


def test_gold_memory_kv_writes_snapshot_and_passes(tmp_path):
    adapter = load_adapter("bfcl_v4", categories="memory_kv", limit_order="per_category")
    tasks = adapter.tasks(limit=2)
    prereqs = [t for t in tasks if not t.scored]
    assert prereqs and all(t.id in [p.id for p in prereqs] for t in tasks for t in [] )
    results, _ = _run(adapter, tasks, GoldReplayer(), work_dir=tmp_path)
    scored = [r for r in results if not r.details.get("prereq")]
    assert len(scored) == 2 and all(r.passed for r in scored)
    assert list(tmp_path.rglob("*_final.json")), "the prerequisite conversations must leave a memory snapshot"


class GoldWithMalformedCall(GoldReplayer):
    """Gold, with a malformed tool call appended to every answer that has no call (answer text plus
    a call whose JSON does not parse, in one step)."""

    name = model = "gold_malformed"

    def respond(self, adapter, task, messages):
        out = super().respond(adapter, task, messages)
        if "<tool_call>" in out.text:
            return out
        return PolicyOutput(text=out.text + '\n<tool_call>\n{"name": "core_memory_add", "arguments": {\n</tool_call>')


@pytest.mark.slow
def test_memory_answer_with_a_malformed_call_is_scored_from_its_raw_text_as_bfcl_does(tmp_path):
    from types import SimpleNamespace

    from evaluators.bfcl_v4.isolation import import_bfcl

    adapter = load_adapter("bfcl_v4", categories="memory_kv", limit_order="per_category")
    tasks = adapter.tasks(limit=2)
    results, episodes = _run(adapter, tasks, GoldWithMalformedCall(), work_dir=tmp_path)
    scored = [r for r in results if not r.details.get("prereq")]
    assert len(scored) == 2 and all(r.passed for r in scored), [r.details for r in scored]
    # bfcl itself, its Qwen FC handler decoding the raw completions of the same episode, agrees
    qwen = import_bfcl("bfcl_eval.model_handler.local_inference.qwen_fc").QwenFCHandler(
        "Qwen/Qwen3-8B", 0.0, "Qwen/Qwen3-8B-FC", True)
    runner = import_bfcl("bfcl_eval.eval_checker.eval_runner")
    for r in scored:
        task = next(t for t in tasks if t.id == r.task_id)
        raw = [qwen._parse_query_response_prompting(SimpleNamespace(
            choices=[SimpleNamespace(text=s.completion)], usage=SimpleNamespace(prompt_tokens=0, completion_tokens=0)
        ))["model_responses"] for s in episodes[r.task_id].steps]
        assert any("<tool_call>" in text and "answer" in text for text in raw)
        verdict = runner._evaluate_single_agentic_entry(qwen, r.task_id, [raw], task.payload["ground_truth"],
                                                        {"question": []}, "m", "memory_kv")
        assert verdict["valid"] is True
        from evaluators.bfcl_v4.scoring import agentic_steps

        assert isinstance(agentic_steps(episodes[r.task_id], set())[-1], str)


class PerturbedGold(GoldReplayer):
    """Gold answers, corrupted for some tasks (wrong values, dropped calls, plain text), so the
    agreement test sees passes and failures of every kind."""

    name = model = "perturbed"

    def __init__(self, seed=0):
        super().__init__()
        self.rng = random.Random(seed)
        self.mode = {}

    def respond(self, adapter, task, messages):
        out = super().respond(adapter, task, messages)
        mode = self.mode.setdefault(task.id, self.rng.choice(["keep", "keep", "value", "drop", "text"]))
        if mode == "keep" or "<tool_call>" not in out.text:
            return out
        calls = [c for turn in adapter.gold_turns(task) for c in turn]
        if mode == "text":
            return PolicyOutput(text="</think>\n\nI cannot help with that.")
        if mode == "drop" and len(calls) > 1:
            return PolicyOutput(text="</think>\n\n" + render_tool_call(calls[0]))
        if mode == "value":
            bad = [ToolCall(name=c.name, arguments={k: (v + "_x" if isinstance(v, str) else v)
                                                    for k, v in c.arguments.items()}) for c in calls[:1]]
            return PolicyOutput(text="</think>\n\n" + "\n".join(render_tool_call(c) for c in bad))
        return out


AGREEMENT_CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_simple",
                        "live_multiple", "live_relevance", "live_irrelevance", "multi_turn_base",
                        "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]


def _python_call(call: ToolCall) -> str:
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"


def _bfcl_result_line(task, episode, adapter) -> dict:
    """Our episode in bfcl's prompt-mode result format (``[f(a=1), g(b=2)]`` per step)."""
    from evaluators.bfcl_v4.scoring import turns_of

    def step_text(calls, content):
        calls = [c for c in calls if c.parse_error is None]
        return "[" + ", ".join(_python_call(c) for c in calls) + "]" if calls else ""

    turns = turns_of(episode)
    assistant = [m for m in episode.messages if m.role == "assistant"]
    if task.group == "multi_turn":
        result = [[step_text(calls, "") for calls in turn] for turn in turns]
    else:
        result = step_text(assistant[0].tool_calls, assistant[0].content) if assistant else ""
    return {"id": task.id, "result": result}


@pytest.mark.slow
def test_scores_agree_with_bfcl_eval_runner(tmp_path):
    adapter = load_adapter("bfcl_v4", categories=AGREEMENT_CATEGORIES, limit_order="per_category")
    tasks = adapter.tasks(limit=12)
    results, episodes = _run(adapter, tasks, PerturbedGold(), work_dir=tmp_path / "work")
    ours = adapter.aggregate(results)
    accuracies = [v["accuracy"] for v in ours["categories"].values()]
    assert 0 < min(accuracies) or max(accuracies) < 100  # both passes and failures were produced
    assert any(0 < a < 100 for a in accuracies)

    from bfcl_eval.utils import get_directory_structure_by_category

    root = tmp_path / "bfcl_root"
    model = "gpt-4o-2024-11-20"  # a prompt-mode handler: decodes "[f(a=1)]" strings
    for category in AGREEMENT_CATEGORIES:
        folder = root / "result" / model / get_directory_structure_by_category(category)
        folder.mkdir(parents=True, exist_ok=True)
        lines = [_bfcl_result_line(t, episodes[t.id], adapter) for t in tasks if t.split == category]
        (folder / f"BFCL_v4_{category}_result.json").write_text("\n".join(json.dumps(l) for l in lines) + "\n")
    script = ("import sys; from bfcl_eval.eval_checker.eval_runner import main; "
              f"main([{model!r}], {AGREEMENT_CATEGORIES!r}, 'result', 'score', partial_eval=True)")
    env = {**os.environ, "BFCL_PROJECT_ROOT": str(root), "OPENAI_API_KEY": "unused-by-the-checker"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for category in AGREEMENT_CATEGORIES:
        score_file = next((root / "score").rglob(f"BFCL_v4_{category}_score.json"))
        header = json.loads(score_file.read_text().splitlines()[0])
        assert 100 * header["accuracy"] == pytest.approx(ours["categories"][category]["accuracy"]), category
    with open(root / "score" / "data_overall.csv") as handle:
        row = list(csv.DictReader(handle))[0]
    # bfcl --partial-eval still prints an overall, counting every category not run as 0; on a
    # partial run we print none (N/A) and say why, and no group of an incomplete category is shown
    assert float(row["Overall Acc"].rstrip("%")) < ours["score"]
    assert ours["overall"] == "N/A" and not ours["comparable"]
    assert all(g["display_accuracy"] == "N/A" for g in ours["groups"].values())


def test_checker_only_receives_strings_that_cannot_run_anything_else():
    methods = {"cd", "ls"}
    assert step_call_strings([ToolCall(name="cd", arguments={"folder": "a'b"})], methods) == (['cd(folder="a\'b")'], 0)
    # a builtin would run under bfcl's eval: replaced by an undefined name (counted as approximated)
    text, exact = checker_call("__import__(name='os')", methods)
    assert not exact and text.startswith("_unified_undefined")
    assert not checker_call("open(file='x', mode='w')", methods)[1]
    assert not checker_call("ls(a=os.system('id'))", methods)[1]
    # cannot compile (nothing runs): passed as bfcl would, it records the SyntaxError itself
    assert checker_call("cd(folder); import os; (=1)", methods) == ("cd(folder); import os; (=1)", True)
    # an unknown name that resolves to nothing: bfcl's NameError, exactly
    assert checker_call("frobnicate(x=1)", methods) == ("frobnicate(x=1)", True)
    assert checker_call("ls(a=nan)", methods) == ("ls(a=nan)", True)
    assert step_call_strings([ToolCall(name="ls", arguments={}, parse_error="bad")], methods) == ([], 0)


def test_unknown_tool_is_never_executed(tmp_path):
    adapter = load_adapter("bfcl_v4", categories="multi_turn_base", limit_order="per_category")
    task = adapter.tasks(limit=1)[0]
    with adapter.open(task) as env:
        obs = env.step([ToolCall(name="eval", arguments={"x": "1"}, id="c0"),
                        ToolCall(name="ls", arguments={}, id="c1")])
    assert obs[0].is_error and "not defined" in obs[0].content
    assert not obs[1].is_error


def test_web_search_without_key_is_a_recorded_skip(monkeypatch):
    monkeypatch.delenv("SERPAPI_API_KEY", raising=False)
    adapter = load_adapter("bfcl_v4", categories="web_search_base", limit_order="per_category")
    tasks = adapter.tasks(limit=2)
    assert all("SERPAPI_API_KEY" in t.skip_reason for t in tasks)
    results, _ = _run(adapter, tasks, GoldReplayer())
    assert all(r.skipped for r in results)
    assert adapter.aggregate(results)["skipped"] == 2


def test_bfcl_writes_only_under_its_private_project_root():
    import bfcl_eval.constants.eval_config as cfg

    site = Path(cfg.PACKAGE_ROOT).parent
    assert not Path(cfg.PROJECT_ROOT).resolve().is_relative_to(site.resolve())


@pytest.mark.slow
def test_memory_vector_loads_offline(tmp_path):
    code = ("from evaluators.bfcl_v4.isolation import import_memory_vector; m = import_memory_vector(); "
            "print(m.ENCODER_DIM)")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty_hf")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("384")


def test_fresh_interpreter_multi_turn_gold_has_no_import_race(tmp_path):
    """A fresh ``python -m unified.eval`` (nothing imported yet, the production ``--max-in-flight``
    default) replays multi-turn gold: episodes that load MathAPI (which imports mpmath) run beside
    episodes already calling tools. Before the fix the guard read ``sys.modules["mpmath"]`` while
    another thread was still importing it and 2-15 of these 24 episodes errored."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "unified.eval", "--benchmarks", "bfcl_v4", "--model", "gold",
                           "--set", "benchmarks.bfcl_v4.categories=multi_turn_base", "--limit", "24",
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]["bfcl_v4"]
    assert summary["tasks_errored"] == 0, summary["error_reasons"]
    assert summary["tasks_run"] == 24 and summary["aggregate"]["score"] == 100.0
