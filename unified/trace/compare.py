"""Two runs side by side: benchmark deltas and prediction-accuracy deltas.

Like the study's SFT vs +LWM RL table: for every benchmark either run scored, the headline
score of A, of B and B - A; then the same for the prediction statistics of
:meth:`unified.trace.stats.RunTrace.stats` (overall, explicit only, implicit only).
"""

from __future__ import annotations

from typing import Any

from unified.trace.stats import RunTrace

PREDICTION_METRICS = ("prediction_rate", "accuracy", "mean_score", "self_corrections_per_step")
"""The prediction statistics compared (see :mod:`unified.trace.stats` for their definitions)."""


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def compare_runs(a: RunTrace, b: RunTrace) -> dict[str, list[dict[str, Any]]]:
    """``{"benchmarks": rows, "predictions": rows}``; each row has ``a``, ``b`` and ``delta`` (B - A)."""
    sa, sb = a.benchmark_scores(), b.benchmark_scores()
    bench_rows = [{"benchmark": name, "a": sa.get(name), "b": sb.get(name), "delta": _delta(sa.get(name), sb.get(name))}
                  for name in sorted(set(sa) | set(sb))]
    task_a, task_b = a.stats()["task_score_mean"], b.stats()["task_score_mean"]
    if bench_rows:
        bench_rows.append({"benchmark": "mean episode score (0..1)", "a": task_a, "b": task_b,
                           "delta": _delta(task_a, task_b)})
    pred_rows = []
    for kind in (None, "explicit", "implicit"):
        xa, xb = a.stats(kind), b.stats(kind)
        for metric in PREDICTION_METRICS:
            if kind is not None and metric == "self_corrections_per_step":
                continue
            pred_rows.append({"kind": kind or "all", "metric": metric, "a": xa[metric], "b": xb[metric],
                              "delta": _delta(xa[metric], xb[metric])})
    return {"benchmarks": bench_rows, "predictions": pred_rows}
