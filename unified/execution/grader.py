"""Running a benchmark's own grader on model output: a sandbox of its own, no network, one judge socket.

A grader is benchmark code that reads what the agent wrote, so it never runs in our process
nor in the agent's sandbox. :func:`run_grader` starts a fresh bubblewrap sandbox for it:

- read-only root, no network, time/memory/process limits, ``$HOME`` in its private ``/tmp``
  (nothing the agent left acts as its home);
- its inputs (:attr:`GraderSpec.files`) read-only at ``/grader/<name>``, and host paths it
  needs (the benchmark's checkout, this interpreter) read-only at the same place;
- as its only writable place, either an empty scratch directory or a *copy* of the agent's
  workspace (:attr:`GraderSpec.workspace`): links copied as links, never followed, special
  files left out, regular files counted at apparent size against ``copy_mb``
  (:func:`unified.execution.copying.copy_workspace`; past it :class:`CopyRefused` and nothing runs);
- an LLM judge, when the grader needs one, through a Unix socket at :data:`JUDGE_SOCKET` that
  forwards chat/completions requests to one endpoint only and adds its API key on the host side
  (:class:`unified.sandbox.relay.EndpointRelay`): the key never enters the sandbox.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from unified.execution.base import ExecResult, ExecutionError
from unified.execution.copying import CopyBudget, CopyRefused, copy_workspace
from unified.sandbox import Sandbox, SandboxConfig, SandboxError
from unified.sandbox.relay import EndpointRelay

GRADER_DIR = "/grader"
"""Where :attr:`GraderSpec.files` appear inside."""
JUDGE_SOCKET = f"{GRADER_DIR}/judge.sock"
"""The judge relay's Unix socket inside (HTTP: point a client at ``http://relay`` through it)."""


@dataclass
class JudgeEndpoint:
    """The one OpenAI-compatible endpoint a grader may reach (its key stays on the host)."""

    base_url: str
    api_key: str | None = None


@dataclass
class GraderSpec:
    """One grader run (see the module docstring)."""

    argv: list[str]
    """The command, e.g. ``["/usr/bin/python3", "-I", "/grader/run.py"]``."""
    files: dict[str, str] = field(default_factory=dict)
    """``name -> text`` of the grader's inputs, read-only at ``/grader/<name>``."""
    readonly_paths: list[str] = field(default_factory=list)
    """Host paths shown read-only at the same place (the checkout, ``sys.prefix``)."""
    workspace: Path | None = None
    """The agent's workspace, copied to be the grader's working directory (None: an empty one)."""
    copy_mb: float = 512.0
    """Most the workspace copy may hold (apparent size), in MiB."""
    judge: JudgeEndpoint | None = None
    """The judge's endpoint, reached through :data:`JUDGE_SOCKET`; None: no judge."""
    timeout_s: float = 120.0
    memory_mb: int = 2048
    env: dict[str, str] = field(default_factory=dict)
    """Environment of the grader (the host's is never inherited)."""
    mount_point: str = "/workspace"
    """Where the working directory (the workspace copy) appears inside."""


def run_grader(spec: GraderSpec) -> ExecResult:
    """Run ``spec.argv`` in a fresh sandbox (module docstring); returns what it did.

    Raises :class:`~unified.execution.copying.CopyRefused` (nothing ran) when the workspace copy
    passes ``copy_mb`` or nests too deep, and ExecutionError when no sandbox can be started.
    """
    with tempfile.TemporaryDirectory(prefix="unified-grade-") as tmp:
        tmp_path = Path(tmp)
        work = tmp_path / "workspace"
        if spec.workspace is not None:
            copy_workspace(Path(spec.workspace), work, budget=CopyBudget(int(spec.copy_mb * 2**20)))
        else:
            work.mkdir()
        inputs = tmp_path / "inputs"
        inputs.mkdir()
        for name, text in spec.files.items():
            if "/" in name or name in ("", ".", "..", Path(JUDGE_SOCKET).name):
                raise ValueError(f"grader input name {name!r}: a plain file name other than judge.sock")
            (inputs / name).write_text(text, encoding="utf-8")
        for p in [tmp_path, inputs, *inputs.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        config = SandboxConfig(workspace=work, timeout_s=spec.timeout_s, memory_mb=spec.memory_mb, home="/tmp",
                               mount_point=spec.mount_point, env=dict(spec.env),
                               readonly_binds=list(spec.readonly_paths) + [(str(inputs), GRADER_DIR)])
        relay = (EndpointRelay(inputs / Path(JUDGE_SOCKET).name, spec.judge.base_url, spec.judge.api_key)
                 if spec.judge is not None else None)
        try:
            with relay or contextlib.nullcontext(), Sandbox(config) as box:
                r = box.run(spec.argv, timeout_s=spec.timeout_s)
        except SandboxError as exc:
            raise ExecutionError(f"bwrap: {exc}") from exc
    return ExecResult.of(r)


__all__ = ["GRADER_DIR", "JUDGE_SOCKET", "CopyRefused", "GraderSpec", "JudgeEndpoint", "run_grader"]
