"""The rollout engine against the trainer: the importance-sampling weights, and the step-1 parity gate.

With vLLM rollouts TRL recomputes each completion's per-token log-probs with the trainer's weights,
``logp_train`` (``old_per_token_logps``, B x T), next to the rollout engine's own, ``logp_vllm``
(``sampling_per_token_logps``, B x T), and multiplies each token's loss by a weight ``w``
(``gspo.vllm_importance_sampling_mode``, ``..._clip_min``/``..._clip_max`` = [C_min, C_max]):

    delta_t = logp_train_t - logp_vllm_t                       (0 under the mask m_t = 0)
    token_*:     w_t = clip(exp(delta_t), C_min, C_max)        per token
    sequence_*:  w   = clip(exp(sum_t m_t delta_t), ...)       one weight per completion
    *_mask:      a weight outside [C_min, C_max] becomes 0 instead of being clipped

On the tokens vLLM sampled, ``E[delta_t] = -KL(pi_vllm || pi_train)`` per token, so a sequence weight
is ``~exp(-T x KL)``: at T = 4,096 tokens it is ~0.66 at a per-token KL of 1e-4 and ~0.02 at 1e-3,
which silences long completions; the token weights stay ~1 whatever T. The recipes use
``token_truncate`` with C_max = 2 for that reason.

:func:`rollout_parity` summarises one generation batch (what TRL logs as ``sampling/...`` plus the
sequence-level view): mean and max ``|delta|``, the mean per-token ``delta`` (an estimate of
``-KL``), the mean per-sequence ``sum_t delta_t`` and the sequence weight ``exp`` of it that the
sequence modes would apply, and the applied weights. :func:`check_rollout_parity` is the **step-1
gate**: after the first weight sync the two log-probs of the same tokens must nearly agree; a mean
``|delta|`` above ``monitor.rollout_max_mean_logp_diff`` or a mean applied weight below
``monitor.rollout_min_mean_weight`` means the engine does not sample from the trained weights (a
sync that did not happen, the wrong checkpoint served, a changed logprobs API or mode), and the run
stops with :class:`RolloutParityError` before its first update rather than training on a correction
that has silenced the loss. The weight it reads is the smaller of the mean applied weight and the
geometric mean of the *unclipped* per-token weights, ``exp(mean_t delta_t)`` (about ``exp(-KL)``): under
``token_truncate`` the applied weights are capped at C_max and have no floor, so their mean stays near
1 even for an engine on other weights and could never fall below the bound.

A sync that works at step 1 can fail later, so two checks run on **every** generation batch
(:class:`WeightSyncError`, "weights not synced"):

- :func:`check_weight_sync`: the batch's mean ``|delta|`` against batch 1's, measured right after the
  first sync, when both sides hold the same checkpoint: an engine left on older weights drifts further
  from the trainer with every update (``monitor.rollout_max_logp_diff_rise``);
- :func:`check_probe`: right after each sync the rollout engine scores a fixed probe sequence and the
  trainer scores it too; their mean per-token ``|difference|`` must stay below
  ``monitor.rollout_probe_max_logp_diff`` (kernels and bf16 give ~1e-2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


class RolloutParityError(RuntimeError):
    """The rollout engine's log-probs disagree with the trainer's beyond the recipe's bounds."""


class WeightSyncError(RolloutParityError):
    """After a weight sync the rollout engine does not hold the trainer's weights."""

    HINT = ("Check the trainer-to-engine weight sync (TRL's NCCL update_named_param for trl vllm-serve, "
            "load_weights in colocate mode): it failed or was skipped without an error.")


@dataclass(frozen=True)
class RolloutParity:
    """One generation batch's rollout-vs-trainer agreement (all over the completion tokens)."""

    tokens: int
    mean_abs_logp_diff: float
    """mean_t |logp_train - logp_vllm|."""
    max_abs_logp_diff: float
    mean_logp_diff: float
    """mean_t (logp_train - logp_vllm): about -KL(pi_vllm || pi_train) per token."""
    mean_sequence_logp_diff: float
    """mean over completions of sum_t (logp_train - logp_vllm)."""
    mean_sequence_weight: float
    """mean over completions of exp(sum_t delta_t): TRL's sequence-level weight before clipping."""
    mean_weight: float
    """mean of the weights the loss applies (per token in token modes, per completion in sequence modes)."""
    min_weight: float
    geometric_mean_token_weight: float = 1.0
    """exp(mean_t delta_t): the typical unclipped per-token weight (about exp(-KL)); what TRL's clip
    cannot hide."""

    def gate_weight(self) -> float:
        """The weight the step-1 gate compares with ``monitor.rollout_min_mean_weight``."""
        return min(self.mean_weight, self.geometric_mean_token_weight)

    def metrics(self) -> dict[str, float]:
        """The log-record keys (``rollout/...``; TRL's own are ``sampling/...``)."""
        return {f"rollout/{k}": float(v) for k, v in asdict(self).items()}


def rollout_parity(trainer_logps: torch.Tensor, rollout_logps: torch.Tensor, mask: torch.Tensor,
                   weights: torch.Tensor | None = None) -> RolloutParity:
    """The agreement of ``trainer_logps`` and ``rollout_logps`` (B x T) over ``mask`` (B x T, 1 = token);
    ``weights`` (B x T or B x 1): the correction TRL computed (None: not applied, taken as 1).
    Tokens whose rollout log-prob is NaN (vLLM could not score them) are left out, as TRL does."""
    m = mask.bool() & ~torch.isnan(rollout_logps)
    delta = torch.where(m, trainer_logps.float() - torch.nan_to_num(rollout_logps.float()), torch.zeros(()))
    tokens = int(m.sum())
    if tokens == 0:
        return RolloutParity(0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0)
    seq = delta.sum(-1)  # (B,)
    has_tokens = m.any(-1)
    if weights is None:
        applied = torch.ones(tokens)
    elif weights.shape[-1] == 1 and delta.shape[-1] != 1:  # a sequence mode: one weight per completion
        applied = weights.reshape(-1)[has_tokens].float()
    else:
        applied = weights.float()[m]
    return RolloutParity(
        tokens=tokens,
        mean_abs_logp_diff=float(delta.abs()[m].mean()),
        max_abs_logp_diff=float(delta.abs()[m].max()),
        mean_logp_diff=float(delta[m].mean()),
        mean_sequence_logp_diff=float(seq[has_tokens].mean()),
        mean_sequence_weight=float(seq[has_tokens].exp().mean()),
        mean_weight=float(applied.mean()),
        min_weight=float(applied.min()),
        geometric_mean_token_weight=float(torch.exp(delta[m].mean())),
    )


def check_rollout_parity(parity: RolloutParity, *, max_mean_logp_diff: float | None,
                         min_mean_weight: float | None, step: int = 1) -> None:
    """The step-1 gate: raise :class:`RolloutParityError` naming what is out of bounds and why it matters."""
    problems = []
    if max_mean_logp_diff is not None and parity.mean_abs_logp_diff > max_mean_logp_diff:
        problems.append(f"mean |logp_train - logp_rollout| = {parity.mean_abs_logp_diff:.4g} nats per token "
                        f"> monitor.rollout_max_mean_logp_diff = {max_mean_logp_diff:g} (max "
                        f"{parity.max_abs_logp_diff:.3g})")
    if min_mean_weight is not None and parity.gate_weight() < min_mean_weight:
        problems.append(f"mean importance-sampling weight = {parity.gate_weight():.4g} (applied mean "
                        f"{parity.mean_weight:.4g}, unclipped geometric mean {parity.geometric_mean_token_weight:.4g}) "
                        f"< monitor.rollout_min_mean_weight = {min_mean_weight:g} (the correction would silence "
                        "the loss, or only its clip hides the mismatch)")
    if problems:
        raise RolloutParityError(
            f"unified.warmup: rollout parity check at step {step} failed over {parity.tokens} completion tokens: "
            + "; ".join(problems)
            + ". The rollout engine does not sample from the weights being trained: check that the trainer's "
              "weights reached it (trl vllm-serve started on the same checkpoint, the NCCL weight sync not "
              "failing silently), that TRL and vLLM are the locked versions (the logprobs API), and that the "
              "server runs with --logprobs-mode processed_logprobs. Bounds: monitor.rollout_max_mean_logp_diff / "
              "monitor.rollout_min_mean_weight (null turns a check off).")


def check_weight_sync(mean_abs_logp_diff: float, baseline: float, *, max_rise: float | None, step: int) -> None:
    """Every generation batch after the first: raise :class:`WeightSyncError` when the batch's mean
    ``|logp_train - logp_rollout|`` exceeds ``max(max_rise x baseline, baseline + 0.02)`` (``baseline``:
    batch 1's, right after the first sync)."""
    if max_rise is None:
        return
    bound = max(max_rise * baseline, baseline + 0.02)
    if mean_abs_logp_diff > bound:
        raise WeightSyncError(
            f"unified.warmup: weights not synced: at step {step} the rollout engine's log-probs differ from the "
            f"trainer's by {mean_abs_logp_diff:.4g} nats per token, against {baseline:.4g} right after the first "
            f"sync (bound {bound:.4g} = max(monitor.rollout_max_logp_diff_rise = {max_rise:g} x batch 1, batch 1 + "
            f"0.02)): the engine samples from older weights than the trainer's. " + WeightSyncError.HINT)


def probe_logp_diff(trainer_logps: list[float], rollout_logps: list[float]) -> tuple[float, int]:
    """Mean |trainer - rollout| per-token log-prob of the probe sequence over the positions both scored
    (a position the engine could not score, -inf or NaN, is left out), and how many."""
    pairs = [(a, b) for a, b in zip(trainer_logps, rollout_logps, strict=True)
             if math.isfinite(a) and math.isfinite(b)]
    if not pairs:
        return float("inf"), 0
    return sum(abs(a - b) for a, b in pairs) / len(pairs), len(pairs)


def check_probe(diff: float, tokens: int, *, max_diff: float | None, step: int) -> None:
    """Right after a weight sync: raise :class:`WeightSyncError` when the engine's log-probs of the probe
    sequence differ from the trainer's by ``diff`` (:func:`probe_logp_diff`, over ``tokens``) > ``max_diff``."""
    if max_diff is not None and not diff <= max_diff:
        raise WeightSyncError(
            f"unified.warmup: weights not synced: after the weight sync before step {step} the rollout engine "
            f"scores the probe sequence {diff:.4g} nats per token away from the trainer ({tokens} tokens; "
            f"monitor.rollout_probe_max_logp_diff = {max_diff:g}). " + WeightSyncError.HINT)
