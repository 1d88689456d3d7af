"""GSPO as configured on TRL: the sequence ratio, the clipped objective, padding, on-policy ratio 1.

The loss under test is TRL's own (``GRPOTrainer._compute_loss``, reached through the trainer
that :func:`unified.warmup.trainer.build_trainer` configures); the reference formulas below
are written out in the tests, from the GSPO paper:

    s_i = exp( sum_t m_it (logp_it - logp_old_it) / sum_t m_it )
    L   = -(1/B) sum_i min(s_i A_i, clip(s_i, 1 - eps, 1 + eps_high) A_i)
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from _warmup_support import (
    build_tiny_trainer,
    completion_batch,
    completion_length_reward,
    own_token_logps,
    trl_token_logps,
)

EPS, EPS_HIGH = 3e-4, 4e-4


@pytest.fixture()
def trainer(tmp_path):
    return build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0")


def _clip_metric(trainer) -> float:
    return trainer._metrics["train"]["clip_ratio/region_mean"][-1]


def test_recipe_defaults_configure_gspo(trainer):
    args = trainer.args
    assert args.importance_sampling_level == "sequence"
    assert args.loss_type == "grpo"
    assert args.beta == 0.0 and trainer.ref_model is None
    assert (trainer.epsilon_low, trainer.epsilon_high) == (EPS, EPS_HIGH)
    assert args.scale_rewards == "group"
    assert args.bf16 is False  # CPU: fp32


def test_hand_computed_case_matches(trainer):
    """Three sequences, known per-token log-ratios, one inside the clip range, two clipped."""
    inputs = completion_batch([[11, 12, 13], [21, 22], [31, 32, 33, 34]], [1.5, 0.7, -1.2], pad_to=5)
    logps = trl_token_logps(trainer, inputs)
    deltas = torch.tensor([[1e-3, 1e-3, -1.4e-3, 0, 0],       # mean 2e-4  -> s inside [1-3e-4, 1+4e-4]
                           [2e-3, 2e-3, 0, 0, 0],              # mean 2e-3  -> s > 1+eps_high, A > 0: clipped
                           [-1e-3, -1e-3, -1e-3, -1e-3, 0]])   # mean -1e-3 -> s < 1-eps, A < 0: clipped
    garbage = torch.tensor([[0, 0, 0, 7.0, -9.0], [0, 0, 5.0, 5.0, 5.0], [0, 0, 0, 0, 3.0]])
    inputs["old_per_token_logps"] = logps - deltas - garbage  # garbage only where the mask is 0

    loss = trainer._compute_loss(trainer.model, inputs)

    adv = [1.5, 0.7, -1.2]
    lengths = [3, 2, 4]
    expected = 0.0
    for i in range(3):
        s = math.exp(float(deltas[i, :lengths[i]].double().sum()) / lengths[i])
        clipped = min(max(s, 1 - EPS), 1 + EPS_HIGH)
        expected += -min(s * adv[i], clipped * adv[i])
    expected /= 3
    assert loss.item() == pytest.approx(expected, abs=2e-6)
    assert _clip_metric(trainer) == pytest.approx(2 / 3)


def test_gradient_matches_reference_objective(trainer):
    """d(loss)/d(theta) equals the gradient of the GSPO objective written out here."""
    inputs = completion_batch([[11, 12, 13], [21, 22], [31, 32, 33, 34]], [1.5, 0.7, -1.2], pad_to=5, seed=1)
    logps = trl_token_logps(trainer, inputs)
    deltas = torch.tensor([[1e-4, -1e-4, 2e-4, 0, 0], [2e-3, 2e-3, 0, 0, 0], [-1e-4, 0, 1e-4, 0, 0]])
    inputs["old_per_token_logps"] = logps - deltas
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, inputs).backward()
    trl_grads = [p.grad.clone() for p in params]

    trainer.model.zero_grad()
    mask = inputs["completion_mask"].float()
    log_ratio = own_token_logps(trainer.model, inputs) - inputs["old_per_token_logps"]
    s = torch.exp((log_ratio * mask).sum(-1) / mask.sum(-1))
    adv = inputs["advantages"]
    ref_loss = -torch.min(s * adv, torch.clamp(s, 1 - EPS, 1 + EPS_HIGH) * adv).mean()
    ref_loss.backward()
    ref_grads = [p.grad.clone() for p in params]

    norm = max(g.abs().max().item() for g in ref_grads)
    assert norm > 0
    for got, want in zip(trl_grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5 * norm + 1e-7, rtol=1e-3)


def test_padding_never_enters_the_sequence_ratio(trainer):
    """The same sequence unpadded, or padded with junk ids and junk old log-probs: same loss, same grads."""
    ids, adv = [[11, 12, 13], [21, 22, 23, 24]], [0.9, -0.4]
    short = completion_batch(ids, adv, pad_to=4, seed=2)
    long = completion_batch(ids, adv, pad_to=9, seed=2)
    long["completion_ids"][0, 3:] = torch.tensor([150, 151, 152, 153, 154, 155])  # junk tokens under mask 0
    long["completion_ids"][1, 4:] = torch.tensor([160, 161, 162, 163, 164])
    deltas_short = torch.tensor([[1e-4, 1e-4, 1e-4, 0], [-1e-4, 0, 0, 1e-4]])
    short["old_per_token_logps"] = trl_token_logps(trainer, short) - deltas_short
    long_logps = trl_token_logps(trainer, long)
    junk = torch.zeros_like(long_logps)
    junk[0, 3:], junk[1, 4:] = 40.0, -40.0
    long["old_per_token_logps"] = long_logps - torch.nn.functional.pad(deltas_short, (0, 5)) + junk

    def loss_and_grads(batch):
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, batch)
        loss.backward()
        return loss.item(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]

    loss_s, grads_s = loss_and_grads(short)
    clip_s = _clip_metric(trainer)
    loss_l, grads_l = loss_and_grads(long)
    assert loss_l == pytest.approx(loss_s, abs=1e-6)
    assert _clip_metric(trainer) == clip_s == 0.0
    for a, b in zip(grads_s, grads_l, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_one_update_per_generation_ratio_is_exactly_one(trainer):
    """Old log-probs from the same policy: s_i == 1 exactly, so even a zero clip range clips nothing."""
    inputs = completion_batch([[11, 12, 13], [21, 22], [31, 32, 33, 34], [41]], [1.0, -1.0, 0.5, -0.5], pad_to=4)
    inputs["old_per_token_logps"] = trl_token_logps(trainer, inputs)
    trainer.epsilon_low = trainer.epsilon_high = 0.0  # any s_i != 1 on the binding side would now count as clipped
    loss = trainer._compute_loss(trainer.model, inputs)
    assert _clip_metric(trainer) == 0.0
    assert trainer._metrics["train"]["clip_ratio/low_mean"][-1] == 0.0
    assert trainer._metrics["train"]["clip_ratio/high_mean"][-1] == 0.0
    assert loss.item() == pytest.approx(-inputs["advantages"].mean().item(), abs=1e-7)


@pytest.mark.slow
def test_training_clip_fraction_zero_on_policy_and_positive_off_policy(tmp_path):
    """Real rollouts: one update per generation never clips; two updates with a large step do."""
    on = build_tiny_trainer(tmp_path / "on", "model.router_aux_loss_coef=0", "train.max_steps=3",
                            "train.learning_rate=1e-2", "generation.max_completion_length=8",
                            reward_funcs=[completion_length_reward])
    on.train()
    logs = [h for h in on.state.log_history if "clip_ratio/region_mean" in h]
    assert len(logs) == 3 and all(h["clip_ratio/region_mean"] == 0.0 for h in logs)
    assert any(h["reward_std"] > 0 for h in logs)  # the advantages were not all zero

    off = build_tiny_trainer(tmp_path / "off", "model.router_aux_loss_coef=0", "train.max_steps=4",
                             "train.learning_rate=1e-2", "gspo.num_iterations=2", "generation.max_completion_length=8",
                             reward_funcs=[completion_length_reward])
    off.train()
    logs = [h for h in off.state.log_history if "clip_ratio/region_mean" in h]
    assert max(h["clip_ratio/region_mean"] for h in logs) > 0.0


# ---------------------------------------------------------------- several updates per generation (the paper's setting)

RECIPES = ("embedded_cpu", "qwen35_35b_a3b")


def _recipe(name: str):
    from pathlib import Path

    from unified.warmup.config import load_warmup_config

    return load_warmup_config(Path(__file__).resolve().parents[1] / "recipes" / "warmup" / f"{name}.yaml")


@pytest.mark.parametrize("name", RECIPES)
def test_shipped_recipes_take_several_updates_per_generation(name):
    """TRL generates every steps_per_generation x num_iterations micro-steps and steps the optimizer every
    gradient_accumulation_steps: the resolved GRPOConfig of each recipe gives 4 updates a generation batch."""
    from unified.warmup.config import describe, updates_per_generation
    from unified.warmup.trainer import build_grpo_config

    cfg = _recipe(name)
    args = build_grpo_config(cfg, device=torch.device("cpu"))
    k = args.num_iterations * args.steps_per_generation // args.gradient_accumulation_steps
    assert k == updates_per_generation(cfg) == describe(cfg)["updates_per_generation"] == 4
    assert args.steps_per_generation % args.gradient_accumulation_steps == 0
    assert args.importance_sampling_level == "sequence" and (args.epsilon, args.epsilon_high) == (EPS, EPS_HIGH)


def _recipe_schedule(name: str) -> list[str]:
    """The recipe's updates per generation and learning rate, on the tiny trainer's batch (4 completions a step)."""
    from unified.warmup.config import updates_per_generation

    cfg = _recipe(name)
    return [f"gspo.steps_per_generation={updates_per_generation(cfg)}", "train.gradient_accumulation_steps=1",
            f"gspo.num_iterations={cfg.gspo.num_iterations}", f"train.learning_rate={cfg.train.learning_rate}"]


def test_cpu_recipe_schedule_one_generation_feeds_k_updates_that_clip(tmp_path):
    """A real run on the CPU recipe's schedule (4 updates a generation, its learning rate 2e-5, its clip
    range): 4 optimizer steps from 1 generation batch; the first update is on-policy (nothing clipped),
    the later ones are not, and the sequence clip acts (clip fraction > 0)."""
    trainer = build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0", "train.max_steps=4",
                                 "generation.max_completion_length=8", *_recipe_schedule("embedded_cpu"),
                                 reward_funcs=[completion_length_reward])
    generations = []
    generate = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: generations.append(1) or generate(inputs)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "clip_ratio/region_mean" in h]
    assert trainer.state.global_step == 4 and len(generations) == 1
    assert logs[0]["clip_ratio/region_mean"] == 0.0
    assert max(h["clip_ratio/region_mean"] for h in logs[1:]) > 0.0, logs


def test_gspo_and_grpo_gradients_differ_off_policy_and_agree_on_policy(tmp_path):
    """On-policy (the ratio exactly 1) the sequence-level (GSPO) and token-level (GRPO) objectives give the
    same gradient. Off-policy, with the recipe's clip range [1 - 3e-4, 1 + 4e-4]: a sampler whose per-token
    log-probs differ from the policy's by +-1e-3, alternating along each completion, so that each sequence's
    mean log-ratio stays within the clip (0 to +3.3e-4: GSPO clips nothing) while every token's ratio
    exp(+-1e-3) leaves it (GRPO clips the tokens where the clip binds for the advantage's sign). Both
    gradients are non-zero and they differ by a large fraction of their size."""
    trainer = build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0")
    inputs = completion_batch([[11, 12, 13, 14, 15], [21, 22, 23], [31, 32, 33, 34], [41, 42]],
                              [1.0, -1.0, 0.5, -0.5], pad_to=5, seed=4)
    current = trl_token_logps(trainer, inputs)
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    def grads(level, old):
        trainer.importance_sampling_level = level
        trainer.model.zero_grad()
        trainer._compute_loss(trainer.model, {**inputs, "old_per_token_logps": old}).backward()
        return torch.cat([p.grad.flatten() for p in params if p.grad is not None]).clone(), _clip_metric(trainer)

    def rel_diff(a, b):  # relative to the larger of the two norms
        return float((a - b).norm() / torch.maximum(a.norm(), b.norm()))

    (gspo_on, _), (grpo_on, _) = grads("sequence", current), grads("token", current)
    on_policy = rel_diff(gspo_on, grpo_on)
    signs = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0]).expand_as(current)
    sampler = current - 1e-3 * signs  # logp_policy - logp_sampler = +-1e-3 a token
    mask = inputs["completion_mask"].bool()
    seq_log_ratio = ((current - sampler) * mask).sum(-1) / mask.sum(-1)
    assert float(seq_log_ratio.min()) > -EPS and float(seq_log_ratio.max()) < EPS_HIGH  # GSPO: inside the clip
    (gspo, gspo_clip), (grpo, grpo_clip) = grads("sequence", sampler), grads("token", sampler)
    off_policy = rel_diff(gspo, grpo)
    print(f"GSPO vs GRPO gradient: rel diff on-policy {on_policy:.2e}, off-policy {off_policy:.2e}; "
          f"|g| GSPO {float(gspo.norm()):.3e} GRPO {float(grpo.norm()):.3e}; clip GSPO {gspo_clip} GRPO {grpo_clip}")
    assert on_policy < 1e-5, on_policy
    assert float(gspo.norm()) > 0 and float(grpo.norm()) > 0
    assert gspo_clip == 0.0 and grpo_clip > 0.0
    assert rel_diff(gspo, gspo_on) < 1e-2  # GSPO clipped nothing: nearly the on-policy gradient
    assert off_policy > 0.1, off_policy


def test_a_generation_batch_larger_than_the_data_is_refused_not_trained_for_zero_steps(tmp_path, tiny_checkpoint,
                                                                                       capsys):
    """The CPU recipe's 4 updates per generation take 32 completions a batch; 12 fixture trajectories
    with per-process batch 4 and steps_per_generation 32 need 64 prompts: TRL would warn and train 0 steps."""
    from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

    from unified.warmup.__main__ import main

    data = write_fixture_awb_dir(tmp_path / "data")
    args = ["--recipe", str(Path(__file__).parents[1] / "recipes/warmup/embedded_cpu.yaml"),
            *tiny_cli_overrides(tiny_checkpoint, data, tmp_path / "run", "train.max_steps=1",
                                "gspo.steps_per_generation=32")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "one generation batch takes 64" in err and "gspo.steps_per_generation=32" in err, err
    assert not (tmp_path / "run" / "final").exists()
