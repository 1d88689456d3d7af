"""scripts/gpu_checks.sh and measurements/gpu_checks.py: arguments, the check list, per-check results and a clear
skip without CUDA (CPU); the checks themselves under @pytest.mark.gpu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts/gpu_checks.sh"
DEFAULT = ["imports", "flash_attention", "layer_bench", "colocate", "server_sync"]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT), **(env or {})})


def _summary(out: Path) -> list[list[str]]:
    return [line.split("\t") for line in (out / "summary.tsv").read_text().splitlines()]


def test_list_names_the_checks():
    done = _run("--list")
    assert done.returncode == 0 and done.stdout.split() == [*DEFAULT, "gpu_tests", "vllm_routes"]


@pytest.mark.parametrize("args, message", [(["--only", "flash,imports"], "unknown check 'flash'"),
                                           (["--bogus"], "unknown option --bogus"), (["--only="], "--only needs")])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, args, message):
    done = _run(*args, str(tmp_path / "out"))
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "out").exists()


@no_cuda
def test_without_cuda_every_check_is_skipped_and_says_why(tmp_path):
    done = _run(str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert "no CUDA device here" in done.stdout
    assert [row[:2] for row in _summary(tmp_path / "out")] == [[c, "skipped"] for c in DEFAULT]
    assert "no CUDA device here: every check skipped" in done.stdout
    for check in DEFAULT:
        record = json.loads((tmp_path / "out" / f"{check}.json").read_text())
        assert record["passed"] is None and "no CUDA" in record["skipped"]


@no_cuda
def test_a_failing_check_does_not_stop_the_others(tmp_path):
    """Past the CUDA probe, each check runs in its own process: one that fails is FAILED in the summary, the next
    still runs (here they skip themselves: this machine has no CUDA), and the exit status says one failed."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n[ "$3" = flash_attention ] && {{ echo broken >&2; exit 3; }}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    done = _run("--only", "flash_attention,layer_bench", str(tmp_path / "out"),
                env={"GPU_CHECKS_ASSUME_CUDA": "1", "PYTHON": str(python)})
    assert done.returncode == 1
    assert [row[:2] for row in _summary(tmp_path / "out")] == [["flash_attention", "FAILED"], ["layer_bench", "skipped"]]
    assert "broken" in (tmp_path / "out" / "flash_attention.log").read_text()
    assert "no CUDA device" in json.loads((tmp_path / "out" / "layer_bench.json").read_text())["skipped"]


def test_layer_bench_times_a_linear_and_a_full_attention_layer_on_cpu():
    """The benchmark's own code at a tiny shape on CPU: both layer kinds run forward+backward, the reference path
    twice gives the same output (difference 0), and a length that cannot fit the budget is skipped, not run."""
    from measurements.gpu_checks import bench_layers, layer_pair

    shape = dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2,
                 linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4,
                 num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)
    model, module = layer_pair(shape, device="cpu", dtype=torch.float32)
    assert [type(layer.linear_attn if hasattr(layer, "linear_attn") else layer.self_attn).__name__
            for layer in model.layers] == ["Qwen3_5MoeGatedDeltaNet", "Qwen3_5MoeAttention"]
    rows, diff = bench_layers(model, module, (72,), ("torch", "torch"), budget_s=60, warmup_tokens=8)
    assert [(r["linear_attention"], r["tokens"]) for r in rows] == [("torch", 72)] * 2  # 72 tokens: 2 chunks
    assert all(r["seconds"] > 0 and r["peak_gib"] is None for r in rows) and diff == 0.0
    rows, _ = bench_layers(model, module, (72, 10**7), ("torch",), budget_s=1, warmup_tokens=8)
    assert "seconds" in rows[0] and "skipped" in rows[1]


def test_colocate_reads_weight_changes_and_rollout_metrics(tmp_path):
    from measurements.gpu_checks import rollout_metrics, weights_changed
    from unified.models.tiny import tiny_moe_model

    model = tiny_moe_model("qwen3_moe")
    model.save_pretrained(tmp_path / "before")
    with torch.no_grad():
        model.lm_head.weight.add_(1e-3)
    model.save_pretrained(tmp_path / "after")
    tensors, changed = weights_changed(tmp_path / "before", tmp_path / "after")
    assert tensors > 10 and changed == ["lm_head.weight"]
    assert weights_changed(tmp_path / "before", tmp_path / "before")[1] == []
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "loss": 0.1, "sampling/sampling_logp_difference/mean": 0.01}\n\n'
                       '{"step": 2, "sampling/sampling_logp_difference/mean": 0.02, "rollout/mean_weight": 0.9}\n')
    assert rollout_metrics(metrics) == {"sampling/sampling_logp_difference/mean": [0.01, 0.02],
                                        "rollout/mean_weight": [0.9]}


def test_the_expected_rollout_keys_are_the_ones_the_warmup_logs():
    """The colocate / server_sync checks require the keys the trainer's parity code writes, read from that code."""
    from measurements.gpu_checks import expected_rollout_keys
    from unified.warmup.rollout_check import rollout_parity

    logged = rollout_parity(torch.zeros(1, 3), torch.zeros(1, 3), torch.ones(1, 3)).metrics()
    assert sorted(expected_rollout_keys()) == sorted(logged) and "rollout/mean_abs_logp_diff" in logged


@no_cuda
def test_the_cpu_variants_run_end_to_end(tmp_path):
    """`gpu_checks.sh --cpu`: every check's code path on CPU, in its own process as on a GPU node: the lock's
    CPU-available packages at the lock's versions, attention parity, the layer bench at 64/128 tokens, a real
    two-step warmup of a tiny Qwen3.5-MoE (generation.backend=hf) whose weights change, and server_sync's two
    commands built before it skips (it needs two GPUs)."""
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(SCRIPT), "--cpu", str(out)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)})
    logs = {c: (out / f"{c}.log").read_text()[-2000:] for c in DEFAULT if (out / f"{c}.log").exists()}
    assert done.returncode == 0, (done.stdout, logs)
    assert [row[:2] for row in _summary(out)] == [[c, "passed"] for c in DEFAULT[:-1]] + [["server_sync", "skipped"]]
    records = {c: json.loads((out / f"{c}.json").read_text()) for c in DEFAULT}
    assert {"torch", "transformers", "trl", "accelerate"} <= set(records["imports"]["packages"])
    colocate = records["colocate"]
    assert colocate["backend"] == "hf" and colocate["tensors_changed"] * 2 >= colocate["tensors"] > 10
    assert "needs two CUDA devices" in records["server_sync"]["skipped"]
    assert "vllm-serve" in records["server_sync"]["skipped"] and "generation.backend=vllm_server" in \
        records["server_sync"]["skipped"]


# ---- on a GPU (make test-gpu): the checks themselves, shorter


@pytest.mark.gpu
def test_gpu_flash_attention_matches_sdpa_at_head_dim_256(tmp_path):
    from measurements.gpu_checks import check_flash_attention

    pytest.importorskip("flash_attn")
    result = check_flash_attention(tmp_path, seq_len=512)
    assert result["passed"], result


@pytest.mark.gpu
def test_gpu_layer_bench_times_both_linear_attention_paths(tmp_path):
    from measurements.gpu_checks import check_layer_bench

    pytest.importorskip("fla")
    pytest.importorskip("causal_conv1d")
    result = check_layer_bench(tmp_path, tokens=(8192,), budget_s=120)
    assert result["passed"], result
    assert {r["linear_attention"] for r in result["rows"] if "seconds" in r} == {"fla", "torch"}


@pytest.mark.gpu
def test_gpu_colocated_warmup_changes_the_weights(tmp_path):
    from measurements.gpu_checks import check_colocate

    pytest.importorskip("vllm")
    result = check_colocate(tmp_path)
    assert result["passed"] and result["tensors_changed"] > 0, result
