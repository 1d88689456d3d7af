"""WideSearch adapter: the official table metrics on hand-computed cases, the fixture tasks
(tests/fixtures/widesearch, our own tasks in the dataset's format) with gold at 100%, the corpus
search backend, and the world-model-simulated backend on a real loopback server (tiny model)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evaluators.widesearch import WideSearchAdapter, load_widesearch
from evaluators.widesearch.metrics import date_near, evaluate_table, extract_table, number_near
from unified.agent.loop import AgentLoop, Job
from unified.policy.gold import GoldPolicy
from unified.types import Episode, Message, ToolCall

FIXTURES = Path(__file__).parent / "fixtures" / "widesearch"
EVAL = {"unique_columns": ["planet"], "required": ["planet", "order_from_sun", "has_rings"],
        "eval_pipeline": {"planet": {"preprocess": ["norm_str"], "metric": ["exact_match"]},
                          "order_from_sun": {"preprocess": ["extract_number"], "metric": ["number_near"],
                                             "criterion": 0.0},
                          "has_rings": {"preprocess": ["norm_str"], "metric": ["exact_match"]}}}
GOLD = pd.DataFrame({"planet": ["Mercury", "Venus", "Earth", "Mars"], "order_from_sun": [1, 2, 3, 4],
                     "has_rings": ["no", "no", "no", "no"]})


def test_f1_by_item_and_by_row_match_a_hand_computation():
    # 3 answer rows: Mercury all right, Venus wrong rings, Pluto not in the gold table.
    answer = ("Here you go:\n```markdown\n| Planet | Order_From_Sun | has_rings |\n|---|---|---|\n"
              "| **Mercury** | 1st | No |\n| Venus | 2 | yes |\n| Pluto | 9 | no |\n```")
    s = evaluate_table(answer, GOLD, EVAL)
    # matched rows: Mercury (3/3 items), Venus (2/3 items); TP_item = 5, TP_row = 1
    assert s.precision_by_item == pytest.approx(5 / 9) and s.recall_by_item == pytest.approx(5 / 12)
    assert s.f1_by_item == pytest.approx(2 * (5 / 9) * (5 / 12) / (5 / 9 + 5 / 12))
    assert s.precision_by_row == pytest.approx(1 / 3) and s.recall_by_row == pytest.approx(1 / 4)
    assert s.f1_by_row == pytest.approx(2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4)) and s.score == 0.0
    perfect = "| planet | order_from_sun | has_rings |\n|--|--|--|\n" + "".join(
        f"| {p} | {o} | no |\n" for p, o in zip(GOLD.planet, GOLD.order_from_sun))
    assert evaluate_table(perfect, GOLD, EVAL).f1_by_item == 1.0 and evaluate_table(perfect, GOLD, EVAL).score == 1.0
    assert evaluate_table("no table here", GOLD, EVAL).f1_by_item == 0.0
    wrong_cols = "| planet | rank |\n|--|--|\n| Mercury | 1 |\n| Venus | 2 |\n"
    assert "columns" in evaluate_table(wrong_cols, GOLD, EVAL).msg


def test_cell_metrics_and_table_extraction():
    assert number_near("105", "100", 0.05) == 1.0 and number_near("106", "100", 0.05) == 0.0
    assert number_near("50%", "0.5", 0.0) == 1.0
    assert date_near("January 20, 2015", "2015-02-15") == 1.0 and date_near("2015-05-15", "2015-01-01") == 0.0
    df = extract_table("| a | b |\n|---|---|\n| 1 | x |\n")
    assert list(df.columns) == ["a", "b"] and df.iloc[0].tolist() == ["1", "x"]


def test_fixture_gold_answers_score_100_percent_and_results_name_the_search_backend():
    adapter = WideSearchAdapter(data=str(FIXTURES))
    tasks = adapter.tasks()
    assert [t.id for t in tasks] == ["fixture_ws_en_001", "fixture_ws_en_002"]
    results = AgentLoop(adapter, GoldPolicy()).run([Job(t, 0) for t in tasks])
    assert all(r.score == 1.0 and r.details["f1_by_row"] == 1.0 for r in results), [r.details for r in results]
    assert {r.details["search_backend"] for r in results} == {"local_corpus"}
    summary = adapter.aggregate(results)
    assert summary["score"] == 100.0 and summary["f1_by_row"] == 100.0 and not summary["simulated"]


def test_corpus_search_and_page_tools():
    adapter = WideSearchAdapter(data=str(FIXTURES))
    task = adapter.tasks()[1]
    with adapter.open(task) as env:
        obs = env.step([ToolCall("search", {"query": "Rust programming language version 1.0"}, "c0"),
                        ToolCall("open_page", {"url": "https://fixture.example/languages/rust"}, "c1"),
                        ToolCall("fly", {}, "c2")])
        assert "[Url] https://fixture.example/languages/rust" in obs[0].content.split("\n\n")[0]
        assert "2015-05-15" in obs[1].content and obs[2].is_error
        episode = Episode(benchmark="widesearch", task_id=task.id, messages=[Message(
            role="assistant", content="| language | first_release_year | v1_release_date |\n|-|-|-|\n"
                                      "| Rust | 2010 | May 2015 |\n")])
        result = adapter.score(task, episode, env)
        # one of five rows, all three items right: P_item = 1, R_item = 3/15
        assert result.details["precision_by_item"] == 1.0 and result.details["recall_by_item"] == pytest.approx(0.2)


def test_broken_rows_and_missing_search_backend_are_reported(tmp_path, monkeypatch):
    (tmp_path / "widesearch.jsonl").write_text('{"instance_id": "a", "query": "q", "evaluation": "{}"}\nnot json\n')
    (tmp_path / "widesearch_gold").mkdir()
    tasks, broken, corpus = load_widesearch(tmp_path)
    assert tasks == [] and corpus is None
    assert "widesearch.jsonl:1" in broken[0][1] and "widesearch.jsonl:2" in broken[1][1]
    monkeypatch.delenv("BingSearch_APIKEY", raising=False)
    data = tmp_path / "ws"
    data.mkdir()
    (data / "widesearch.jsonl").write_text((FIXTURES / "fixture_widesearch.jsonl").read_text())
    (data / "widesearch_gold").symlink_to(FIXTURES / "fixture_widesearch_gold")
    tasks = WideSearchAdapter(data=str(data)).tasks()
    assert all("no search backend" in t.skip_reason for t in tasks)


@pytest.mark.slow
def test_simulated_search_is_a_world_model_on_a_real_server_and_says_so(tiny_checkpoint):
    adapter = WideSearchAdapter(data=str(FIXTURES), search="simulated", search_model=str(tiny_checkpoint))
    task = adapter.tasks(limit=1)[0]
    with adapter.open(task) as env:
        assert env.metadata["search_backend"] == "simulated"
        obs = env.step([ToolCall("search", {"query": "planets with rings"}, "c0")])
        assert obs[0].content.startswith("[simulated]") and obs[0].metadata["search_backend"] == "simulated"
        result = adapter.score(task, Episode(benchmark="widesearch", task_id=task.id), env)
    assert result.details["search_backend"] == "simulated"
    assert adapter.aggregate([result])["simulated"] is True
