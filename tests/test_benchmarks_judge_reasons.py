"""Every judge that is not the benchmark's own is named in ``not_comparable_because`` (Claw-Eval,
QwenClawBench, WideSearch on their fixture checkouts / data), and Claw-Eval's system-prompt reason
counts only episodes that scored."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.claw_eval import ClawEvalAdapter
from evaluators.qwenclawbench import QwenClawBenchAdapter
from evaluators.widesearch import WideSearchAdapter
from unified.benchmarks import judge_reason
from unified.types import EpisodeResult

FIXTURES = Path(__file__).parent / "fixtures"
OTHER = "openai:http://127.0.0.1:9/v1#qwen3-8b"


def _result(benchmark: str, **details) -> EpisodeResult:
    return EpisodeResult(benchmark=benchmark, task_id="t", trial=0, score=1.0, details=details)


def test_judge_reason_names_everything_but_the_official_model():
    assert judge_reason("openai:https://openrouter.ai/api/v1#google/gemini-3-flash-preview",
                        ["google/gemini-3-flash-preview"]) is None
    assert judge_reason("openai:http://x/v1#GPT-4.1-2025-04-14", ["gpt-4.1-2025-04-14"]) is None
    assert "embedded" in judge_reason("embedded", ["gpt-4.1-2025-04-14"])
    assert OTHER in judge_reason(OTHER, ["gpt-4.1-2025-04-14"])
    assert "gpt-4.1-2025-04-14" in judge_reason("/ckpt/gpt-4.1-2025-04-14", ["gpt-4.1-2025-04-14"])  # a local path


@pytest.mark.parametrize("make, details", [
    (lambda judge: ClawEvalAdapter(root=str(FIXTURES / "claw_eval" / "fixture_checkout"), judge=judge),
     {"prompts": "checkout", "split": "general"}),
    (lambda judge: QwenClawBenchAdapter(root=str(FIXTURES / "qwenclawbench" / "fixture_checkout"), judge=judge),
     {"category": "c", "llm_judge": {"protocol": "checkout"}}),
])
def test_a_non_official_judge_is_named(make, details):
    for judge in (OTHER, "embedded"):
        adapter = make(judge)
        agg = adapter.aggregate([_result(adapter.name, **details)])
        named = [r for r in agg["not_comparable_because"] if r.startswith(("judge:", "judge (general):"))]
        assert len(named) == 1 and judge in named[0], agg["not_comparable_because"]


def test_widesearch_names_each_judge_that_ran():
    adapter = WideSearchAdapter(data=str(FIXTURES / "widesearch"), judge="none")
    rows = [_result("widesearch", judge=OTHER, f1_by_item=1.0), _result("widesearch", judge="embedded")]
    reasons = adapter.aggregate(rows)["not_comparable_because"]
    assert any(OTHER in r for r in reasons) and any(r.startswith("judge: embedded") for r in reasons)
    official = _result("widesearch", judge="openai:http://h/v1#gpt-4.1-2025-04-14")
    assert not any(r.startswith("judge:") for r in adapter.aggregate([official])["not_comparable_because"])


def test_claw_eval_system_prompt_reason_counts_only_scored_episodes():
    adapter = ClawEvalAdapter(root=str(FIXTURES / "claw_eval" / "fixture_checkout"), judge=OTHER)
    rows = [_result("claw_eval", prompts="ours", split="general"),
            EpisodeResult(benchmark="claw_eval", task_id="u", trial=0, score=0.0, error="crashed", details={}),
            EpisodeResult(benchmark="claw_eval", task_id="v", trial=0, score=0.0, details={
                "prompts": "ours", "grader_error": "grader timed out"}),
            EpisodeResult(benchmark="claw_eval", task_id="w", trial=0, score=0.0, skipped="no key", details={})]
    reasons = adapter.aggregate(rows)["not_comparable_because"]
    assert any(r.startswith("1 episodes used our agent system prompt") for r in reasons), reasons


CLAW_FIXTURE = FIXTURES / "claw_eval" / "fixture_checkout"
OPUS = "openai:https://openrouter.ai/api/v1#anthropic/claude-opus-4.6"
GEMINI = "openai:https://openrouter.ai/api/v1#google/gemini-3-flash-preview"


def _claw_rows():
    return [_result("claw_eval", prompts="checkout", split="general", user_rounds=0, user_model=None),
            _result("claw_eval", prompts="checkout", split="multi_turn", user_rounds=2, user_model="x")]


def test_claw_eval_names_each_judge_and_user_against_the_checkouts_config_of_its_split():
    """The checkout grades general tasks with gemini-3-flash and multi-turn ones with
    claude-opus-4.6, which also plays their user (its config_*.yaml): each judge and user that is
    not the split's own is named with the split, and the official ones are not."""
    adapter = ClawEvalAdapter(root=str(CLAW_FIXTURE), judge=OPUS, user_model="embedded")
    agg = adapter.aggregate(_claw_rows())
    reasons = [r for r in agg["not_comparable_because"] if r.startswith(("judge", "simulated user"))]
    assert reasons == [f"judge (general): {OPUS}, not the benchmark's own (google/gemini-3-flash-preview)",
                       "simulated user (multi_turn): embedded (the embedded default model), not the benchmark's own "
                       "(anthropic/claude-opus-4.6)"], reasons
    assert agg["grading_models"]["multi_turn"] == {
        "config": "config_user_agent.yaml", "judge": OPUS, "official_judge": "anthropic/claude-opus-4.6",
        "user": "embedded", "official_user": "anthropic/claude-opus-4.6"}
    assert "user" not in agg["grading_models"]["general"]
    adapter = ClawEvalAdapter(root=str(CLAW_FIXTURE), judge=GEMINI, user_model=OPUS)
    reasons = [r for r in adapter.aggregate(_claw_rows())["not_comparable_because"] if "(multi_turn)" in r
               or "(general)" in r]
    assert reasons == [f"judge (multi_turn): {GEMINI}, not the benchmark's own (anthropic/claude-opus-4.6)"]


def test_claw_eval_says_when_the_checkout_has_no_config_for_a_split(tmp_path):
    import shutil

    checkout = tmp_path / "checkout"
    shutil.copytree(CLAW_FIXTURE, checkout)
    (checkout / "config_user_agent.yaml").unlink()
    agg = ClawEvalAdapter(root=str(checkout), judge=OPUS, user_model=OPUS).aggregate(_claw_rows())
    named = [r for r in agg["not_comparable_because"] if "(multi_turn)" in r]
    assert named == [f"judge (multi_turn): {OPUS}, not the benchmark's own (a hosted LLM; config_user_agent.yaml "
                     "is not in the checkout)",
                     f"simulated user (multi_turn): {OPUS}, not the benchmark's own (a hosted LLM; "
                     "config_user_agent.yaml is not in the checkout)"], named
