"""Stop a warmup that has stopped learning: a dead judge, or rewards with no variance in any group.

Two shares are measured on every generation batch (over all ranks: the rewards TRL gathers):

- ``rewards/dropped_share``: samples a judge-backed reward could not score (the judge call failed or its
  answer did not parse; :mod:`unified.rewards.functions`). They get advantage 0. A judge that died
  mid-run drops every sample, and only the rule reward and the router loss still move anything;
- ``rewards/zero_variance_share``: groups (the G completions of one prompt) whose total reward
  ``R_i = sum_k w_k r_k,i`` is the same for every scored sample, or with fewer than two scored samples.
  GSPO's advantage ``(R_i - mean_group R) / std_group R`` is 0 throughout such a group: no gradient.

:class:`FailFastMonitor` counts the generation batches in a row over ``monitor.max_dropped_share``
(above it) or at ``monitor.max_zero_variance_share`` (at least it); after ``monitor.patience_batches``
it asks the Trainer, at the end of the optimizer step that batch fed, to save a checkpoint and stop.
``python -m unified.warmup`` then prints the reason and exits with status 3; ``run.json`` records it
under ``stopped`` and the step's ``metrics.jsonl`` record carries ``monitor/stopped = 1``. Rerunning the
same command once the cause is fixed resumes from that checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainerCallback

STOP_EXIT_STATUS = 3
"""``python -m unified.warmup``'s exit status when a fail-fast monitor stopped the run."""


def zero_variance_share(rewards: torch.Tensor, weights: torch.Tensor, group_size: int, atol: float = 1e-6) -> float:
    """Share of groups without reward signal. ``rewards`` (B x K, NaN = not scored, B a multiple of
    ``group_size``), ``weights`` (K,): a group's scored rows have ``R = nansum_k w_k r_k``; it has no
    signal when fewer than two rows are scored or ``max R - min R <= atol``."""
    if rewards.numel() == 0:
        return 0.0
    scored = ~torch.isnan(rewards).all(dim=1)
    total = (torch.nan_to_num(rewards) * weights.to(rewards.device, rewards.dtype)).sum(dim=1)
    total, scored = total.view(-1, group_size), scored.view(-1, group_size)
    big = torch.finfo(total.dtype).max
    spread = torch.where(scored, total, -big).max(dim=1).values - torch.where(scored, total, big).min(dim=1).values
    flat = (scored.sum(dim=1) < 2) | (spread <= atol)
    return float(flat.float().mean())


@dataclass
class ShareWatch:
    """Consecutive generation batches whose ``metric`` crossed ``limit`` (``above``: strictly greater)."""

    metric: str
    setting: str
    limit: float | None
    above: bool
    why: str
    run: list[float] = field(default_factory=list)

    def observe(self, share: float) -> None:
        if self.limit is None:
            return
        crossed = share > self.limit if self.above else share >= self.limit
        self.run = [*self.run, share] if crossed else []

    def reason(self, patience: int) -> str | None:
        if len(self.run) < patience:
            return None
        shares = ", ".join(f"{s:.3g}" for s in self.run[-patience:])
        return (f"{self.metric} {'>' if self.above else '>='} {self.setting}={self.limit:g} for {patience} "
                f"generation batches in a row ({shares}): {self.why}")


class FailFastMonitor(TrainerCallback):
    """Save and stop after ``patience`` generation batches over a share's bound (module docstring)."""

    def __init__(self, *, max_dropped_share: float | None, max_zero_variance_share: float | None, patience: int):
        self.patience = patience
        self.watches = [
            ShareWatch("rewards/dropped_share", "monitor.max_dropped_share", max_dropped_share, True,
                       "the judge-backed reward could not score the samples (the judge is down, timing out or "
                       "answering unparseably; its <name>_detail column in the completions says why)"),
            ShareWatch("rewards/zero_variance_share", "monitor.max_zero_variance_share", max_zero_variance_share,
                       False, "every group's completions got the same reward, so every advantage is 0 (a reward "
                       "that is constant, or a policy whose completions no longer differ)"),
        ]
        self.reason: str | None = None
        self.extra_logs: dict[str, float] | None = None
        """The trainer's ``extra_logs`` (the stopping step's record gets ``monitor/stopped``)."""
        self.outcome: dict[str, Any] = {}
        """``{"step", "reason", "checkpoint"}`` once the run was stopped."""

    def observe(self, shares: dict[str, float]) -> None:
        """One generation batch's shares (``metric -> share``; a metric not measured leaves its count)."""
        for watch in self.watches:
            if watch.metric in shares:
                watch.observe(shares[watch.metric])
        if self.reason is None:
            self.reason = next((r for w in self.watches if (r := w.reason(self.patience))), None)

    def on_step_end(self, args, state, control, **kwargs):
        if self.reason is None or self.outcome:
            return control
        control.should_save = True
        control.should_training_stop = True
        control.should_log = True
        if self.extra_logs is not None:
            self.extra_logs["monitor/stopped"] = 1.0
        self.outcome = {"step": state.global_step, "reason": self.reason,
                        "checkpoint": f"{args.output_dir}/checkpoint-{state.global_step}"}
        if state.is_world_process_zero:
            print(f"unified.warmup: stopping at step {state.global_step}: {self.reason}; saving "
                  f"{self.outcome['checkpoint']}", flush=True)
        return control


def stop_message(stopped: dict[str, Any]) -> str:
    """The CLI's last line for a run a monitor stopped."""
    return (f"unified.warmup: stopped at step {stopped['step']}: {stopped['reason']}. Checkpoint: "
            f"{stopped['checkpoint']}; fix the cause and rerun the same command to resume from it")


__all__ = ["STOP_EXIT_STATUS", "FailFastMonitor", "ShareWatch", "stop_message", "zero_variance_share"]
