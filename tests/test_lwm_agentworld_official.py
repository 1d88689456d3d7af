"""AgentWorldBench scored as the official eval.py scores it.

``test_same_scores_as_official_eval_py`` runs the checkout's own ``eval/eval.py`` (infer, judge,
score) as a subprocess and ``python -m unified.eval lwm`` on the same records, against one
loopback server with scripted world-model and judge answers (a retry, an unparseable sample, an
empty generation, all-zero scores ...), and asks for the same per-domain and overall scores. It
needs a Qwen-AgentWorld checkout (``AGENTWORLD_ROOT``), which CI does not have (no network to
GitHub): there it skips, and ``test_lwm_agentworld_fixture.py`` checks our side on a fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from _awb_fixture import SAMPLES, ScriptedServer, parse_eval_py_scores, write_published_fixture

ROOT = os.environ.get("AGENTWORLD_ROOT", "")
pytestmark = pytest.mark.skipif(
    not ROOT or not (Path(ROOT) / "eval" / "eval.py").is_file(),
    reason="needs a Qwen-AgentWorld checkout: git clone https://github.com/QwenLM/Qwen-AgentWorld and set "
           "AGENTWORLD_ROOT to it (CI has no network to GitHub; tests/test_lwm_agentworld_fixture.py covers our side)")


def _eval_py(*args: str) -> str:
    env = {**os.environ, "OPENAI_API_KEY": "EMPTY", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    done = subprocess.run([sys.executable, "eval.py", *args], cwd=Path(ROOT) / "eval", env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _requests(server: ScriptedServer) -> Counter:
    return Counter(json.dumps(r, sort_keys=True) for r in server.requests)


def test_same_scores_as_official_eval_py(tmp_path, capsys):
    from unified.lwm.evaluation import main

    data = tmp_path / "AgentWorldBench"
    actions = write_published_fixture(data)
    official_dir, ours_dir = tmp_path / "official", tmp_path / "ours"
    with ScriptedServer(actions) as server:
        _eval_py("infer", "--data-dir", str(data), "--model-base-url", server.url, "--model-name", "wm",
                 "--output-dir", str(official_dir))
        printed = _eval_py("judge", "--predictions", str(official_dir / "predictions.jsonl"), "--judge-base-url",
                           server.url, "--judge-model", "judge", "--output-dir", str(official_dir))
        official_requests = _requests(server)
        server.reset()
        assert main(["--model", f"openai:{server.url}#wm", "--judge", f"openai:{server.url}#judge", "--data", str(data),
                     "--out", str(ours_dir), "--agentworld-root", ROOT]) == 0
        our_requests = _requests(server)
    official = parse_eval_py_scores(printed)
    summary = json.loads((ours_dir / "summary.json").read_text())
    print(capsys.readouterr().out)

    # the same requests reached the world model and the judge: messages, budgets, temperatures, attempts
    assert our_requests == official_requests
    judge_calls = sum(n for r, n in official_requests.items() if json.loads(r)["model"] == "judge")
    assert judge_calls == 1 + 2 + 3 + 1 + 1 + 1 + 1  # S2 retried once, S4 three times, S3 never judged
    assert all(json.loads(r)["max_tokens"] == 32768 and json.loads(r)["temperature"] == 0.6 for r in official_requests)

    # the same scores, per domain and dimension, and overall
    assert summary["protocol"] == "official" and summary["comparable"] is True
    assert (summary["n"], summary["valid"], summary["failed"]) == (official["n"], official["valid"], official["failed"])
    assert round(summary["overall"], 2) == official["overall"]
    assert set(summary["domains"]) == set(official["domains"]) == {"mcp", "terminal", "web"}
    for domain, theirs in official["domains"].items():
        ours = summary["domains"][domain]
        assert (ours["n"], ours["valid"], ours["failed"]) == (theirs["n"], theirs["valid"], theirs["failed"]), domain
        assert {k: round(v, 2) for k, v in ours["dimensions"].items()} == theirs["dimensions"], domain
    # hand check of what the scripted answers mean (docs and report quote these)
    assert official["domains"]["mcp"]["dimensions"]["total_score"] == pytest.approx(82.5)  # (4.0 + 4.6) / 2
    assert (official["domains"]["terminal"]["valid"], official["domains"]["terminal"]["failed"]) == (2, 1)
    assert official["domains"]["web"]["dimensions"]["total_score"] == pytest.approx(50.0)  # the all-zero one left out
    domain_scores = [summary["domains"][d]["score"] for d in ("mcp", "terminal", "web")]
    assert summary["overall_domain_mean"] == pytest.approx(sum(domain_scores) / 3)

    # the official scorer reads our judged.jsonl and prints our numbers
    assert parse_eval_py_scores(_eval_py("score", "--predictions", str(ours_dir / "judged.jsonl"))) == official
    # the prediction each judge saw is the same (eval.py's output parser on both sides)
    def extracted(path: Path) -> dict:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return {(r["task"], str(r["id"]), r["turn_idx"]): (r.get("extracted_output"), r["failed"]) for r in rows}

    assert extracted(ours_dir / "judged.jsonl") == extracted(official_dir / "judged.jsonl")
    ours_preds = [json.loads(line) for line in (ours_dir / "predictions.jsonl").read_text().splitlines()]
    assert len(ours_preds) == len(SAMPLES)


def test_reward_with_the_official_judge_matches_the_judged_total(tmp_path):
    """The warmup's ``agentworld_rubric`` entry: the checkout's judge messages and parser, ``5 * total``."""
    from unified.lwm.dataset import to_chat
    from unified.lwm.records import load_records
    from unified.rewards.entries import AgentWorldRubricEntry

    data = tmp_path / "AgentWorldBench"
    actions = write_published_fixture(data)
    records = {r.key: r for r in load_records(data)}
    chosen = [records["mcp/145256090131919/2"], records["terminal/31/2"], records["terminal/32/1"]]
    completions = [SAMPLES[tag][4]["content"] for tag in ("S2", "S4", "S5")]
    with ScriptedServer(actions) as server:
        entry = AgentWorldRubricEntry(name="agentworld_rubric", weight=0.9, agentworld_root=ROOT, cache_dir="",
                                      judge_endpoint=f"openai:{server.url}#judge")
        reward = entry.build()
        values = reward([to_chat(r) for r in chosen], completions, reference=[r.target for r in chosen],
                        domain=[r.task for r in chosen])
        judged = [r for r in server.requests if r["model"] == "judge"]
    assert values == pytest.approx([5 * 4.6, 0.0, 5 * (4 + 4 + 5) / 3])  # retried; failed thrice; "4/5", 3.6, 0, 7
    assert len(judged) == 2 + 3 + 1
    (system, _user) = next(r["messages"] for r in judged if "PRED-S2" in r["messages"][-1]["content"])
    assert system["role"] == "system"
    assert system["content"] == (Path(ROOT) / "prompts" / "mcp" / "judge_system_prompt.txt").read_text()
    assert judged[0]["max_tokens"] == 32768 and judged[0]["temperature"] == 0.6
    assert all(set(r) == {"model", "messages", "max_tokens", "temperature"} for r in judged)  # eval.py's body
