"""BFCL v4 as bfcl scores it: partial runs, unknown functions, keyword argument names, inference limits."""

from __future__ import annotations

import pytest

pytest.importorskip("bfcl_eval")

from unified.eval.adapter import load_adapter  # noqa: E402
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
