"""Rule-based scoring, per-episode/per-run statistics, relation to success, run loading, comparison."""

from __future__ import annotations

import json

import pytest

from test_trace_fixtures import (fixture_act_episode, fixture_result, fixture_weather_episode, fixture_write_run)
from unified.trace import compare_runs, load_run, rule_match, trace_episode, trace_run


def test_json_leaves_compared_after_metadata_normalisation():
    claim = '{"status": "ok", "created": "2024-01-01T10:00:00Z", "count": 3}'
    obs = '{"status": "ok", "created": "2025-06-30T23:59:59Z", "count": 3.0, "extra": 1}'
    verdict = rule_match(claim, obs)
    assert (verdict.method, verdict.score, verdict.correct) == ("rule:json", 1.0, True)
    wrong = rule_match('{"status": "ok", "count": 4, "missing": 1}', obs)
    assert wrong.score == pytest.approx(1 / 3) and wrong.correct is False
    assert "$.count=4" not in wrong.found and ".count=4" in wrong.missing


def test_facts_numbers_compare_as_numbers_and_quotes_as_strings():
    v = rule_match("it lists 'a.txt' and 'b.txt', 2 files", "a.txt\nb.txt\n[2.0 entries]")
    assert v.method == "rule:facts" and v.correct is True and v.score == 1.0
    v = rule_match("it lists 'a.txt' and 'c.txt', 3 files", "a.txt\nb.txt")
    assert v.found == ["a.txt"] and set(v.missing) == {"c.txt", "3"} and v.correct is False


def test_status_contradiction_makes_a_prediction_wrong():
    v = rule_match("it will fail with a permission error", "hello.txt", is_error=False)
    assert v.correct is False and "claimed error" in v.note
    v = rule_match("it will fail", "Error: no such file", is_error=True)
    assert v.correct is True and v.method in ("rule:status", "rule:words")
    v = rule_match("it should succeed without errors", "done", is_error=False)
    assert v.correct is True


def test_words_fallback_and_unverifiable():
    v = rule_match("the temperature in celsius", '{"temperature": 18, "unit": "celsius"}')
    assert v.method == "rule:words" and v.correct is True
    v = rule_match("something", "anything")
    assert v.method == "unverifiable" and v.correct is None and v.score is None


def test_the_called_tool_name_is_not_a_fact():
    v = rule_match("get_weather returns 18", "18", ignore=("get_weather",))
    assert v.found == ["18"] and v.missing == []


def test_weather_episode_known_verdicts_and_counts():
    trace = trace_episode(fixture_weather_episode(), None)
    verdicts = [(p.step, p.kind, p.text[:12], p.correct) for p in trace.predictions]
    assert verdicts == [
        (0, "explicit", '{"city": "Pa', True),
        (0, "implicit", "get_weather ", True),
        (1, "explicit", "65", False),
        (1, "explicit", "Error: city ", True),
        (1, "implicit", "The result s", False),
    ]
    assert trace.predictions[0].method == "rule:json" and trace.predictions[0].score == 1.0
    row = trace.row()
    assert (row["steps"], row["call_steps"], row["steps_with_prediction"], row["steps_with_explicit"]) == (3, 2, 2, 2)
    assert (row["predictions"], row["explicit"], row["implicit"], row["scored"], row["correct"]) == (5, 3, 2, 5, 3)
    assert row["accuracy"] == pytest.approx(0.6)
    assert row["prediction_rate"] == 1.0
    assert row["self_corrections_per_step"] == pytest.approx(2 / 3)
    assert row["prompting"] == "predict_then_act"


def _three_act_episodes():
    good = fixture_act_episode("good", "hello world", "hello world")
    half = fixture_act_episode("half", "hello", "hello there")
    bad = fixture_act_episode("bad", "goodbye", "hello world")
    results = [fixture_result(good, 1.0, True), fixture_result(half, 1.0, True), fixture_result(bad, 0.0, False)]
    return [good, half, bad], results


def test_run_stats_and_relation_to_success():
    episodes, results = _three_act_episodes()
    run = trace_run(episodes, results)
    stats = run.stats()
    assert (stats["episodes"], stats["steps"], stats["call_steps"], stats["predictions"]) == (3, 6, 3, 3)
    assert (stats["explicit"], stats["implicit"], stats["correct"]) == (0, 3, 2)
    assert stats["accuracy"] == pytest.approx(2 / 3) and stats["prediction_rate"] == 1.0
    assert run.stats("explicit")["predictions"] == 0 and run.stats("explicit")["accuracy"] is None
    rel = run.success_relation()
    assert (rel["n_success"], rel["n_failure"]) == (2, 1)
    assert rel["accuracy_when_success"] == 1.0 and rel["accuracy_when_failure"] == 0.0
    assert rel["pearson_accuracy_score"] == pytest.approx(1.0)
    assert rel["score_when_accuracy_ge_half"] == 1.0 and rel["score_when_accuracy_lt_half"] == 0.0


def test_load_run_dedups_resumed_keys_skips_truncated_tail_and_names_bad_lines(tmp_path):
    episodes, results = _three_act_episodes()
    fixture_write_run(tmp_path / "run", episodes, results, summary={"benchmarks": {"fixture_bench": {"score": 66.7}}})
    with open(tmp_path / "run" / "results.jsonl", "a") as fh:  # a second record of "bad"; then a crash
        fh.write(json.dumps(fixture_result(episodes[2], 0.5, False).to_dict()) + "\n")
        fh.write('{"benchmark": "fixture_bench", "task_id": "tru')
    with pytest.warns(UserWarning, match="truncated last line"):
        saved = load_run(tmp_path / "run")
    assert len(saved.episodes) == 3 and len(saved.results) == 3
    assert {r.task_id: r.score for r in saved.results}["bad"] == 0.0  # the first result wins, as in unified.eval
    assert saved.summary["benchmarks"]["fixture_bench"]["score"] == 66.7

    lines = (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()
    lines.insert(1, "{not json")
    (tmp_path / "run" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"episodes\.jsonl:2: not valid JSON"):
        load_run(tmp_path / "run")
    (tmp_path / "run" / "episodes.jsonl").write_text(json.dumps({"benchmark": "b", "task_id": "t", "steps": [],
                                                                 "bogus": 1}) + "\n")
    with pytest.raises(ValueError, match=r"episodes\.jsonl:1: Episode: unknown key 'bogus'\. Valid keys: benchmark, "):
        load_run(tmp_path / "run")


def test_compare_runs_gives_benchmark_and_prediction_deltas(tmp_path):
    episodes, results = _three_act_episodes()
    fixture_write_run(tmp_path / "a", episodes, results)
    weather = fixture_weather_episode()
    fixture_write_run(tmp_path / "b", [weather], [fixture_result(weather, 0.5)],
                      summary={"benchmarks": {"fixture_bench": {"status": "ok", "aggregate": {"score": 50.0}}}})
    table = compare_runs(trace_run(tmp_path / "a"), trace_run(tmp_path / "b"))
    bench = {r["benchmark"]: r for r in table["benchmarks"]}
    assert bench["fixture_bench"]["a"] == pytest.approx(100 * 2 / 3)  # mean of results (no summary in a)
    assert bench["fixture_bench"]["b"] == 50.0  # the summary's aggregate
    assert bench["fixture_bench"]["delta"] == pytest.approx(50.0 - 200 / 3)
    preds = {(r["kind"], r["metric"]): r for r in table["predictions"]}
    assert preds[("all", "accuracy")]["a"] == pytest.approx(2 / 3)
    assert preds[("all", "accuracy")]["b"] == pytest.approx(0.6)
    assert preds[("explicit", "accuracy")]["a"] is None and preds[("explicit", "accuracy")]["delta"] is None
    assert preds[("explicit", "prediction_rate")]["b"] == 1.0
