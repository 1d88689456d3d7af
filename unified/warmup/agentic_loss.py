"""GSPO's loss over agent episodes: masked token trajectories, group advantages, sequence ratio.

An episode i of a task's group (G episodes) is one token trajectory (``unified.types.TokenTrajectory``):
prompt ids x (P tokens), response ids y (R tokens), mask m in {0, 1}^R (1: the policy generated the
token; 0: a tool observation, a user turn or template markup the environment added), the
sampler's log-probs l_sampler (R,) (0 where m = 0) and the trainer's l_old (below). With the episode's reward r_i (its benchmark score,
:attr:`unified.types.EpisodeResult.reward`):

.. math::

    A_i = \\frac{r_i - \\mathrm{mean}_g(r)}{\\mathrm{std}_g(r) + \\delta}, \\qquad
    \\log s_i(\\theta) = \\frac{1}{|y_i|_m} \\sum_t m_t\\,(\\log \\pi_\\theta(y_t \\mid x, y_{<t}) - l^{old}_t),
    \\qquad |y_i|_m = \\sum_t m_t

    L(\\theta) = -\\frac{1}{N} \\sum_i \\min\\big(s_i A_i,\\ \\mathrm{clip}(s_i, 1 - \\epsilon, 1 + \\epsilon_h) A_i\\big)

(Zheng et al., 2025, "Group Sequence Policy Optimization", arXiv:2507.18071, eq. 5-7, with the
sequence over the policy's own tokens only). A masked token enters the ratio with weight 0, so its
log-probability gets no gradient (``tests/test_agentic.py`` checks it); it is still context for the
tokens after it.

``l_old`` is the *trainer's* log-probability of the token at the start of the step (no gradient), not
the sampler's, so s_i = 1 on the step's first update whatever engine sampled the episode. The gap
between the sampler (batched decoding, bf16 kernels, another engine) and the trainer is corrected
separately, by token-level truncated importance sampling (TRL's ``token_truncate``, which the
single-turn recipe uses through :mod:`unified.warmup.gspo_trainer`):

.. math::

    w_t = \\min\\big(\\max(\\exp(l^{old}_t - l^{sampler}_t),\\ C_{min}),\\ C_{max}\\big), \\qquad
    \\bar w_i = \\frac{1}{|y_i|_m} \\sum_t m_t w_t

and episode i's term is multiplied by the (detached) :math:`\\bar w_i`. With ``l_old`` the sampler's
numbers, a gap of KL 1e-3 alone pushes s_i out of a 3e-4/4e-4 clip range and zeroes most episodes'
gradient. Groups whose rewards are all equal have A = 0 and add nothing; a None reward (skipped or
crashed episode) leaves the episode out of its group. N counts episodes: an episode split into several
samples (a chat template that rewrote an earlier turn) weighs each of its k samples 1/k.
"""

from __future__ import annotations

import math

import torch

ADVANTAGE_EPS = 1e-4
"""delta of the advantage's denominator (TRL's)."""


def group_advantages(rewards: list[float | None], groups: list[str]) -> list[float | None]:
    """A_i per episode (None for a None reward), normalised within episodes of the same group key."""
    out: list[float | None] = [None] * len(rewards)
    for key in dict.fromkeys(groups):
        members = [i for i, g in enumerate(groups) if g == key and rewards[i] is not None]
        values = [float(rewards[i]) for i in members]  # type: ignore[arg-type]
        if not values:
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        for i, v in zip(members, values):
            out[i] = (v - mean) / (std + ADVANTAGE_EPS)
    return out


def zero_variance(rewards: list[float | None], atol: float = 1e-6) -> bool:
    """A group without signal: fewer than two scored episodes, or all scored rewards within ``atol``."""
    values = [float(r) for r in rewards if r is not None]
    return len(values) < 2 or max(values) - min(values) <= atol


def masked_token_logprobs(model, prompt_ids: list[int], response_ids: list[int], *,
                          temperature: float = 1.0) -> torch.Tensor:
    """log pi_theta(y_t | x, y_<t) for every response token, shape (R,), from one forward pass over x + y
    (logits divided by ``temperature``, the distribution the sampler drew from at top-p 1)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids + response_ids], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, len(prompt_ids):, None])[:, 0]


def truncated_is_weights(trainer_logps: torch.Tensor, sampler_logps: torch.Tensor | None, mask: torch.Tensor, *,
                         clip_max: float | None, clip_min: float | None = None) -> torch.Tensor | None:
    """w_t of the module docstring (R,), 0 where the mask is 0, no gradient; None without sampler log-probs."""
    if sampler_logps is None:
        return None
    diff = trainer_logps.detach() - sampler_logps.to(trainer_logps)
    weights = torch.exp(diff.clamp(max=80.0))
    if clip_min is not None or clip_max is not None:
        weights = weights.clamp(min=clip_min, max=clip_max)
    return weights * mask.to(weights.dtype)


def gspo_sequence_loss(new_logps: torch.Tensor, old_logps: torch.Tensor | None, mask: torch.Tensor,
                       advantage: float, *, epsilon: float, epsilon_high: float,
                       token_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, bool]:
    """-min(s A, clip(s) A) of one episode (module docstring) and whether the clip was active, times the mean
    of ``token_weights`` over the mask (the sampler correction w_t) when given.
    ``old_logps`` None: the trainer's own (detached) log-probs, s = 1."""
    mask = mask.to(new_logps.dtype)
    old = new_logps.detach() if old_logps is None else old_logps.to(new_logps)
    tokens = mask.sum().clamp(min=1.0)
    log_ratio = ((new_logps - old) * mask).sum() / tokens
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    loss = -torch.min(ratio * advantage, clipped * advantage)
    if token_weights is not None:
        loss = loss * ((token_weights.detach().to(loss) * mask).sum() / tokens)
    return loss, bool((ratio.detach() != clipped.detach()).item())


__all__ = ["ADVANTAGE_EPS", "group_advantages", "gspo_sequence_loss", "masked_token_logprobs", "truncated_is_weights",
           "zero_variance"]
