"""``python -m unified.eval``: benchmark adapters found by entry point, the runner, results, reports.

The adapter contract lives in :mod:`unified.contracts`; finding adapters and their suites in
:mod:`unified.eval.adapter`; ``docs/adapters.md`` walks through an outside adapter package.
"""

from unified.eval.adapter import declared_suites, expand_benchmarks, load_adapter, registered_benchmarks

__all__ = ["declared_suites", "expand_benchmarks", "load_adapter", "registered_benchmarks"]
