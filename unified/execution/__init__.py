"""Execution backends behind one interface: ``local`` (bubblewrap), ``docker``, ``podman``, ``apptainer``.

This package is the adapters' one way to run untrusted work (they never import
:mod:`unified.sandbox`). Adapters describe an environment (:class:`EnvironmentSpec`) and run
commands in the :class:`ExecutionSession` a backend starts; they never know which backend it was.
Benchmarks whose tools act on a task's file tree rather than an image get the same kind of
session over a host workspace from the local backend (``LocalBackend().workspace(WorkspaceSpec)``:
:mod:`unified.execution.workspace`), and run their graders with :func:`run_grader`
(:mod:`unified.execution.grader`). Which one
runs is decided here: ``get_backend(name)`` with ``name`` from the adapter's config
(``--set benchmarks.NAME.backend=docker``), else ``$UNIFIED_EXEC_BACKEND``, else ``auto``
(the first of docker, podman, apptainer that works here, then ``local``). "Works" means a tiny
container really starts (:mod:`unified.execution.probe`): an engine that answers ``info`` but
cannot start containers is passed over, with a warning that gives the one-line fix.
"""

from __future__ import annotations

import functools
import logging
import os

from unified.execution.base import (
    BackendUnavailable,
    EnvironmentSpec,
    ExecResult,
    ExecutionBackend,
    ExecutionError,
    ExecutionSession,
)
from unified.execution.containers import ApptainerBackend, DockerBackend, PodmanBackend
from unified.execution.copying import CopyBudget, CopyBudgetExceeded, CopyRefused
from unified.execution.grader import GraderSpec, JudgeEndpoint, run_grader
from unified.execution.local import LocalBackend, LocalImageError
from unified.execution.tmux import TmuxTerminal
from unified.execution.workspace import ShellResult, ToolResult, WorkspaceSession, WorkspaceSpec, service_env
from unified.registry import Registry

BACKENDS: Registry = Registry("execution backend")
BACKENDS.register("local", LocalBackend)
BACKENDS.register("docker", DockerBackend)
BACKENDS.register("podman", PodmanBackend)
BACKENDS.register("apptainer", ApptainerBackend)

AUTO_ORDER = ("docker", "podman", "apptainer", "local")
_log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def _available(name: str) -> bool:
    return BACKENDS.get(name)().available()


def get_backend(name: str | None = None) -> ExecutionBackend:
    """The backend called ``name`` (``auto``/None: ``$UNIFIED_EXEC_BACKEND`` or the first that works here).

    An unknown name lists the valid ones. ``auto`` raises BackendUnavailable (with every
    reason) when nothing works, e.g. no bubblewrap and no engine.
    """
    name = name or os.environ.get("UNIFIED_EXEC_BACKEND") or "auto"
    if name != "auto":
        return BACKENDS.get(name)()
    for candidate in AUTO_ORDER:
        if _available(candidate):
            return BACKENDS.get(candidate)()
        problem = BACKENDS.get(candidate)().unavailable_reason()
        if problem is not None and "cannot start a container" in problem.reason:
            _log.warning("auto: skipping %s, which is installed but %s; fix: %s", candidate,
                         problem.reason.split(": ", 1)[-1], problem.how_to_fix)
    reasons = "; ".join(str(BACKENDS.get(n)().unavailable_reason()) for n in AUTO_ORDER)
    raise BackendUnavailable("auto", f"no execution backend works here: {reasons}",
                             "apt-get install -y bubblewrap (local) or install docker/podman/apptainer")


__all__ = [
    "AUTO_ORDER", "BACKENDS", "ApptainerBackend", "BackendUnavailable", "CopyBudget", "CopyBudgetExceeded",
    "CopyRefused", "DockerBackend", "EnvironmentSpec", "ExecResult", "ExecutionBackend", "ExecutionError",
    "ExecutionSession", "GraderSpec", "JudgeEndpoint", "LocalBackend", "LocalImageError", "PodmanBackend",
    "ShellResult", "TmuxTerminal", "ToolResult", "WorkspaceSession", "WorkspaceSpec", "get_backend", "run_grader",
    "service_env",
]
