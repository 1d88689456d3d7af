"""The memory/time plan (unified/warmup/sizing*.py, plan.py): dimensions, refusals, and the estimate
against a measured step (scripts/gpu_checks_sizing.py's CPU variant)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unified.warmup.config import load_warmup_config
from unified.warmup.plan import build_plan, largest_prompt_that_fits, plan_problems, plan_problems_of
from unified.warmup.preflight import problems
from unified.warmup.sizing_model import QWEN35_35B_A3B, dims_from_config

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "recipes/warmup/qwen35_35b_a3b.yaml"
JUDGE = "rewards.rubric.judge_endpoint=openai:http://judge:8001/v1#judge"


def _paper(*sets: str):
    return load_warmup_config(PAPER, [JUDGE, *sets])


def test_the_preset_is_transformers_qwen35_moe_config_and_counts_its_parameters():
    from transformers import Qwen3_5MoeTextConfig

    read = dims_from_config(Qwen3_5MoeTextConfig().to_dict())  # defaults = Qwen/Qwen3.5-35B-A3B
    assert dataclasses.replace(read, name=QWEN35_35B_A3B.name, frozen_extra_params=QWEN35_35B_A3B.frozen_extra_params) \
        == QWEN35_35B_A3B
    assert round(QWEN35_35B_A3B.total_params() / 1e9, 2) == 35.11  # docs/checkpoints.md: 35.11B with the tower
    from unified.models.tiny import tiny_moe_model

    for arch in ("qwen3_moe", "qwen3_5_moe"):  # the formulas against a built model's parameters
        model = tiny_moe_model(arch)
        assert dims_from_config(model.config.to_dict()).text_params() == sum(p.numel() for p in model.parameters())


def test_the_one_node_35b_layout_is_refused_with_its_numbers():
    cfg = _paper("launch.nodes=1")
    lines = problems(cfg)
    memory = next(line for line in lines if line.startswith("memory plan: ") and "per trainer GPU" in line)
    assert "> 73.2 GiB usable" in memory and "model states (sharded) 64.7" in memory and "8 trainer process" in memory
    assert any("colocated vLLM needs 65.4 GiB of bf16 weights per GPU" in line and "budget of 23.9 GiB" in line
               for line in lines)
    assert largest_prompt_that_fits(cfg, QWEN35_35B_A3B) == 0  # no prompt length makes one node fit


def test_the_recipe_fits_four_h100_nodes_at_its_cap_and_128k_does_not():
    cfg = _paper()
    assert cfg.data.max_prompt_tokens == 55296 and plan_problems(cfg) == []
    plan = build_plan(cfg, QWEN35_35B_A3B)
    assert plan.memory.fits and plan.time.fits and plan.time.total_s > 0.5 * plan.time.timeout_s
    full = build_plan(cfg, QWEN35_35B_A3B, prompt_tokens=131072)
    refused = plan_problems_of(full)
    assert any(line.startswith("memory plan:") for line in refused) and any("time plan:" in line for line in refused)
    assert build_plan(cfg, QWEN35_35B_A3B, prompt_tokens=131072, gpu="h200").memory.fits  # H200: memory fits
    # the rollout node: TP 8 over 2 KV heads replicates them, 10 full-attention layers x 2 x 256 x 2 B a GPU
    assert full.rollout.kv_bytes_per_token * 8 == 80 * 1024
    assert 40 <= full.rollout.sequences <= 50  # full-length (132k-token) sequences at once on 8 x H100


def test_estimate_within_tolerance_of_a_measured_cpu_step():
    """Saved-for-backward and state bytes of a real fp32 step of two tiny MoEs vs the plan (0.67-1.5x; states 1%)."""
    spec = importlib.util.spec_from_file_location("gpu_checks_sizing", REPO / "scripts/gpu_checks_sizing.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    torch.manual_seed(0)
    for name, cfg in script._configs("cpu").items():
        row = script.measure_cpu(name, cfg)
        assert row["passed"], row
        assert 0.67 <= row["saved_ratio"] <= 1.5 and abs(row["state_ratio"] - 1) < 0.01


def test_plan_flag_and_dry_run_print_the_table(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = [sys.executable, "-m", "unified.warmup", "--recipe", str(PAPER), "--set", JUDGE,
           "--output-dir", str(tmp_path / "o")]
    ok = subprocess.run([*run, "--plan"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert ok.returncode == 0, ok.stderr
    for piece in ("model states (sharded) | 21.6", "**total** | **65.5** of 73.2 usable (fits, 89%)",
                  "replayed routes (generation batch) | 1.1", "105 sequences of 59392 tokens",
                  "vs collective timeout 2,400 s (fits)"):
        assert piece in ok.stdout, piece
    bad = subprocess.run([*run, "--plan", "--set", "launch.nodes=1"], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=120)
    assert bad.returncode == 2 and "DOES NOT FIT" in bad.stdout and "memory plan: 132.5 GiB" in bad.stderr
    assert not (tmp_path / "o").exists()  # a refused command writes nothing


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_estimate_within_tolerance_on_a_gpu():
    out = subprocess.run([sys.executable, str(REPO / "scripts/gpu_checks_sizing.py")], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
