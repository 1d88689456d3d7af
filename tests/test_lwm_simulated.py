"""Paradigm I on the adapter seam (unified.lwm.simulated): an adapter's environment with its observations
answered by a world model (the tiny random MoE here), run by the eval's own runner beside the real one."""

from __future__ import annotations

import json

from unified.eval.config import EvalConfig
from unified.eval.runner import run_eval
from unified.lwm.simulated import SPLIT_NOTE, split_answer

SIMULATED = "unified.lwm.simulated:SimulatedAdapter"


def _rows(out, name):
    return [json.loads(line) for p in out.glob("*/" + name) for line in p.read_text().splitlines()]


def test_simulated_environment_runs_in_the_eval_beside_the_real_one(tmp_path, tiny_checkpoint):
    settings = {"adapter": "fixture_eval_bench:FixtureAdapter", "world_model": str(tiny_checkpoint),
                "max_new_tokens": 8}
    real = run_eval(EvalConfig(benchmarks=["fixture_eval_bench:FixtureAdapter"], model="gold", limit=2,
                               out=str(tmp_path / "real")))
    sim = run_eval(EvalConfig(benchmarks=[SIMULATED], model="gold", limit=2, out=str(tmp_path / "sim"),
                              benchmark_config={SIMULATED: settings}))
    episodes = _rows(tmp_path / "sim", "episodes.jsonl")
    assert len(episodes) == 2 and all(e["metadata"]["observations"].startswith("world model") for e in episodes)
    observations = [o["content"] for e in episodes for s in e["steps"] for o in s["observations"]]
    assert observations and not any(o.startswith("echo: ") for o in observations)  # not the real tool's answer
    real_scores = [r["score"] for r in _rows(tmp_path / "real", "results.jsonl")]
    sim_scores = [r["score"] for r in _rows(tmp_path / "sim", "results.jsonl")]
    # the fixture's scorer reads the real environment's state, which the simulated calls never reach
    assert real_scores == [1.0, 1.0] and sim_scores == [0.0, 0.0]
    assert real.benchmarks and sim.benchmarks


def test_split_answer_gives_each_call_its_part():
    assert split_answer("a\n\nb", 2) == ["a", "b"]
    assert split_answer("a\n\nb\n\nc", 2) == ["a\n\nb\n\nc", SPLIT_NOTE]
    assert split_answer("x\n\ny", 1) == ["x\n\ny"]
