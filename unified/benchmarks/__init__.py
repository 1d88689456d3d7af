"""The adapter SDK: what a benchmark package needs, below the runner.

A benchmark is a package with an :class:`Adapter` subclass registered in the entry-point group
``unified.benchmarks``; ``docs/adapters.md`` walks through a whole outside adapter package. This
package sits on floor 2 of the dependency rules (``docs/architecture.md``): evaluators, ``lwm``
and ``trace`` import it, never ``unified.eval`` (the runner, which is one client of it).

Modules:

- :mod:`~unified.benchmarks.contract`: Task, Environment, Adapter, AgentLimits, StopReason,
  BenchmarkUnavailable, PaperReference: what an adapter implements and returns; RunContext: what
  the runner passes to ``open`` and ``aggregate`` about the run (its work directory, its trials);
- :mod:`~unified.benchmarks.discovery`: entry points, suites, ``world_model_domain``, loading an
  adapter by name and checking its ``Config``;
- :mod:`~unified.benchmarks.aggregate`: Avg@k, pass@k, pass^k and the scored/skipped/errored split;
- ``bounded`` (from :mod:`unified.config`): a ``Config`` field with bounds, ``x: int = bounded(3, ge=1)``;
- :mod:`~unified.benchmarks.helpers`: ``config_list``, ``limit_runnable``, ``select_task_ids``, ``judge_reason``,
  ``require_execution_backend``, ``process_temp_dir``;
- :mod:`~unified.benchmarks.failures`: ``check_tools`` (an environment's tools are ToolSpecs, else a
  ``ToolSpecError`` naming benchmark, task and tool), ``import_failure`` / ``classify_adapter_error``
  (an exception from an adapter call as a skip naming the missing import, or an error);
- :mod:`~unified.benchmarks.endpoints`: ``resolve_endpoint``, the URL of a judge or simulated-user model
  spec (imports the inference stack on first use only);
- :mod:`~unified.benchmarks.compat`: ``SDK_VERSION``, the shims of SDK 0.1's names and their
  deprecation line (``SDKDeprecationWarning``).

**Stable API for outside adapters** is the list in ``__all__`` below (with the records of
:mod:`unified.types` they exchange, ``ToolSpec.from_function`` included), versioned as
:data:`SDK_VERSION` (the major.minor of ``unified.__version__``): these names keep their meaning
across patch versions; a rename or removal keeps the old name for one minor version (the shim
window: SDK 0.1's ``unified.contracts``, ``unified.eval.aggregate``, ``unified.eval.adapter``,
``AgentLimits.max_steps_per_user_turn`` ... work in 0.2 and go in 0.3), with one visible
:class:`SDKDeprecationWarning` line per old name saying what to change. Anything else in these
modules is internal to the library.
"""

from unified.benchmarks.aggregate import (
    Partition,
    avg_at_k,
    partition,
    pass_at_k,
    pass_pow_k,
    per_trial,
    scores_by_task,
)
from unified.benchmarks.compat import SDK_VERSION, SDKDeprecationWarning
from unified.benchmarks.contract import (
    ENTRY_POINT_GROUP,
    Adapter,
    AgentLimits,
    BenchmarkUnavailable,
    Environment,
    NoConfig,
    PaperReference,
    RunContext,
    StopReason,
    Task,
    TaskFormatError,
    check_task_id,
    check_task_ids,
    task_id_problem,
)
from unified.benchmarks.discovery import (
    ALL_SUITE,
    STUDY_SUITES,
    adapter_class,
    declared_suites,
    expand_benchmarks,
    load_adapter,
    registered_benchmarks,
    world_model_domain,
)
from unified.benchmarks.endpoints import resolve_endpoint
from unified.benchmarks.failures import (AdapterFailure, DetailsNotJSONWarning, ToolSpecError, check_details, check_tools,
                                         classify_adapter_error)
from unified.benchmarks.helpers import (config_list, judge_reason, limit_runnable, process_temp_dir,
                                        require_execution_backend, select_task_ids)
from unified.config import bounded  # a Config field with bounds (unified.config parses the settings)

__all__ = [
    # the version
    "SDK_VERSION", "SDKDeprecationWarning",
    # the contract
    "ENTRY_POINT_GROUP", "Adapter", "AgentLimits", "BenchmarkUnavailable", "Environment", "NoConfig",
    "PaperReference", "RunContext", "StopReason", "Task", "TaskFormatError", "check_task_id", "check_task_ids", "task_id_problem",
    # discovery
    "ALL_SUITE", "STUDY_SUITES", "adapter_class", "declared_suites", "expand_benchmarks", "load_adapter",
    "registered_benchmarks", "world_model_domain",
    # aggregates
    "Partition", "avg_at_k", "partition", "pass_at_k", "pass_pow_k", "per_trial", "scores_by_task",
    # adapter helpers
    "bounded", "config_list", "judge_reason", "limit_runnable", "process_temp_dir", "require_execution_backend",
    "select_task_ids",
    # the judge's or simulated user's model
    "resolve_endpoint",
    # checks and failures of adapter calls
    "AdapterFailure", "DetailsNotJSONWarning", "ToolSpecError", "check_details", "check_tools", "classify_adapter_error",
]
