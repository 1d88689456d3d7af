"""``python -m unified.eval``: benchmark adapters found by entry point, the runner, results, reports.

The adapter contract lives in :mod:`unified.eval.adapter` (re-exported here).
"""

from unified.eval.adapter import (
    ENTRY_POINT_GROUP,
    SUITES,
    Adapter,
    BenchmarkUnavailable,
    Environment,
    Task,
    expand_benchmarks,
    load_adapter,
    registered_benchmarks,
)

__all__ = [
    "ENTRY_POINT_GROUP", "SUITES", "Adapter", "BenchmarkUnavailable", "Environment", "Task", "expand_benchmarks",
    "load_adapter", "registered_benchmarks",
]
