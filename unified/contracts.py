"""Deprecated: the adapter contract of SDK 0.1, now :mod:`unified.benchmarks` (removed in SDK 0.3).

Importing this module prints one deprecation line (``unified.benchmarks.compat``) saying what to
change: ``from unified.contracts import X`` -> ``from unified.benchmarks import X``; every name it
had is here, the same objects as there. ``docs/adapters.md`` ("Versions and the shim window").
"""

from unified.benchmarks import (ENTRY_POINT_GROUP, Adapter, AgentLimits, BenchmarkUnavailable, Environment,
                                NoConfig, PaperReference, StopReason, Task, TaskFormatError)
from unified.benchmarks.compat import warn_moved_module
from unified.types import Episode, EpisodeResult, Message, Observation, Record, ToolCall, ToolSpec

__all__ = ["ENTRY_POINT_GROUP", "Adapter", "AgentLimits", "BenchmarkUnavailable", "Environment", "NoConfig",
           "PaperReference", "StopReason", "Task", "TaskFormatError",
           # the records SDK 0.1's contract module imported (and so exported)
           "Episode", "EpisodeResult", "Message", "Observation", "Record", "ToolCall", "ToolSpec"]

warn_moved_module(__name__)
