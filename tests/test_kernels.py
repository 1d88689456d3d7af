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


# ---- linear attention (Gated DeltaNet: flash-linear-attention + causal-conv1d, or the reference)


def test_linear_attention_on_cpu_is_the_reference_with_the_reason():
    from unified.kernels import select_linear_attention

    impl, why = select_linear_attention("cpu")
    assert impl == "torch" and "cpu device" in why and "flash-linear-attention" in why
    choice = select_kernels("cpu")
    assert choice.linear_attention == "torch" and "linear attention: cpu device" in choice.reason
    assert choice.facts()["linear_attention"] == "torch" and choice.facts()["reason"] == choice.reason
    with pytest.raises(ValueError, match="needs a CUDA device"):
        select_linear_attention("cpu", "fla")
    with pytest.raises(ValueError, match="valid: fla, torch"):
        select_linear_attention("cpu", "triton")
    assert select_linear_attention("cpu", "torch")[0] == "torch"


def test_a_kernel_bound_op_is_swapped_for_its_reference_and_back(monkeypatch):
    """transformers' own fallback decorator binds an op to an importable package's function (here math.sqrt
    standing in for a kernel); choosing ``torch`` makes the module run the reference, ``fla`` restores it."""
    import math
    import sys
    import types

    from transformers.integrations.hub_kernels import use_kernel_func_from_hub_with_fallback

    from unified.kernels import apply_linear_attention
    from unified.models.linear_attention import uses_kernel

    def reference(x, **kwargs):
        return -1.0

    module = types.ModuleType("fake_modeling_gdn")
    module.causal_conv1d_fn = use_kernel_func_from_hub_with_fallback("sqrt", "math")(reference)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert uses_kernel(module.causal_conv1d_fn) is True and module.causal_conv1d_fn(4.0) == math.sqrt(4.0)

    assert apply_linear_attention("torch", [module.__name__]) == {"fake_modeling_gdn.causal_conv1d_fn": "reference"}
    assert module.causal_conv1d_fn(4.0) == -1.0
    with pytest.raises(ValueError, match="packed sequences"):
        module.causal_conv1d_fn(4.0, cu_seqlens=[0, 4])
    assert apply_linear_attention("fla", [module.__name__]) == {"fake_modeling_gdn.causal_conv1d_fn": "kernel"}
    assert module.causal_conv1d_fn(9.0) == 3.0


def test_qwen35_gated_deltanet_runs_the_reference_on_cpu_and_says_so():
    from unified.kernels import apply_linear_attention, gated_deltanet_modules
    from unified.models.checkpoint import use_linear_attention
    from unified.models.linear_attention import linear_attention_in_use
    from unified.models.tiny import tiny_moe_model

    model = tiny_moe_model("qwen3_5_moe", num_layers=4)
    modules = gated_deltanet_modules(model)
    assert list(modules.values()) == [2]  # layer_types: linear, full, linear, full
    ids = torch.randint(0, model.config.vocab_size, (1, 80))  # > 64 tokens: two chunks of the delta rule
    before = model(input_ids=ids).logits
    applied = use_linear_attention(model, select_kernels("cpu"))
    assert set(applied.values()) == {"reference"} and len(applied) == 4
    torch.testing.assert_close(model(input_ids=ids).logits, before)
    assert linear_attention_in_use(model) == "torch"
    with pytest.raises(RuntimeError, match="flash-linear-attention was not importable"):
        apply_linear_attention("fla", modules)
    assert linear_attention_in_use(tiny_moe_model("qwen3_moe")) == "none"
