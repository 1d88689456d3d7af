"""scripts/gpu_checks_routing_replay.py: its CPU variant (fp32, the same checks) in CI, the bf16 CUDA run under
@pytest.mark.gpu."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_checks_routing_replay.py"


def script():
    spec = importlib.util.spec_from_file_location("gpu_checks_routing_replay", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_variant_runs_every_check(tmp_path, capsys):
    rc = script().main(["--device", "cpu", "--dtype", "fp32", "--batch", "2", "--prompt-tokens", "8",
                        "--new-tokens", "6", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "routing_replay.json").read_text())
    assert rc == 0 and result["passed"] is True, result
    assert result["arch"] == "qwen3_5_moe" and result["routes"]["bytes_per_token"] == 4 * 4 * 1
    checks = result["checks"]
    assert checks["identity"]["max_abs_diff"] == 0.0
    assert checks["agreement_same_weights"]["router_agreement"] == 1.0
    assert checks["agreement_perturbed_router"]["router_agreement"] < 1.0
    perturbed = checks["mismatch_kl_perturbed_router"]
    assert perturbed["kl_with_replay"] < perturbed["kl_without_replay"]
    assert json.loads(capsys.readouterr().out)["passed"] is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_without_cuda_the_default_run_says_skipped(capsys):
    assert script().main([]) == 0
    assert json.loads(capsys.readouterr().out) == {"passed": None, "skipped": "no CUDA device"}


@pytest.mark.gpu
def test_bf16_on_cuda(tmp_path):
    assert script().main(["--out", str(tmp_path)]) == 0
