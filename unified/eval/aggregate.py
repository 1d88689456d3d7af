"""Deprecated: SDK 0.1's shared aggregates, now in :mod:`unified.benchmarks` (removed in SDK 0.3).

Importing this module prints one deprecation line saying what to change:
``from unified.eval.aggregate import X`` -> ``from unified.benchmarks import X`` (the same objects).
"""

from unified.benchmarks import Partition, avg_at_k, partition, pass_at_k, pass_pow_k, per_trial, scores_by_task
from unified.benchmarks.compat import warn_moved_module

__all__ = ["Partition", "avg_at_k", "partition", "pass_at_k", "pass_pow_k", "per_trial", "scores_by_task"]

warn_moved_module(__name__)
