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
that has silenced the loss.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch


class RolloutParityError(RuntimeError):
    """The rollout engine's log-probs disagree with the trainer's beyond the recipe's bounds."""


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
    )


def check_rollout_parity(parity: RolloutParity, *, max_mean_logp_diff: float | None,
                         min_mean_weight: float | None, step: int = 1) -> None:
    """The step-1 gate: raise :class:`RolloutParityError` naming what is out of bounds and why it matters."""
    problems = []
    if max_mean_logp_diff is not None and parity.mean_abs_logp_diff > max_mean_logp_diff:
        problems.append(f"mean |logp_train - logp_rollout| = {parity.mean_abs_logp_diff:.4g} nats per token "
                        f"> monitor.rollout_max_mean_logp_diff = {max_mean_logp_diff:g} (max "
                        f"{parity.max_abs_logp_diff:.3g})")
    if min_mean_weight is not None and parity.mean_weight < min_mean_weight:
        problems.append(f"mean importance-sampling weight = {parity.mean_weight:.4g} < "
                        f"monitor.rollout_min_mean_weight = {min_mean_weight:g} (the correction would silence "
                        "the loss)")
    if problems:
        raise RolloutParityError(
            f"unified.warmup: rollout parity check at step {step} failed over {parity.tokens} completion tokens: "
            + "; ".join(problems)
            + ". The rollout engine does not sample from the weights being trained: check that the trainer's "
              "weights reached it (trl vllm-serve started on the same checkpoint, the NCCL weight sync not "
              "failing silently), that TRL and vLLM are the locked versions (the logprobs API), and that the "
              "server runs with --logprobs-mode processed_logprobs. Bounds: monitor.rollout_max_mean_logp_diff / "
              "monitor.rollout_min_mean_weight (null turns a check off).")
