import pytest
import torch

from unified.kernels import attention_parity, experts_parity, select_attention, select_experts, select_kernels


def test_cpu_selection_and_reasons():
    attn, why = select_attention("cpu")
    assert attn == "sdpa" and "CUDA" in why
    experts, why = select_experts("cpu", torch.float32)
    assert experts in ("grouped_mm", "eager") and why
    choice = select_kernels("cpu")
    assert choice.attention == "sdpa" and "attention:" in choice.reason and "experts:" in choice.reason


def test_requests_are_validated():
    with pytest.raises(ValueError, match="needs a CUDA device"):
        select_attention("cpu", "flash_attention_2")
    with pytest.raises(ValueError, match="valid: grouped_mm"):
        select_experts("cpu", requested="grouped_gemm")
    assert select_experts("cpu", requested="eager") == ("eager", "requested")


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_5_moe"])
def test_grouped_mm_matches_eager_outputs_and_gradients(arch):
    if select_experts("cpu", torch.float32)[0] != "grouped_mm":
        pytest.skip("grouped_mm does not run on this CPU build of torch")
    report = experts_parity("grouped_mm", arch=arch, repeats=1)
    assert report.passed, report.to_dict()
    assert report.max_abs_output_diff < 1e-4 and report.max_abs_grad_diff < 1e-4


def test_parity_detects_a_broken_kernel():
    report = experts_parity("eager", repeats=0, model_kwargs={"num_experts": 4})
    assert report.passed and report.max_abs_output_diff == 0.0
    # a candidate with different weights must fail the check (the check can fail)
    from unified.kernels.parity import _compare
    from unified.models.tiny import tiny_moe_model

    broken = _compare(tiny_moe_model(seed=0), tiny_moe_model(seed=1), "eager", "other", batch=1, seq_len=8,
                      tolerance=1e-4, repeats=0, seed=0, device="cpu")
    assert not broken.passed and broken.rel_output_diff > 1e-2 and broken.rel_grad_diff > 1e-2


def test_bf16_parity_is_relative_and_reports_each_error_against_fp32():
    """bf16 rounding is judged against the reference's own error vs fp32, not an absolute bound."""
    if select_experts("cpu", torch.float32)[0] != "grouped_mm":
        pytest.skip("grouped_mm does not run on this CPU build of torch")
    report = experts_parity("grouped_mm", dtype=torch.bfloat16, batch=4, seq_len=64, repeats=0, tolerance=5e-2)
    errors = report.fp32_errors
    assert set(errors) == {"reference", "candidate"}
    assert 0 < errors["reference"]["output"] < 5e-2  # bf16 really rounds, and only a little
    assert report.passed, report.to_dict()
    assert errors["candidate"]["grad"] <= max(2 * errors["reference"]["grad"], 5e-2)
    # a candidate much less accurate than the reference fails, whatever the absolute figures
    from unified.kernels.parity import _compare
    from unified.models.tiny import tiny_moe_model

    exact = tiny_moe_model(seed=0)
    off = _compare(exact.to(torch.bfloat16), tiny_moe_model(seed=1).to(torch.bfloat16), "eager", "other", batch=1,
                   seq_len=8, tolerance=5e-2, repeats=0, seed=0, device="cpu", fp32_model=tiny_moe_model(seed=0))
    assert not off.passed and off.fp32_errors["candidate"]["output"] > 2 * off.fp32_errors["reference"]["output"]
    assert experts_parity("grouped_mm", repeats=0).fp32_errors is None  # fp32: nothing to compare with


@pytest.mark.gpu
def test_flash_attention_matches_sdpa_on_gpu():
    pytest.importorskip("flash_attn")
    report = attention_parity("flash_attention_2", reference="sdpa", device="cuda")
    assert report.passed, report.to_dict()


@pytest.mark.gpu
def test_grouped_mm_matches_eager_on_gpu_bf16():
    report = experts_parity("grouped_mm", device="cuda", dtype=torch.bfloat16, tolerance=5e-2)
    assert report.passed, report.to_dict()
    errors = report.fp32_errors
    assert errors["candidate"]["grad"] <= max(2 * errors["reference"]["grad"], 5e-2), report.to_dict()
