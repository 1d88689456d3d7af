"""The warmup trainer on tiny models: router loss, metrics, checkpoints, wandb, config mapping."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from _warmup_support import (
    build_tiny_trainer,
    completion_length_reward,
    fixture_rl_dataset,
    tiny_overrides,
    tiny_policy,
    token_f1,
)

from unified.config import ConfigError
from unified.warmup.callbacks import METRICS_FILE, read_metrics
from unified.warmup.config import load_warmup_config
from unified.warmup.trainer import build_grpo_config, last_complete_checkpoint, run_warmup


@pytest.fixture()
def restore_env():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


@pytest.mark.parametrize("arch, steps", [("qwen3_moe", 2), ("qwen3_5_moe", 1)])
def test_router_aux_loss_is_on_weighted_and_logged(tmp_path, arch, steps):
    """Zero-variance rewards leave only the router term: loss == coef * aux_loss, logged each step."""
    trainer = build_tiny_trainer(tmp_path, f"train.max_steps={steps}", reward_funcs=[constant_reward], arch=arch)
    assert trainer.aux_loss_enabled and trainer.router_aux_loss_coef == pytest.approx(0.01)
    trainer.train()
    records = [r for r in read_metrics(tmp_path / METRICS_FILE) if "loss" in r]
    assert len(records) == steps
    for r in records:
        assert r["aux_loss"] > 0
        assert r["loss"] == pytest.approx(0.01 * r["aux_loss"], rel=1e-4)
        for key in ("reward", "rewards/constant_reward/mean", "completions/mean_length", "clip_ratio/region_mean",
                    "memory/peak_rss_gib"):
            assert key in r, key


def test_router_aux_loss_can_be_turned_off(tmp_path):
    trainer = build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0", reward_funcs=[constant_reward])
    assert not trainer.aux_loss_enabled
    trainer.train()
    records = [r for r in read_metrics(tmp_path / METRICS_FILE) if "loss" in r]
    assert all("aux_loss" not in r and r["loss"] == 0.0 for r in records)


def test_gradient_checkpointing_trains_the_moe(tmp_path):
    trainer = build_tiny_trainer(tmp_path, "model.gradient_checkpointing=true", "train.max_steps=1",
                                 reward_funcs=[completion_length_reward])
    assert trainer.args.activation_checkpointing
    trainer.train()
    assert trainer.model.is_activation_checkpointing if hasattr(trainer.model, "is_activation_checkpointing") \
        else trainer.model.is_gradient_checkpointing
    (record,) = [r for r in read_metrics(tmp_path / METRICS_FILE) if "loss" in r]
    assert record["grad_norm"] > 0 and record["aux_loss"] > 0


def test_reward_breakdown_of_each_function_is_logged(tmp_path):
    trainer = build_tiny_trainer(tmp_path, "train.max_steps=1", reward_funcs=[token_f1, completion_length_reward])
    trainer.train()
    (record,) = [r for r in read_metrics(tmp_path / METRICS_FILE) if "loss" in r]
    assert "rewards/token_f1/mean" in record and "rewards/completion_length_reward/mean" in record
    assert record["reward"] == pytest.approx(record["rewards/token_f1/mean"]
                                             + record["rewards/completion_length_reward/mean"], rel=1e-5)


def test_run_writes_a_final_hf_dir_that_load_checkpoint_reads(tmp_path):
    from unified.models import load_checkpoint

    model, tok = tiny_policy()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = load_warmup_config(None, tiny_overrides(tmp_path / "run", "train.learning_rate=1e-2",
                                                  "train.save_steps=1"))
    result = run_warmup(cfg, train_dataset=fixture_rl_dataset(), reward_funcs=[completion_length_reward],
                        model=model, tokenizer=tok)
    final = Path(result.final_dir)
    assert final == tmp_path / "run" / "final" and result.global_step == 2
    for name in ("config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"):
        assert (final / name).is_file(), name
    loaded = load_checkpoint(final, device="cpu")
    trained = model.state_dict()
    changed = 0
    for key, value in loaded.model.state_dict().items():
        torch.testing.assert_close(value, trained[key].to(value.dtype))
        changed += not torch.equal(value, before[key])
    assert changed > 0  # the weights moved
    text = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "ls"}], tokenize=False,
                                                add_generation_prompt=True)
    assert "<|im_start|>assistant" in text
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["global_step"] == 2 and run["objective"]["objective"] == "GSPO"
    assert run["kernels"]["linear_attention"] == "none"  # a Qwen3-MoE has no Gated DeltaNet layer
    assert last_complete_checkpoint(tmp_path / "run").name == "checkpoint-2"


def test_policy_kernels_record_the_linear_attention_choice(tmp_path):
    """What run.json's ``kernels`` holds for a Qwen3.5-MoE checkpoint on CPU: the reference, why, and on how many layers."""
    from unified.models.tiny import save_tiny_checkpoint
    from unified.warmup.trainer import load_policy

    ckpt = save_tiny_checkpoint(tmp_path / "qwen3_5_moe", "qwen3_5_moe")
    cfg = load_warmup_config(None, tiny_overrides(tmp_path / "run", f"model.name_or_path={ckpt}"))
    policy = load_policy(cfg, torch.device("cpu"))
    assert policy.kernels["linear_attention"] == "torch" and policy.kernels["linear_attention_layers"] == "1"
    assert "linear attention: cpu device" in policy.kernels["reason"]


@pytest.mark.slow
def test_wandb_is_offline_and_stays_in_the_run_dir(tmp_path, monkeypatch, restore_env):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.chdir(cwd)
    model, tok = tiny_policy()
    out = tmp_path / "run"
    cfg = load_warmup_config(None, tiny_overrides(out, "logging.wandb=true", "train.max_steps=1"))
    run_warmup(cfg, train_dataset=fixture_rl_dataset(), reward_funcs=[token_f1], model=model, tokenizer=tok)
    assert os.environ["WANDB_MODE"] == "offline"
    runs = list((out / "wandb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].rglob("*.wandb"))
    assert not any(cwd.iterdir()), list(cwd.iterdir())
    assert not (home / ".config" / "wandb").exists() and not (home / ".cache" / "wandb").exists()


def test_last_complete_checkpoint_skips_torn_ones(tmp_path):
    def ckpt(step, state):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if state is not None:
            (d / "trainer_state.json").write_text(state)

    ckpt(2, json.dumps({"global_step": 2}))
    ckpt(3, '{"global_st')               # killed while writing the state
    ckpt(4, None)                        # killed before the state
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint
    assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert last_complete_checkpoint(tmp_path / "missing") is None


def test_grpo_config_mapping(tmp_path):
    cfg = load_warmup_config(None, [f"output_dir={tmp_path}", "generation.backend=vllm_server",
                                    "generation.vllm_server_host=node0", "generation.vllm_server_port=8123",
                                    "model.gradient_checkpointing=true", "train.per_device_train_batch_size=8"])
    args = build_grpo_config(cfg, device=torch.device("cpu"), reward_weights=[0.9, 0.1])
    assert (args.importance_sampling_level, args.loss_type, args.beta) == ("sequence", "grpo", 0.0)
    assert (args.epsilon, args.epsilon_high) == (3e-4, 4e-4)
    assert args.use_vllm and args.vllm_mode == "server"
    assert (args.vllm_server_host, args.vllm_server_port) == ("node0", 8123)
    assert args.activation_checkpointing and args.gradient_checkpointing
    assert args.bf16 is False and args.reward_weights == [0.9, 0.1]
    assert args.chat_template_kwargs == {"enable_thinking": False}
    assert args.save_only_model is False  # optimizer state is kept for resuming
    colocate = build_grpo_config(load_warmup_config(None, [f"output_dir={tmp_path}",
                                                           "generation.backend=vllm_colocate"]),
                                 device=torch.device("cpu"))
    assert colocate.vllm_mode == "colocate"


def test_precision_bf16_requires_cuda_or_a_bf16_cpu(tmp_path, monkeypatch):
    from unified.warmup import trainer as trainer_mod

    monkeypatch.setattr(trainer_mod, "cpu_has_bf16", lambda: False)
    cfg = load_warmup_config(None, [f"output_dir={tmp_path}", "model.precision=bf16"])
    with pytest.raises(ValueError, match="CUDA"):
        build_grpo_config(cfg, device=torch.device("cpu"))


@pytest.mark.parametrize("override, message", [
    ("gspo.num_generations=1", "at least 2"),
    ("train.per_device_train_batch_size=3", "multiple of gspo.num_generations"),
    ("gspo.epsilon=1.5", "epsilon"),
    ("resume=/does/not/exist", "resume"),
])
def test_invalid_recipes_are_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        load_warmup_config(None, [override])


@pytest.mark.gpu
def test_bf16_autocast_over_fp32_weights_on_gpu(tmp_path):
    """On CUDA: bf16 autocast (kernels chosen for bf16) over fp32 master weights; a real step runs."""
    from unified.warmup.trainer import load_policy
    from unified.models.tiny import save_tiny_checkpoint

    ckpt = save_tiny_checkpoint(tmp_path / "tiny")
    cfg = load_warmup_config(None, tiny_overrides(tmp_path / "run", f"model.name_or_path={ckpt}",
                                                  "train.max_steps=1"))
    assert build_grpo_config(cfg).bf16 is True
    policy = load_policy(cfg)
    assert next(policy.model.parameters()).dtype == torch.float32
    assert next(policy.model.parameters()).device.type == "cuda"
    result = run_warmup(cfg, train_dataset=fixture_rl_dataset(), reward_funcs=[token_f1], model=policy.model,
                        tokenizer=policy.tokenizer)
    assert result.global_step == 1 and "memory/peak_cuda_gib" in result.peak_memory


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_5_moe"])
def test_resume_restores_the_experts_and_router(tmp_path, arch):
    """Checkpoints store MoE weights in the original per-expert layout; resuming must convert them
    back (the Trainer's plain state-dict load would silently keep the pre-resume experts)."""
    trainer = build_tiny_trainer(tmp_path / "a", arch=arch, seed=0)
    saved = build_tiny_trainer(tmp_path / "b", arch=arch, seed=1).model
    saved.save_pretrained(tmp_path / "checkpoint-1")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer._load_from_checkpoint(str(tmp_path / "checkpoint-1"))
    after = dict(trainer.model.named_parameters())
    expected = dict(saved.named_parameters())
    moe = [n for n in after if "experts" in n or ".gate." in n]
    assert moe, "no MoE parameters found"
    for name in after:
        assert torch.equal(after[name], expected[name]), name
    assert any(not torch.equal(before[n], after[n]) for n in moe)
