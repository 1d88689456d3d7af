"""The adapter contract: discovery by entry point, suites, skips for missing modules."""

from __future__ import annotations

import pytest

from unified.agent.prompting import PROMPTING, PromptingModule, make_prompting
from unified.contracts import BenchmarkUnavailable, Environment
from unified.eval.adapter import SUITES, expand_benchmarks, load_adapter, registered_benchmarks
from unified.registry import UnknownNameError
from unified.types import Message, Observation, ToolCall


def test_all_suite_benchmarks_are_registered_by_entry_point():
    assert set(SUITES["all"]) <= set(registered_benchmarks())
    assert SUITES["ood"] == ["claw_eval", "qwenclawbench", "bfcl_v4"]


def test_unknown_benchmark_says_did_you_mean():
    with pytest.raises(UnknownNameError) as info:
        load_adapter("bfcl4")
    assert "bfcl_v4" in str(info.value) and "Did you mean" in str(info.value)


def test_missing_module_is_not_yet_available(monkeypatch):
    import importlib.metadata as md

    fake = md.EntryPoint(name="zz_bench", value="evaluators.zz_not_written:Adapter", group="unified.benchmarks")
    monkeypatch.setattr("unified.eval.adapter.registered_benchmarks", lambda: {"zz_bench": fake})
    with pytest.raises(BenchmarkUnavailable) as info:
        load_adapter("zz_bench")
    assert info.value.reason == "not yet available"
    assert info.value.line("zz_bench").startswith("zz_bench: skipped: not yet available")


def test_expand_benchmarks():
    assert expand_benchmarks("ood", ["bfcl_v4,widesearch"]) == ["claw_eval", "qwenclawbench", "bfcl_v4", "widesearch"]
    with pytest.raises(UnknownNameError):
        expand_benchmarks("oood")


def test_environment_always_stops():
    events = []

    class Broken(Environment):
        def start(self):
            events.append("start")
            raise RuntimeError("service did not come up")

        def stop(self):
            events.append("stop")

    with pytest.raises(RuntimeError):
        with Broken():
            pass
    assert events == ["start", "stop"]

    class Fine(Broken):
        def start(self):
            events.append("start")

    events.clear()
    with pytest.raises(ValueError):
        with Fine():
            raise ValueError("episode crashed")
    assert events == ["start", "stop"]


def test_act_is_identity_and_registry_lists_names():
    act = make_prompting("act")
    messages = [Message(role="user", content="hi")]
    assert act.system_prompt("base") == "base"
    assert act.before_policy(messages) is messages
    assert act.parse("<think>x</think>answer") == ("<think>x</think>answer", {})
    assert isinstance(act, PromptingModule) and "act" in PROMPTING
    assert act.after_observations(None, [Observation(call_id="0", content="")]) is None  # type: ignore[arg-type]
    with pytest.raises(UnknownNameError):
        make_prompting("predict_then_actt")
    assert ToolCall(name="f").arguments == {}
