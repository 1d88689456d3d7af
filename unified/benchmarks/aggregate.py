"""Aggregates that several benchmarks compute the same way, for adapters' ``aggregate`` methods.

Most multi-trial protocols average per task first, then over tasks ("Avg@k"): with ``s[t, r]``
the score of task ``t`` in trial ``r`` (``k`` trials, ``T`` tasks)::

    Avg@k = 100 * (1/T) * sum_t (1/k) * sum_r s[t, r]

which equals the mean over all episodes only when every task has all ``k`` trials. A protocol
that counts a missing or crashed trial as 0 pads each task to ``k`` (``pad_to``). ``pass@k`` (at
least one of k trials passes) and ``pass^k`` (all k pass) use the unbiased estimators over ``n``
recorded trials with ``c`` passes (Chen et al. 2021, "Evaluating Large Language Models Trained
on Code"; Yao et al. 2024, tau-bench)::

    pass@k = 1 - C(n - c, k) / C(n, k)        pass^k = C(c, k) / C(n, k)

Results are :class:`unified.types.EpisodeResult`; skipped ones never count, errored ones are
kept apart (the report counts them; a protocol that scores them 0 pads instead).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from unified.types import EpisodeResult


def mean_score(results: Iterable[EpisodeResult]) -> dict[str, Any]:
    """The adapter SDK's default aggregate (``Adapter.aggregate``): the mean score in percent over the
    results that were not skipped, ``{"score": 100 * mean(s), "metric": "mean score (%)", "n": count}``.
    Computed from the records alone, so a summary of an adapter that keeps this default needs none of
    its code (:mod:`unified.eval.summarize`)."""
    scored = [r for r in results if r.skipped is None]
    mean = 100.0 * sum(r.score for r in scored) / len(scored) if scored else 0.0
    return {"score": mean, "metric": "mean score (%)", "n": len(scored)}


@dataclass
class Partition:
    """Results split by what happened: scored (neither skipped nor errored), skipped, errored."""

    scored: list[EpisodeResult] = field(default_factory=list)
    skipped: list[EpisodeResult] = field(default_factory=list)
    errored: list[EpisodeResult] = field(default_factory=list)

    @property
    def skipped_tasks(self) -> list[str]:
        """Ids of tasks with a skipped result, sorted."""
        return sorted({r.task_id for r in self.skipped})


def partition(results: Iterable[EpisodeResult]) -> Partition:
    """Split results into scored / skipped / errored (a skipped result is never errored)."""
    out = Partition()
    for r in results:
        (out.skipped if r.skipped is not None else out.errored if r.error is not None else out.scored).append(r)
    return out


def scores_by_task(results: Iterable[EpisodeResult], pad_to: int | None = None) -> dict[str, list[float]]:
    """``{task_id: [score of each trial]}`` in the results' order; with ``pad_to=k`` each task is
    padded with 0.0 up to ``k`` trials (a missing trial counts 0) and cut to ``max(k, n)``."""
    out: dict[str, list[float]] = {}
    for r in results:
        out.setdefault(r.task_id, []).append(float(r.score))
    if pad_to:
        out = {t: v + [0.0] * max(0, pad_to - len(v)) for t, v in out.items()}
    return out


def avg_at_k(by_task: Mapping[str, Sequence[float]]) -> float:
    """``100 * mean_t mean_r s[t, r]`` (module docstring); 0.0 when there is no task."""
    means = [statistics.fmean(v) for v in by_task.values() if v]
    return 100.0 * statistics.fmean(means) if means else 0.0


def per_trial(results: Iterable[EpisodeResult]) -> dict[str, float]:
    """``{str(r): 100 * mean over tasks of trial r}``: each trial's own score (its spread is what
    averaging over trials smooths)."""
    by_trial: dict[int, list[float]] = {}
    for r in results:
        by_trial.setdefault(r.trial, []).append(float(r.score))
    return {str(k): 100.0 * statistics.fmean(v) for k, v in sorted(by_trial.items())}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` trials drawn from ``n`` (``c`` passing) passes; 0 when n < k."""
    if n < k:
        return 0.0
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_pow_k(n: int, c: int, k: int) -> float:
    """Probability that all ``k`` trials drawn from ``n`` (``c`` passing) pass; 0 when n < k."""
    return 0.0 if n < k else math.comb(c, k) / math.comb(n, k)
