"""--suite lwm: a judge-free reference-based score beside the rubric score, each labelled."""

from __future__ import annotations

import json

import pytest

from unified.lwm.evaluation import main, run
from unified.lwm.records import trajectory_records, write_records


def _records():
    recs = trajectory_records("terminal", "t0", "sys", ["echo 0"], ["0\n[exit code: 0]"])
    recs += trajectory_records("mcp", "m0", "sys", ['{"name": "pwd", "arguments": {}}'],
                               ['{"current_working_directory": "/"}'])
    return recs


def test_reference_score_measures_what_an_unparseable_judge_cannot(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("AGENTWORLD_ROOT", raising=False)  # the own protocol: our rubric judge
    recs = _records()
    data, out = tmp_path / "data", tmp_path / "out"
    write_records(data / "all.jsonl", recs)
    out.mkdir()
    exact = {"terminal": "<predicted_observation>0\n[exit code: 0]</predicted_observation>", "mcp": "no idea"}
    with open(out / "predictions.jsonl", "w") as fh:  # recorded predictions and judgments: nothing is loaded
        for r in recs:
            fh.write(json.dumps({"sample_id": r.key, "domain": r.task, "turn_idx": r.turn_idx,
                                 "completion": exact[r.task], "error": None}) + "\n")
    with open(out / "judgments.jsonl", "w") as fh:
        for r in recs:  # the weak judge wrote nothing parseable: rubric score 0 everywhere
            fh.write(json.dumps({"sample_id": r.key, "domain": r.task, "parsed": False, "criteria": {}, "reward": 0.0,
                                 "score": 0.0, "rule_passed": False, "rule_check": "", "judge_detail": ""}) + "\n")
    summary = run("unused", "unused", str(data), str(out))
    assert summary["overall"] == 0.0 and summary["score_metric"].startswith("rubric judge score")
    ref = summary["reference"]
    assert ref["lcs_f1"]["domains"]["terminal"]["score"] == pytest.approx(100.0)
    assert ref["lcs_f1"]["domains"]["mcp"]["score"] == 0.0 and ref["lcs_f1"]["overall"] == pytest.approx(50.0)
    assert "no judge involved" in ref["metric"] and "measures nothing" in summary["rubric_note"]
    assert main(["--model", "unused", "--judge", "unused", "--data", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "rubric score (own judge prompt, not comparable): overall 0.00" in printed
    assert "reference score (LCS F1 vs the true observation, no judge): overall 50.00" in printed
