"""AgentWorldBench's "No output" rule (issue 52): blank, unclosed-``<think>`` and truncated answers
are scored as the official eval.py scores them, the answer it scores, not a drop.

eval.py keeps the server's ``message.content`` as ``gen``; an empty one fails unjudged ("No model
generation"), any other goes through its ``parse_model_output``, which returns ``"No output"`` when
nothing is left after the thinking, and that prediction is judged. The first test checks our
``gen`` (runs in CI); the second runs the checkout's eval.py and ours on the same scripted server
(needs ``AGENTWORLD_ROOT``, as ``test_lwm_agentworld_official.py``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from _awb_fixture import OBS, ScriptedServer, _evaluation, _five, parse_eval_py_scores, write_published_fixture
from test_lwm_agentworld_official import _eval_py  # the checkout's eval.py, run the same way
from unified.lwm.official import official_gen

ROOT = os.environ.get("AGENTWORLD_ROOT", "")

# tag -> (domain, id, turn_idx, total_turns, world-model reply, judge answers): the shapes a looping or
# token-starved model gives
SAMPLES = {
    "N1": ("mcp", 501, 1, 1, {"content": "\n\n", "reasoning": "I thought, then wrote nothing."},  # blank answer
           [_evaluation(_five(1, 1, 1, 1, 1))]),
    "N2": ("mcp", 502, 1, 1, {"content": "<think>I loop and loop and loop"},  # <think> never closed
           [_evaluation(_five(1, 2, 1, 1, 1))]),
    "N3": ("terminal", 503, 1, 1, {"content": "<think>ok</think>\n<predicted_observation>\n" + OBS + "PRED-N3 cut"},
           [_evaluation(_five(3, 3, 3, 3, 3))]),  # truncated inside the response tag
    "N4": ("terminal", 504, 1, 1, {"content": "", "reasoning": "ran out of tokens"}, []),  # no content at all
    "N5": ("web", 505, 1, 1, {"content": "<predicted_observation>PRED-N5</predicted_observation>"},
           [_evaluation(_five(5, 5, 5, 5, 5))]),
}


def test_gen_is_the_content_eval_py_keeps_not_a_dropped_answer():
    # an endpoint's split answer: the content exactly as sent, whitespace included (eval.py's `if not gen`)
    assert official_gen("I thought.\n</think>\n\n" + "\n\n") == "\n\n"
    assert official_gen("ran out of tokens\n</think>\n\n") == ""  # no content: "No model generation"
    # an unclosed <think> is kept whole: eval.py's parser removes it and judges "No output"
    assert official_gen("<think>I loop and loop") == "<think>I loop and loop"
    truncated = "<think>ok</think>\n<predicted_observation>\nPRED cut"
    assert official_gen(truncated) == truncated
    # a raw in-process completion with a blank answer is not empty: eval.py would judge it
    assert official_gen("<think>\nthought\n</think>\n\n").strip().startswith("<think>")


@pytest.mark.skipif(not ROOT or not (Path(ROOT) / "eval" / "eval.py").is_file(),
                    reason="needs a Qwen-AgentWorld checkout (AGENTWORLD_ROOT); CI has no network to GitHub")
def test_blank_unclosed_and_truncated_answers_score_as_official_eval_py(tmp_path, capsys):
    from unified.lwm.evaluation import main

    data = tmp_path / "AgentWorldBench"
    actions = write_published_fixture(data, SAMPLES)
    official_dir, ours_dir = tmp_path / "official", tmp_path / "ours"
    with ScriptedServer(actions, samples=SAMPLES) as server:
        _eval_py("infer", "--data-dir", str(data), "--model-base-url", server.url, "--model-name", "wm",
                 "--output-dir", str(official_dir))
        printed = _eval_py("judge", "--predictions", str(official_dir / "predictions.jsonl"), "--judge-base-url",
                           server.url, "--judge-model", "judge", "--output-dir", str(official_dir))
        server.reset()
        assert main(["--model", f"openai:{server.url}#wm", "--judge", f"openai:{server.url}#judge", "--data", str(data),
                     "--out", str(ours_dir), "--agentworld-root", ROOT]) == 0
    official = parse_eval_py_scores(printed)
    summary = json.loads((ours_dir / "summary.json").read_text())
    assert "'No output'" in capsys.readouterr().out

    assert (summary["n"], summary["valid"], summary["failed"]) == (official["n"], official["valid"], official["failed"])
    assert (summary["valid"], summary["failed"]) == (4, 1)  # only the empty content is dropped
    assert round(summary["overall"], 2) == official["overall"]
    for domain, theirs in official["domains"].items():
        assert {k: round(v, 2) for k, v in summary["domains"][domain]["dimensions"].items()} == theirs["dimensions"]

    def extracted(path: Path) -> dict:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return {str(r["id"]): (r.get("extracted_output"), r["failed"]) for r in rows}

    ours, theirs = extracted(ours_dir / "judged.jsonl"), extracted(official_dir / "judged.jsonl")
    assert ours == theirs
    assert ours["501"] == ours["502"] == ("No output", 0.0)
    assert ours["503"][0].endswith("PRED-N3 cut")
    assert summary["no_output"]["judged_as_no_output"] == 2 and summary["no_output"]["no_model_generation"] == 1
    assert summary["comparable"] is True
