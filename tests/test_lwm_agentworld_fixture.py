"""Our side of the official AgentWorldBench protocol, without a checkout (runs in CI).

Fixtures written in the official formats (AgentWorldBench's published records; eval.py's
``judged.jsonl`` rows) with expected values computed by hand. The comparison with the official
eval.py itself is ``test_lwm_agentworld_official.py`` (needs ``AGENTWORLD_ROOT``).
"""

from __future__ import annotations

import json

import pytest

from _awb_fixture import SAMPLES, ScriptedServer, write_published_fixture
from unified.lwm.official import aggregate_official, official_gen, official_messages, settings_differences
from unified.lwm.records import load_records
from unified.rewards.awb_judge import load_checkout


def _judged(task, total=0, failed=0.0, **dims):
    """One row of eval.py's judged.jsonl (the fields its score step reads)."""
    return {"task": task, "failed": failed, "total_score": total,
            **{k: dims.get(k, 0) for k in ("format", "factuality", "consistency", "realism", "quality")}}


JUDGED_FIXTURE = [
    _judged("mcp", 4.0, format=4, factuality=5, consistency=3, realism=4, quality=4),
    _judged("mcp", 4.6, format=5, factuality=5, consistency=5, realism=4, quality=4),
    _judged("mcp", failed=1.0),
    _judged("terminal", failed=1.0),
    _judged("terminal", 13 / 3, format=4, factuality=4, quality=5),  # two dimensions the judge left at 0
    _judged("terminal", 2.4, format=2, factuality=3, consistency=2, realism=3, quality=2),
    _judged("web", 3.0, format=3, factuality=3, consistency=3, realism=3, quality=3),
    _judged("web", 0),  # parsed, every dimension 0: valid, but no total to average
    _judged("search", failed=1.0),  # a domain without a valid sample has no score
]


def test_aggregation_of_judged_rows_fixture_matches_hand_computed_eval_py_scores():
    s = aggregate_official(JUDGED_FIXTURE)
    mcp, terminal, web, search = (s["domains"][d] for d in ("mcp", "terminal", "web", "search"))
    # norm(x) = (x - 1) / 4 * 100 of the mean of the non-zero values of the valid rows
    assert (mcp["n"], mcp["valid"], mcp["failed"]) == (3, 2, 1)
    assert mcp["dimensions"] == pytest.approx({"format": 87.5, "factuality": 100.0, "consistency": 75.0,
                                               "realism": 75.0, "quality": 75.0, "total_score": 82.5})
    assert terminal["dimensions"] == pytest.approx({"format": 50.0, "factuality": 62.5, "consistency": 25.0,
                                                    "realism": 50.0, "quality": 62.5,
                                                    "total_score": (((13 / 3 + 2.4) / 2) - 1) / 4 * 100})
    assert terminal["score"] == pytest.approx(59.1667, abs=1e-4)
    assert (web["valid"], web["failed"], web["score"]) == (2, 0, 50.0)
    assert (search["valid"], search["failed"], search["score"], search["dimensions"]) == (0, 1, None, {})
    # eval.py's Overall pools the non-zero totals of all domains: mean(4, 4.6, 13/3, 2.4, 3) = 3.6667
    assert s["overall"] == pytest.approx(66.6667, abs=1e-4)
    assert (s["n"], s["valid"], s["failed"]) == (9, 5, 4)
    # the paper's Overall column: the unweighted mean of the domain scores that exist
    assert s["overall_domain_mean"] == pytest.approx((82.5 + 59.1667 + 50.0) / 3, abs=1e-4)


def test_a_domain_whose_valid_rows_all_scored_zero_gets_eval_py_s_norm_of_zero():
    s = aggregate_official([_judged("os", 0), _judged("os/sub", failed=1.0)])  # "a/b" is subtask b, as in eval.py
    assert s["domains"]["os"]["score"] == -25.0 and s["overall"] is None and s["domains"]["sub"]["score"] is None


def test_published_records_fixture_give_eval_py_s_world_model_chat(tmp_path):
    write_published_fixture(tmp_path)
    records = {r.key: r for r in load_records(tmp_path)}
    assert len(records) == len(SAMPLES) and "mcp/145256090131919/2" in records
    chat = official_messages(records["terminal/33/3"])
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert chat[2]["content"] == "**Environment Observation:**\nreal observation 33-1"  # raw, no tags added
    assert chat[-1]["content"].endswith("act 33-3 (S6)")
    assert official_messages(records["web/w-1/1"])[0]["role"] == "user"  # empty system_str: no system message


def test_gen_is_the_answer_a_reasoning_parser_returns():
    assert official_gen("I reason.\n</think>\n\n<predicted_observation>x</predicted_observation>") == \
        "<predicted_observation>x</predicted_observation>"
    assert official_gen("ran out while thinking\n</think>\n\n") == ""
    assert official_gen("plain") == "plain"


def test_settings_other_than_eval_py_s_are_named():
    same = dict(infer_max_tokens=32768, infer_temperature=0.6, judge_max_tokens=32768, judge_temperature=0.6,
                judge_attempts=3)
    assert settings_differences(None, **same) == []
    assert settings_differences(None, **{**same, "judge_max_tokens": 96, "infer_temperature": 0.0}) == [
        "world-model temperature 0 (eval.py: 0.6)", "judge max_tokens 96 (eval.py: 32768)"]


def test_a_path_that_is_not_a_checkout_is_an_error_naming_the_missing_file(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTWORLD_ROOT", raising=False)
    assert load_checkout(None) is None
    with pytest.raises(FileNotFoundError, match="set \\$AGENTWORLD_ROOT"):
        load_checkout(None, required=True)
    with pytest.raises(FileNotFoundError, match="eval/eval.py is missing"):
        load_checkout(tmp_path)


def test_without_a_checkout_the_published_layout_is_scored_with_our_prompts_and_labelled(tmp_path, monkeypatch):
    from unified.lwm.evaluation import main

    monkeypatch.delenv("AGENTWORLD_ROOT", raising=False)
    data = tmp_path / "AgentWorldBench"
    actions = write_published_fixture(data)
    own = "<scores>\nformat: 5\nfactuality: 4\nconsistency: 4\nrealism: 4\nquality: 3\n</scores>"
    with ScriptedServer(actions, own_judge_answer=own) as server:
        assert main(["--model", f"openai:{server.url}#wm", "--judge", f"openai:{server.url}#judge", "--data",
                     str(data), "--out", str(tmp_path / "out"), "--judge-max-tokens", "96"]) == 0
        judge_requests = [r for r in server.requests if r["model"] == "judge"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["protocol"] == "own" and summary["comparable"] is False and summary["n"] == len(SAMPLES)
    reasons = summary["not_comparable_because"]
    assert reasons[0].startswith("no Qwen-AgentWorld checkout") and reasons[1:] == ["judge max_tokens 96 (eval.py: 32768)"]
    assert judge_requests and all(r["max_tokens"] == 96 and r["temperature"] == 0.6 for r in judge_requests)
    assert not (tmp_path / "out" / "judged.jsonl").exists()
    assert summary["judge_parse_rate"] == 1.0 and summary["overall"] == pytest.approx(75.0)  # mean 4 -> 75
