"""Scoring predictions with the rubric judge of unified.rewards: the mapping (with a fixture judge
backend that answers fixed scores) and the whole path through a real OpenAI-compatible server on
loopback serving a tiny local model."""

from __future__ import annotations

import re
import pytest

from test_trace_fixtures import fixture_weather_episode
from unified.inference.judge import Judge, JudgeCache
from unified.trace import trace_run
from unified.trace.judge import RubricJudge, domain_of


def unfenced(prompt: str) -> str:
    """A judge prompt without its data fences (``unified.text.fence_data``), for reading what it holds."""
    return re.sub(r"\n?<<<END DATA [^>\n]*>>>", "", re.sub(r"<<<BEGIN DATA [^>\n]*>>>\n", "", prompt))


class FixtureJudge(Judge):
    """No model: answers every request with the same rubric block (factuality given), keeps the requests."""

    def __init__(self, factuality: int, name: str = "fixture-judge", cache: JudgeCache | None = None) -> None:
        super().__init__(model=None, name=name, cache=cache)
        self.factuality, self.requests = factuality, []

    def answer(self, requests):
        self.requests += requests
        return [f"<scores>\nformat: 5\nfactuality: {self.factuality}\nconsistency: 5\nrealism: 5\nquality: 5\n</scores>"
                for _ in requests]


def test_judge_scores_replace_rule_scores(tmp_path):
    backend = FixtureJudge(factuality=2, cache=JudgeCache(tmp_path / "cache"))
    judge = RubricJudge(judge=backend)
    run = trace_run([fixture_weather_episode()], judge=judge)
    preds = run.predictions
    assert len(backend.requests) == judge.requests_sent == 5  # every aligned prediction
    assert all(p.method == "judge" for p in preds)
    assert all(p.correct is False for p in preds)  # factuality 2 < 4
    assert preds[0].score == pytest.approx((22 / 5 - 1) / 4)
    # the judge sees the claim, the real observation, the call as action and the earlier turns
    step1 = unfenced(backend.requests[2][1]["content"])
    assert "### Predicted observation (to grade)\n65" in step1
    assert "### Reference observation (real)\n64.4" in step1
    assert "<function=convert>" in step1.split("### New action", 1)[1]
    assert "### Turn 1 action" in step1 and "get_weather" in step1.split("### New action", 1)[0]
    # a rerun is answered from the cache
    again = RubricJudge(judge=FixtureJudge(2, cache=JudgeCache(tmp_path / "cache")))
    trace_run([fixture_weather_episode()], judge=again)
    assert again.judge.calls == 0


def test_judge_correct_when_factuality_high():
    run = trace_run([fixture_weather_episode()], judge=RubricJudge(judge=FixtureJudge(factuality=5)))
    assert run.stats()["accuracy"] == 1.0 and run.stats()["mean_score"] == 1.0


def test_domain_of_benchmarks():
    assert [domain_of(b) for b in ("bfcl_v4", "terminal_bench_2", "swe_bench_pro", "widesearch", "claw_eval")] == [
        "mcp", "terminal", "swe", "search", "mcp"]


@pytest.mark.slow
def test_judge_through_a_real_local_server(tiny_judge_checkpoint, tmp_path):
    """A tiny random model is a bad judge: its answers don't parse, and the rule verdicts stay."""
    from unified.inference.server import LocalOpenAIServer

    rule_only = trace_run([fixture_weather_episode()])
    with LocalOpenAIServer(str(tiny_judge_checkpoint), max_new_tokens=8) as server:
        judge = RubricJudge(server.spec, cache_dir=str(tmp_path / "cache"), judge_max_tokens=8)
        run = trace_run([fixture_weather_episode()], judge=judge)
    assert judge.requests_sent == 5 and judge.judge.calls == 5
    for p, q in zip(run.predictions, rule_only.predictions):
        if p.method == "judge":  # only if the random model happened to write a valid block
            continue
        assert p.method == "judge:unparsed" and p.correct == q.correct and "rule:" in p.detail
