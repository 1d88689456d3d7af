"""The step-0 parity probe (unified.warmup.parity_probe): our engine's KV-cache decoding (with and without
the prefix cache) against the trainer's one-forward log-probs, on tiny random MoEs."""

from __future__ import annotations

import json
import math

import pytest
import torch

from _moe_support import perturbed, tiny_model
from unified.warmup.parity_probe import (
    PROBE_RECORD, ParityProbeError, check_probe, compare, probe_in_process, probe_trainer,
)


def full_forward_logps(model):
    def logps(ids: torch.Tensor, n: int) -> torch.Tensor:
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, -n - 1:-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[0, -n:, None]).squeeze(-1)
    return logps


PROMPTS = [torch.tensor([5, 9, 17, 33, 40, 41]), torch.tensor([7, 8, 60, 2, 3])]


@pytest.mark.parametrize("arch, engines", [("mixtral", ["hf", "hf+prefix_cache"]), ("qwen3_5_moe", ["hf"])])
def test_the_engine_agrees_with_the_trainer_on_the_same_weights(arch, engines):
    """Mixtral's plain KV cache is probed with and without the prefix cache; Qwen3.5's linear-attention
    state cannot be cut to a prefix, so only without."""
    model = tiny_model(arch)
    results = probe_in_process(model, PROMPTS, full_forward_logps(model), new_tokens=5)
    assert [r.engine for r in results] == engines
    for r in results:
        assert r.sequences == 2 and r.tokens == 10 and r.nan_count == 0
        assert r.mean_abs_logp_diff < 1e-4 and r.max_abs_logp_diff < 1e-3
    check_probe(results, max_mean_abs_logp_diff=0.05, max_nan=0)


def test_an_engine_on_other_weights_is_refused_with_the_numbers():
    engine = tiny_model("mixtral")
    trainer = perturbed(engine, scale=2.0)
    with torch.no_grad():  # and other expert weights: a stale or wrong checkpoint
        for p in trainer.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    results = probe_in_process(engine, PROMPTS, full_forward_logps(trainer), new_tokens=5)
    assert all(r.mean_abs_logp_diff > 0.01 for r in results)
    with pytest.raises(ParityProbeError, match=r"hf: mean \|logp_trainer - logp_engine\| = .* > "
                                               r"parity_probe.max_mean_abs_logp_diff = 0.01"):
        check_probe(results, max_mean_abs_logp_diff=0.01, max_nan=0)


def test_nan_log_probs_are_counted_and_refused():
    result = compare("vllm+prefix_cache", [torch.tensor([-1.0, math.nan, -2.0])], [torch.tensor([-1.0, -3.0, -2.0])])
    assert result.nan_count == 1 and result.tokens == 3 and result.mean_abs_logp_diff == 0.0
    with pytest.raises(ParityProbeError, match="vllm\\+prefix_cache: 1 NaN log-probs > parity_probe.max_nan = 0"):
        check_probe([result], max_mean_abs_logp_diff=None, max_nan=0)
    check_probe([result], max_mean_abs_logp_diff=None, max_nan=1)


def test_the_trainer_probe_scores_trl_prompts_and_writes_its_record(tmp_path):
    from _warmup_support import build_tiny_trainer, fixture_rl_dataset
    from unified.warmup.config import load_warmup_config

    trainer = build_tiny_trainer(tmp_path, "parity_probe.sequences=2", "parity_probe.completion_tokens=4")
    section = load_warmup_config(None, ["parity_probe.sequences=2", "parity_probe.completion_tokens=4"]).parity_probe
    results = probe_trainer(trainer, section, fixture_rl_dataset(), backend="hf", output_dir=tmp_path)
    assert [r.engine for r in results] == ["hf", "hf+prefix_cache"]
    assert all(r.tokens == 8 and r.mean_abs_logp_diff < 1e-3 for r in results)
    record = json.loads((tmp_path / PROBE_RECORD).read_text())
    assert record["bounds"] == {"max_mean_abs_logp_diff": 0.05, "max_nan": 0} and len(record["results"]) == 2
    assert probe_trainer(trainer, section, fixture_rl_dataset(), backend="vllm_server") == []
