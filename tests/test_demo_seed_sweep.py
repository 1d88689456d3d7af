"""measurements/demo_seed_sweep.py: the rows and table it derives from a run's own records.

The run directories here are written by the test in the warmup's own formats (``before_after.json``,
``metrics.jsonl``); nothing is trained."""

from __future__ import annotations

import math
import json
from pathlib import Path

from measurements.demo_seed_sweep import parse_seeds, seed_row, table


def _fake_run(root: Path, seed: int, *, kept: int, start: float | None, probes: list[float], diff: float,
              log: str = "") -> Path:
    run = root / f"seed{seed}"
    run.mkdir(parents=True)
    collapse = {"best_step": kept, "best_probe_reward": max([start or 0.0, *probes]), "kept_step": kept}
    if start is not None:
        collapse["start_probe_reward"] = start
    (run / "before_after.json").write_text(json.dumps({
        "steps": len(probes), "collapse": collapse,
        "paired": {"prompts": 8, "mean_diff": diff, "se_diff": 0.5, "up": 3, "down": 1, "same": 4}}))
    lines = [{"step": i + 1, "loss": 0.1, "probe/reward": p, "clip_ratio/region_mean": 0.25 * i}
             for i, p in enumerate(probes)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (root / f"seed{seed}.log").write_text(log)
    return run


def test_rows_give_the_kept_steps_validation_reward_and_the_clip_fraction_of_each_update(tmp_path):
    row = seed_row(_fake_run(tmp_path, 3, kept=2, start=1.5, probes=[1.0, 2.5], diff=0.75), 3, 61.0)
    assert (row["kept_step"], row["validation_start"], row["validation_kept"]) == (2, 1.5, 2.5)
    assert row["validation_by_step"] == [1.5, 1.0, 2.5] and row["clip_fraction_by_update"] == [0.0, 0.25]
    kept_start = seed_row(_fake_run(tmp_path, 4, kept=0, start=None, probes=[1.0, 0.5], diff=0.0,
                                    log="unified.warmup: probe at step 0: greedy loops 2/8, reward 1.937\n"), 4, 1.0)
    assert (kept_start["kept_step"], kept_start["validation_start"], kept_start["validation_kept"]) == (0, 1.937, 1.937)


def test_table_counts_the_seeds_that_keep_the_start_and_lists_errors(tmp_path):
    rows = [seed_row(_fake_run(tmp_path, s, kept=k, start=1.0, probes=[2.0, 1.5], diff=d), s, 60.0)
            for s, k, d in [(0, 1, 1.0), (1, 0, 0.0), (2, 2, -0.5)]]
    text = table([*rows, {"seed": 9, "error": "exit status 1 (see seed9.log)"}])
    assert "3 seeds: held-out paired difference mean +0.167" in text
    assert "1 of 3 keep the start; held-out up on 1 of 3" in text
    assert "| 1 | 0 | 1.00 -> 1.00 | +0.00 +- 0.50 (3/1) |" in text and "seed 9: exit status 1" in text
    assert parse_seeds("0-2,7") == [0, 1, 2, 7]


def test_seed_summary_counts_keep_start_and_heldout_up_with_mean_and_se():
    from measurements.demo_seed_sweep import seed_summary

    rows = [{"seed": 100, "kept_step": 0, "heldout_diff": 0.0}, {"seed": 101, "kept_step": 2, "heldout_diff": 1.0},
            {"seed": 102, "kept_step": 1, "heldout_diff": -0.4}, {"seed": 103, "error": "exit status 1"}]
    got = seed_summary(rows)
    assert (got["n"], got["kept_start"], got["heldout_up"], got["heldout_down"], got["errors"]) == (3, 1, 1, 1, [103])
    assert got["mean_diff"] == 0.2 and got["se_diff"] == round(math.sqrt(((-0.2) ** 2 + 0.8 ** 2 + 0.6 ** 2) / 2 / 3), 3)
