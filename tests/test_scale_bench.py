"""``python -m measurements.scale_bench``: a random MoE of the asked shape, a real warmup run per kernel."""

from __future__ import annotations

import json

import pytest

from measurements.scale_bench import main, steady_step_seconds


def test_steady_step_time_skips_the_first_step(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "time_s": 30.0, "loss": 0.1}, {"step": 2, "time_s": 32.0, "loss": 0.1},
            {"step": 3, "time_s": 35.0, "loss": 0.1}, {"step": 4, "time_s": 37.0, "loss": 0.1},
            {"step": 4, "time_s": 40.0, "train_runtime": 40.0}]
    metrics.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert steady_step_seconds(metrics) == 2.5  # step 1 (30 s of set-up) is left out: gaps 3.0 and 2.0
    assert steady_step_seconds(tmp_path / "missing.jsonl") is None


@pytest.mark.slow
def test_scale_bench_builds_the_shape_and_reports_each_kernel(tmp_path, capsys):
    out = tmp_path / "bench"
    rc = main(["--arch", "qwen3_moe", "--hidden", "96", "--layers", "2", "--experts", "6", "--top-k", "3",
               "--heads", "4", "--head-dim", "16", "--moe-intermediate", "48", "--steps", "2",
               "--experts-impl", "eager", "--out", str(out), "--set", "gspo.num_generations=2",
               "--set", "train.per_device_train_batch_size=4", "--set", "generation.max_completion_length=6",
               "--set", "data.max_prompt_tokens=null",
               # the tiny-run settings of tests/_warmup_support.py: no validation probe (24 greedy decodes before
               # and after every step) and one generation batch of 8 completions, not the recipe's 4 x 32
               "--set", "data.validation_size=0", "--set", "monitor.probe_size=0", "--set", "monitor.keep_best=false",
               "--set", "train.gradient_accumulation_steps=2", "--set", "gspo.steps_per_generation=2"])
    report = json.loads((out / "scale_bench.json").read_text())
    assert rc == 0, report
    config = json.loads((out / "checkpoint" / "config.json").read_text())
    experts = config.get("num_experts", config.get("num_local_experts"))  # the name differs across versions
    assert (config["hidden_size"], experts, config["num_experts_per_tok"]) == (96, 6, 3)
    (row,) = report["rows"]
    assert row["steps"] == 2 and row["seconds_per_step"] > 0
    assert row["kernels"]["experts"] == "eager"
    assert "| eager | 0 | 2 |" in capsys.readouterr().out
