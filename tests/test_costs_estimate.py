"""The dry run's time estimate (issue 53): the judge / grader / simulated user's time included, scaled by the
settings (tokens a call, thinking, turns, engine, prompting), calibrated on the cost table's eval rows and checked
against every one of them: within 2x of each row that has a measurement (at least half of a run stopped
unfinished), and "no measurement for this setting" where the table has none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from unified.benchmarks import AgentLimits
from unified.eval.config import EvalConfig
from unified.eval.costs import (EpisodeSettings, cost_rows, duration, episode_estimate, estimate_line,
                                estimate_seconds, read_costs, row_estimate)
from unified.eval.plan import PlannedBenchmark, PlannedEngine, RunPlan, episode_settings, plan_lines

TABLE = read_costs()
MEASURED = [row for row in cost_rows(TABLE).values() if row.settings]


def test_the_table_records_the_settings_of_its_eval_rows():
    assert {r.name for r in MEASURED} >= {"eval_ood_embedded", "eval_ood_quick", "eval_ood_with_checkouts",
                                           "eval_ood_with_checkouts_quick", "eval_pta"}


@pytest.mark.parametrize("row", MEASURED, ids=[r.name for r in MEASURED])
def test_the_estimate_is_within_2x_of_every_measured_row(row):
    seconds, parts, missing = row_estimate(row, TABLE)
    assert not missing, missing
    if row.finished:
        assert row.wall_s / 2 <= seconds <= 2 * row.wall_s, (row.name, duration(seconds), duration(row.wall_s), parts)
    else:  # stopped unfinished: the run takes longer than wall_s
        assert seconds >= row.wall_s / 2, (row.name, duration(seconds), duration(row.wall_s), parts)


def _ood_with_checkouts_plan(engine: str, *, runs: int = 3, max_turns: int = 40, **sampling) -> RunPlan:
    """The plan of ``--suite ood --limit 1`` with both checkouts, as the planner makes it: Claw-Eval and
    QwenClawBench ``runs`` trials of one task (their protocol: 3), BFCL one, uncapped turns by its protocol."""
    cfg = EvalConfig(suite="ood", limit=1, model="embedded")
    cfg = replace(cfg, sampling=replace(cfg.sampling, **sampling), limits=replace(cfg.limits, max_turns=max_turns))
    benchmarks = [PlannedBenchmark(name=name, directory=name, runs=n, limits=limits, tasks=["t0"],
                                   pairs=[("t0", i) for i in range(n)], pairs_total=n,
                                   to_run=[("t0", i) for i in range(n)])
                  for name, n, limits in [("claw_eval", runs, cfg.limits), ("qwenclawbench", runs, cfg.limits),
                                          ("bfcl_v4", 1, replace(cfg.limits, max_turns=10**6))]]
    return RunPlan(config=cfg, engine=PlannedEngine(backend=engine), benchmarks=benchmarks)


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_the_dry_run_of_the_ood_suite_with_checkouts_estimates_at_least_half_the_measured_time(engine):
    rows = cost_rows(TABLE)
    quick = dict(runs=1, max_turns=4, max_new_tokens=128, thinking=False)  # --preset quick
    for plan, row in [(_ood_with_checkouts_plan(engine), rows["eval_ood_with_checkouts"]),
                      (_ood_with_checkouts_plan(engine, **quick), rows["eval_ood_with_checkouts_quick"])]:
        seconds, parts, missing = estimate_seconds({b.name: len(b.to_run) for b in plan.benchmarks},
                                                   {b.name: episode_settings(plan, b) for b in plan.benchmarks},
                                                   TABLE)
        assert not missing and seconds >= row.wall_s / 2, (row.name, duration(seconds), parts)
        line = next(line for line in plan_lines(plan) if "estimate:" in line)
        assert f"estimate: about {duration(seconds)} " in line and "grader's judge" in line, line


def test_the_estimate_scales_with_the_settings():
    base = EpisodeSettings(model="embedded", engine="hf", max_new_tokens=128, thinking=False, max_turns=4)

    def claw(**changes) -> float:
        return episode_estimate("claw_eval", replace(base, **changes), TABLE).policy_s

    assert claw(max_new_tokens=256) == pytest.approx(2 * claw())  # tokens a call
    assert claw(max_turns=8) == pytest.approx(2 * claw())  # every turn used
    assert claw(max_new_tokens=512, thinking=True) != claw(max_new_tokens=512)  # thinking fills calls differently
    assert claw(engine="vllm") < claw()  # a faster engine
    assert claw(max_turns=1000, max_seconds=60.0) == pytest.approx(60.0)  # the episode's own wall-time limit
    claw_eval = episode_estimate("claw_eval", base, TABLE)
    assert claw_eval.side_s > 0 and "grader's judge" in claw_eval.side  # the grader's time is in the estimate
    bfcl = episode_estimate("bfcl_v4", replace(base, max_turns=40), TABLE)
    assert bfcl.calls == 1 and bfcl.side_s == 0
    pta = episode_estimate("bfcl_v4", replace(base, prompting="predict_then_act", max_turns=40), TABLE)
    assert pta.seconds > bfcl.seconds


def test_no_measurement_for_this_setting():
    settings = EpisodeSettings(engine="hf")
    line = estimate_line({"terminal_bench_2": 2, "bfcl_v4": 1}, settings, TABLE)
    assert "terminal_bench_2: no measurement for this setting" in line and "bfcl_v4 1 x" in line
    for other in (replace(settings, engine="openai"), replace(settings, prompting="no_such_module"),
                  replace(settings, model="gold")):
        assert "bfcl_v4: no measurement for this setting" in estimate_line({"bfcl_v4": 1}, other, TABLE)
    assert estimate_line({"terminal_bench_2": 1}, settings, TABLE).startswith("estimate: none; terminal_bench_2")
    assert AgentLimits().max_turns == 40  # the default the rows ran under
