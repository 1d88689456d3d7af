"""Deprecated: SDK 0.1's adapter discovery and helpers, now in :mod:`unified.benchmarks` (removed in SDK 0.3).

Importing this module prints one deprecation line saying what to change:
``from unified.eval.adapter import X`` -> ``from unified.benchmarks import X`` (the same objects).
"""

from unified.benchmarks import (ALL_SUITE, ENTRY_POINT_GROUP, STUDY_SUITES, Adapter, BenchmarkUnavailable, Task,
                                adapter_class, config_list, declared_suites, expand_benchmarks, limit_runnable,
                                load_adapter, registered_benchmarks, require_execution_backend, select_task_ids,
                                world_model_domain)
from unified.benchmarks.compat import warn_moved_module
from unified.benchmarks.discovery import benchmark_facts, check_benchmark_config, suite_members

__all__ = ["ALL_SUITE", "ENTRY_POINT_GROUP", "STUDY_SUITES", "Adapter", "BenchmarkUnavailable", "Task",
           "adapter_class", "benchmark_facts", "check_benchmark_config", "config_list", "declared_suites",
           "expand_benchmarks", "limit_runnable", "load_adapter", "registered_benchmarks",
           "require_execution_backend", "select_task_ids", "suite_members", "world_model_domain"]

warn_moved_module(__name__)
