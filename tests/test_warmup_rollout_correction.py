"""The vLLM importance-sampling correction as the recipes set it, and the step-1 rollout parity gate.

No vLLM runs on a CPU, so the rollout engine is simulated through TRL's own ``rollout_func`` hook with
``use_vllm`` turned on after the trainer is built: TRL then recomputes the trainer's log-probs of the
returned completions, computes the correction weights from the returned ``logprobs`` (its
``sampling_per_token_logps``) and applies them in the loss, exactly as with vLLM. The engines here:

- *synthetic*: fixed completions, log-probs = the trainer's own minus a per-token mismatch
  ``delta ~ N(-KL, 2 KL)`` (so ``E_rollout[exp(delta)] = 1`` and the per-token KL is ``KL``);
- *bf16 copy*: a bf16 copy of the policy, re-synced from the trainer's weights at every weight sync,
  samples and scores its own completions (the mismatch of a bf16 inference engine against fp32
  training, measured);
- *stale*: another random model's log-probs (an engine that never received the trained weights).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from _warmup_support import build_tiny_trainer, completion_length_reward

from unified.warmup.config import load_warmup_config
from unified.warmup.rollout_check import RolloutParityError, check_rollout_parity, rollout_parity

RECIPES = Path(__file__).resolve().parents[1] / "recipes" / "warmup"


def _recipe_correction(recipe: str) -> list[str]:
    g = load_warmup_config(RECIPES / f"{recipe}.yaml").gspo
    sets = [f"gspo.vllm_importance_sampling_mode={g.vllm_importance_sampling_mode}"]
    for key in ("clip_max", "clip_min"):
        value = getattr(g, f"vllm_importance_sampling_{key}")
        sets.append(f"gspo.vllm_importance_sampling_{key}={'null' if value is None else value}")
    return sets


def _as_vllm(trainer, rollout_func, sync=None):
    """Turn on TRL's vLLM branch of the loss, with ``rollout_func`` as the rollout engine (an engine object
    with ``sync_weights`` and ``sequence_logprobs`` is also TRL's ``vllm_generation``, so the weight-sync
    probe scores with it; a synthetic engine has no weights to probe, and the probe is off)."""
    trainer.use_vllm = True
    trainer.rollout_func = rollout_func
    trainer._last_loaded_step = -1
    if hasattr(rollout_func, "sequence_logprobs"):
        trainer.vllm_generation = rollout_func
    else:
        trainer.vllm_generation = type("Engine", (), {"sync_weights": staticmethod(sync or (lambda: None))})()
        trainer.sync_bounds = (trainer.sync_bounds[0], None)
    return trainer


def _rows(trainer, n):
    return [trainer.train_dataset[i % len(trainer.train_dataset)] for i in range(n)]


def _trainer_logps(trainer, prompt_ids, completion_ids):
    out = []
    for p, c in zip(prompt_ids, completion_ids, strict=True):
        ids = torch.tensor([p + c])
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, torch.ones_like(ids), len(c))
        out.append(logps[0])
    return out


def _prompt_ids(trainer, prompts):
    tok = trainer.processing_class
    return [tok(tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True),
                add_special_tokens=False)["input_ids"] for p in prompts]


def synthetic_engine(lengths: list[int], kl: float, seed: int = 0):
    """Fixed completions of ``lengths`` tokens whose rollout log-probs differ from the trainer's by
    ``delta ~ N(-kl, 2 kl)`` a token."""
    gen = torch.Generator().manual_seed(seed)

    def rollout(prompts, trainer):
        prompt_ids = _prompt_ids(trainer, prompts)
        completions = [torch.randint(10, 400, (lengths[i % len(lengths)],), generator=gen).tolist()
                       for i in range(len(prompts))]
        logprobs = []
        for lp in _trainer_logps(trainer, prompt_ids, completions):
            delta = -kl + math.sqrt(2 * kl) * torch.randn(lp.shape, generator=gen)
            logprobs.append((lp - delta).tolist())  # logp_rollout = logp_train - delta
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": logprobs}

    return rollout


def _generation_batch(trainer):
    return trainer._generate_and_score_completions(_rows(trainer, trainer.args.generation_batch_size))


@pytest.mark.parametrize("length,kl", [
    (1024, 4e-3),  # the same T x KL = 4.1 as below, a quarter of the tokens (CI)
    pytest.param(4096, 1e-3, marks=pytest.mark.slow),  # the case: 4,096 tokens at a per-token KL of 1e-3
])
def test_recipe_correction_keeps_long_completions_weighted(tmp_path, length, kl):
    """Long completions at a per-token KL: the sequence weight exp(sum_t delta) is ~exp(-T x KL) = exp(-4.1)
    there. With the recipes' correction the applied weights stay ~1 and the gradient keeps its size; on the
    same completions TRL's default (sequence_mask, cap 3) would leave them with weights near 0 or masked."""
    settings = _recipe_correction("qwen35_35b_a3b")
    assert _recipe_correction("embedded_cpu") == settings  # one choice, both recipes
    trainer = build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0", f"generation.max_completion_length={length}",
                                 "gspo.num_generations=2", "train.per_device_train_batch_size=4", *settings,
                                 reward_funcs=[completion_length_reward])
    lengths = [length, length * 7 // 8, length, length * 3 // 4]
    _as_vllm(trainer, synthetic_engine(lengths, kl=kl))
    trainer.rollout_bounds = (None, None)
    batch = _generation_batch(trainer)
    weights, mask = batch["importance_sampling_ratio"], batch["completion_mask"].bool()
    parity = rollout_parity(batch["old_per_token_logps"], batch["sampling_per_token_logps"], mask, weights)
    assert parity.mean_sequence_logp_diff < -2.5  # the sequence weights would be ~exp(-3.5 +- 2.6)
    assert parity.mean_logp_diff == pytest.approx(-kl, abs=4 * math.sqrt(2 * kl / parity.tokens))  # 4 SE
    assert 0.9 < parity.mean_weight < 1.1, parity  # ... the recipe's weights are not
    assert (weights[mask] < 0.5).float().mean() < 0.01

    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, batch).backward()
    corrected = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, {**batch, "importance_sampling_ratio": torch.ones_like(weights)}).backward()
    uncorrected = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    cos = sum((a * b).sum() for a, b in zip(corrected, uncorrected)) / math.sqrt(
        sum((a ** 2).sum() for a in corrected) * sum((b ** 2).sum() for b in uncorrected))
    norm_ratio = math.sqrt(sum((a ** 2).sum() for a in corrected) / sum((b ** 2).sum() for b in uncorrected))
    assert cos > 0.95 and 0.8 < norm_ratio < 1.25, (cos, norm_ratio)

    # TRL's default on the same batch: one weight exp(sum_t delta_t) a completion, 0 outside [0, 3]
    delta = torch.where(mask, batch["old_per_token_logps"] - batch["sampling_per_token_logps"], torch.zeros(()))
    default = delta.sum(-1).exp()
    default = torch.where(default > 3.0, torch.zeros(()), default)
    assert (default < 0.5).sum() >= 3, default


def test_parity_statistics_on_hand_made_logps():
    trainer_lp = torch.tensor([[-1.0, -2.0, -3.0, 0.0], [-0.5, -0.5, 0.0, 0.0]])
    rollout_lp = torch.tensor([[-1.1, -1.9, -3.0, 9.0], [-0.5, float("nan"), 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    p = rollout_parity(trainer_lp, rollout_lp, mask, torch.tensor([[0.9, 1.1, 1.0, 5.0], [1.0, 1.0, 7.0, 7.0]]))
    assert p.tokens == 4  # the padded and the NaN positions are left out
    assert p.mean_abs_logp_diff == pytest.approx(0.05)
    assert p.max_abs_logp_diff == pytest.approx(0.1)
    assert p.mean_logp_diff == pytest.approx(0.0, abs=1e-7)
    assert p.mean_weight == pytest.approx(1.0) and p.min_weight == pytest.approx(0.9)
    seq = rollout_parity(trainer_lp, rollout_lp, mask, torch.tensor([[0.5], [1.0]]))
    assert seq.mean_weight == pytest.approx(0.75) and seq.min_weight == pytest.approx(0.5)


def test_gate_messages_name_the_bound():
    p = rollout_parity(torch.zeros(1, 3), torch.full((1, 3), -0.4), torch.ones(1, 3), torch.full((1, 3), 0.3))
    check_rollout_parity(p, max_mean_logp_diff=None, min_mean_weight=None)  # both checks off
    with pytest.raises(RolloutParityError, match=r"mean \|logp_train - logp_rollout\| = 0.4 .*rollout_max_mean_logp_diff = 0.1"):
        check_rollout_parity(p, max_mean_logp_diff=0.1, min_mean_weight=None)
    with pytest.raises(RolloutParityError, match=r"mean importance-sampling weight = 0.3 \(applied mean 0.3, unclipped "
                                                 r"geometric mean 1.492\) < .*rollout_min_mean_weight = 0.5"):
        check_rollout_parity(p, max_mean_logp_diff=1.0, min_mean_weight=0.5)


class Bf16RolloutEngine:
    """A bf16 copy of the policy as the rollout engine: ``sync_weights`` copies the trainer's weights in
    (as TRL's NCCL sync does into vLLM), ``__call__`` samples and returns its own processed log-probs."""

    def __init__(self, trainer, *, stale_model=None, syncs_that_work: int | None = None):
        self.trainer = trainer
        self.engine = copy.deepcopy(stale_model or trainer.model).to(torch.bfloat16).eval()
        # the trainer's model carries accelerate's forward wrapper as an instance attribute, bound to the
        # trainer's own module: without removing it the copy would compute with the trainer's weights
        self.engine.__dict__.pop("forward", None)
        self.stale = stale_model is not None
        self.syncs_that_work = syncs_that_work
        """Break the sync on purpose: copy the weights only on the first N calls (None: always)."""
        self.syncs = 0

    def sync_weights(self):
        self.syncs += 1
        if self.syncs_that_work is not None and self.syncs > self.syncs_that_work:
            return
        if not self.stale:
            with torch.no_grad():
                for mine, theirs in zip(self.engine.parameters(), self.trainer.model.parameters(), strict=True):
                    mine.copy_(theirs)

    @torch.no_grad()
    def sequence_logprobs(self, ids):
        """The engine's log-probs of tokens 2..n of ``ids`` (the weight-sync probe; vLLM: prompt_logprobs)."""
        x = torch.tensor([ids])
        logits = self.engine(input_ids=x).logits[0, :-1].float()
        return logits.log_softmax(-1).gather(-1, x[0, 1:, None]).squeeze(-1).tolist()

    def __call__(self, prompts, trainer):
        tok, args = trainer.processing_class, trainer.args
        prompt_ids = _prompt_ids(trainer, prompts)
        completions, logprobs = [], []
        for ids in prompt_ids:
            x = torch.tensor([ids])
            with torch.no_grad():
                out = self.engine.generate(x, attention_mask=torch.ones_like(x), do_sample=True,
                                           temperature=args.temperature, top_k=0, top_p=1.0,
                                           max_new_tokens=args.max_completion_length, pad_token_id=tok.pad_token_id,
                                           output_logits=True, return_dict_in_generate=True)
            new = out.sequences[0, x.shape[1]:]
            # processed log-probs (vLLM's --logprobs-mode processed_logprobs): after the temperature
            scores = (torch.stack(out.logits, 1)[0].float() / args.temperature).log_softmax(-1)
            keep = len(new)
            eos = torch.isin(new, torch.tensor(trainer.eos_token_ids)).nonzero()
            if len(eos):
                keep = int(eos[0]) + 1
            completions.append(new[:keep].tolist())
            logprobs.append(scores[:keep].gather(-1, new[:keep, None]).squeeze(-1).tolist())
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": logprobs}


def _bf16_trainer(tmp_path, *extra, stale_model=None, syncs_that_work=None):
    trainer = build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0", "generation.max_completion_length=8",
                                 "train.max_steps=2", "train.learning_rate=1e-3", *_recipe_correction("qwen35_35b_a3b"),
                                 *extra, reward_funcs=[completion_length_reward])
    engine = Bf16RolloutEngine(trainer, stale_model=stale_model, syncs_that_work=syncs_that_work)
    return _as_vllm(trainer, engine, engine.sync_weights), engine


def test_bf16_rollouts_pass_the_gate_and_log_the_correction(tmp_path):
    """Two real training steps with the bf16 engine: the gate passes, every step logs the weights and
    the rollout-vs-trainer difference (TRL's sampling/... and ours, rollout/...)."""
    trainer, engine = _bf16_trainer(tmp_path)
    trainer.train()
    assert engine.syncs == 2  # one weight sync a generation batch (a step here)
    logs = [h for h in trainer.state.log_history if "rollout/mean_weight" in h]
    assert len(logs) == 2
    for h in logs:
        assert 0 < h["rollout/mean_abs_logp_diff"] < 0.1  # bf16 against fp32: small, not zero
        assert 0.8 < h["rollout/mean_weight"] < 1.2
        assert h["sampling/importance_sampling_ratio/mean"] == pytest.approx(h["rollout/mean_weight"], rel=1e-4)
        assert "sampling/sampling_logp_difference/mean" in h
        assert 0 < h["rollout/probe_abs_logp_diff"] < 0.1  # the probe after each sync: bf16 against fp32


@pytest.mark.parametrize("probe", ["on", "off"])
def test_gate_stops_at_step_one_when_the_engine_serves_other_weights(tmp_path, probe):
    """An engine that never received the trained weights: the probe after the first sync stops the run; with
    the probe off, the step-1 parity gate on the first batch does."""
    from _warmup_support import tiny_policy

    stale, _ = tiny_policy(seed=7)
    extra = ["monitor.rollout_probe_max_logp_diff=null"] if probe == "off" else []
    trainer, _ = _bf16_trainer(tmp_path, *extra, stale_model=stale)
    expected = r"weights not synced: after the weight sync before step 1 .*probe" if probe == "on" else \
        r"at step 1 failed .*rollout_max_mean_logp_diff"
    with pytest.raises(RolloutParityError, match=expected):
        trainer.train()
    assert trainer.state.global_step == 0  # stopped before the first update


@pytest.mark.parametrize("probe", ["on", "off"])
def test_a_sync_skipped_after_step_one_stops_the_run_at_batch_two(tmp_path, probe):
    """The engine takes the weights at the first sync and then no more (a sync failing silently). Right
    after the second sync the probe finds the engine on step 0's weights; with the probe off, the same
    batch's rollout-vs-trainer difference against batch 1's stops it (``weights not synced`` both times)."""
    from unified.warmup.rollout_check import WeightSyncError

    extra = ["monitor.rollout_probe_max_logp_diff=null"] if probe == "off" else []
    trainer, engine = _bf16_trainer(tmp_path, "train.max_steps=3", "train.learning_rate=3e-2", *extra,
                                    syncs_that_work=1)
    with pytest.raises(WeightSyncError, match="weights not synced: .*step 2") as stopped:
        trainer.train()
    assert trainer.state.global_step == 1 and engine.syncs == 2  # one update, stopped before the second
    assert ("probe sequence" in str(stopped.value)) == (probe == "on")
    ok = [h for h in trainer.state.log_history if "rollout/mean_abs_logp_diff" in h]
    assert len(ok) == 1 and ok[0]["rollout/mean_abs_logp_diff"] < 0.05  # batch 1 passed, synced


def test_sync_gate_bounds():
    from unified.warmup.rollout_check import WeightSyncError, check_probe, check_weight_sync, probe_logp_diff

    check_weight_sync(0.05, 0.02, max_rise=3.0, step=2)  # under max(3 x 0.02, 0.02 + 0.02) = 0.06
    with pytest.raises(WeightSyncError, match=r"weights not synced: at step 2 .* 0.07 nats .*bound 0.06"):
        check_weight_sync(0.07, 0.02, max_rise=3.0, step=2)
    check_weight_sync(9.0, 0.02, max_rise=None, step=2)  # off
    diff, tokens = probe_logp_diff([-1.0, -2.0, -3.0], [-1.1, float("-inf"), -2.7])
    assert diff == pytest.approx(0.2) and tokens == 2
    check_probe(diff, tokens, max_diff=0.25, step=3)
    with pytest.raises(WeightSyncError, match=r"weights not synced: after the weight sync before step 3 .*0.2 nats"):
        check_probe(diff, tokens, max_diff=0.1, step=3)
