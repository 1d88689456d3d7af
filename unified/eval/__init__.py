"""``python -m unified.eval``: benchmark adapters found by entry point, the runner, results, reports.

The adapter contract lives in :mod:`unified.contracts`; finding adapters in :mod:`unified.eval.adapter`.
"""

from unified.eval.adapter import SUITES, expand_benchmarks, load_adapter, registered_benchmarks

__all__ = ["SUITES", "expand_benchmarks", "load_adapter", "registered_benchmarks"]
