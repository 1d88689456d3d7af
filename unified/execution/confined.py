"""Confined host-side work for adapters whose tools act on a task's file tree, not an image.

Adapters reach every way of running untrusted work through :mod:`unified.execution`, never
through :mod:`unified.sandbox` (the floor-1 mechanism under both kinds; the import-graph test
enforces it). Two kinds:

- **sessions** (:class:`~unified.execution.ExecutionSession` from a backend that
  ``unified.benchmarks.require_execution_backend`` picks: local bubblewrap, docker, podman,
  apptainer) for benchmarks that ship an environment image (SWE-bench, Terminal-Bench);
- **confined workspaces** (this module) for benchmarks whose tools read and write a task's files
  and whose graders run the benchmark's own code on the host's interpreter (Claw-Eval,
  QwenClawBench): a bubblewrap :class:`Sandbox` on a :class:`ScratchSandbox` workspace, the
  workspace tools run *inside* it (:func:`run_op`, :func:`run_shell`), task files copied in and
  agent-written files copied out without following links out and within a :class:`CopyBudget`
  (:func:`copy_confined`, :func:`copy_workspace`), one judge endpoint for a grader without network
  (:class:`EndpointRelay`), the minimal environment for host processes that start sandboxes
  (:func:`minimal_host_env`, :data:`DEFAULT_PATH`) and a per-process temporary directory removed
  at exit (:func:`process_temp_dir`).

The names are those of :mod:`unified.sandbox` (same objects, same behaviour); their rules and
threat model are documented there and tested in ``tests/security/``.
"""

from __future__ import annotations

from unified.sandbox import Sandbox, SandboxConfig, SandboxError, SandboxResult, ScratchSandbox
from unified.sandbox.copying import CopyBudget, CopyBudgetExceeded, CopyRefused, copy_confined, copy_workspace
from unified.sandbox.hostenv import DEFAULT_PATH, minimal_host_env
from unified.sandbox.ops import run_op, run_shell
from unified.sandbox.relay import EndpointRelay
from unified.sandbox.scratch import process_temp_dir

__all__ = [
    "DEFAULT_PATH", "CopyBudget", "CopyBudgetExceeded", "CopyRefused", "EndpointRelay", "Sandbox", "SandboxConfig",
    "SandboxError", "SandboxResult", "ScratchSandbox", "copy_confined", "copy_workspace", "minimal_host_env",
    "process_temp_dir", "run_op", "run_shell",
]
