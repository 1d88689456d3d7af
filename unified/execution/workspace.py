"""Workspace sessions: an :class:`ExecutionSession` over a task's file tree on the host.

Benchmarks whose tools read and write a task's files, and whose graders run the benchmark's
own code (Claw-Eval, QwenClawBench), need no image: the local backend gives them a
:class:`WorkspaceSession` (``LocalBackend().workspace(spec)``). It speaks the calls every
session speaks (``exec`` -> :class:`~unified.execution.ExecResult`, ``read_file``,
``write_file``, ``copy_in``, ``copy_out``), plus what a workspace benchmark needs on top:

- **task files in** before the agent starts (:meth:`WorkspaceSession.copy_task_file`): the
  file, and every link met under it, must resolve inside the task's checkout;
- **workspace tools run inside the sandbox** (:meth:`~WorkspaceSession.tool`: read, write,
  edit, glob, grep, fetch; :meth:`~WorkspaceSession.shell`): the model's paths are resolved by
  the sandbox's own filesystem, never by the host;
- **files out for a grader** (:meth:`~WorkspaceSession.read_workspace_file` within a
  :class:`~unified.execution.copying.CopyBudget`; never through a link out of the workspace).

Graders run in a sandbox of their own (:func:`unified.execution.grader.run_grader`).

How it differs from the ``local`` backend's image session (:class:`~unified.execution.local.LocalSession`):
every ``exec`` is a sandbox of its own on the same workspace (bubblewrap: read-only root, no
network, time/memory/process limits, a private ``/tmp``), so nothing an agent's command starts
outlives it and ``/tmp`` does not persist between commands; the workspace is the only state.
The rules and threat model are :mod:`unified.sandbox`'s, tested in ``tests/security/``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from unified.execution.base import ExecResult, ExecutionError, ExecutionSession
from unified.execution.copying import CopyBudget, copy_confined
from unified.sandbox import SandboxError, ScratchSandbox
from unified.sandbox.hostenv import DEFAULT_PATH, minimal_host_env
from unified.sandbox.ops import run_op, run_shell

COMMANDS_DIR = "/tmp/.unified-shims"
"""Where :attr:`WorkspaceSpec.commands` appear inside (first on ``PATH``)."""

TOOL_OPS = ("read", "write", "edit", "glob", "grep", "fetch")
"""The file and web operations :meth:`WorkspaceSession.tool` runs inside the sandbox."""


@dataclass
class WorkspaceSpec:
    """A confined workspace: limits and what the sandbox shows besides the workspace."""

    name: str = "workspace"
    """Prefix of the host scratch directory (``claw-<task>-``)."""
    timeout_s: float = 120.0
    """Default wall-clock limit of one command."""
    memory_mb: int = 2048
    """Memory of the whole sandbox (its processes and its ``/tmp``) in MiB."""
    max_processes: int = 256
    """Processes the sandbox may have at once."""
    mount_point: str = "/workspace"
    """Where the workspace appears inside (working directory and ``$HOME`` of every command)."""
    commands: dict[str, str] = field(default_factory=dict)
    """Extra command names inside, each a link to a program of the read-only root (``{"python":
    "/usr/bin/python3"}``, as an image would have it); they come first on ``PATH``."""
    readonly_mounts: list[tuple[str, str]] = field(default_factory=list)
    """``(host directory, place inside)`` shown read-only (a browser build)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of every command (the host's is never inherited)."""
    per_process_address_space: bool = True
    """Cap each process's address space at ``memory_mb`` (RLIMIT_AS). False for a browser, which
    reserves about a TiB of address space; the sandbox-wide memory limit still holds."""
    scratch_dir: str | None = None
    """Host directory under which the scratch directory is made (None: the system's temporary one)."""


class ToolResult(NamedTuple):
    """What one workspace tool did: ``ok`` and the text the model sees (the error when not ok)."""

    ok: bool
    text: str


class ShellResult(NamedTuple):
    """What one shell command did: ``ok`` (exit 0, no timeout), the text the model sees (output, then
    a line for a timeout or a non-zero exit) and ``metadata`` (``exit_code``, ``timed_out``,
    ``duration_s``, ``sandbox``)."""

    ok: bool
    text: str
    metadata: dict[str, Any]


class WorkspaceSession(ExecutionSession):
    """A host workspace confined by bubblewrap (see the module docstring). Use as a context manager.

    >>> with LocalBackend().workspace(WorkspaceSpec(name="t-")) as ws:   # doctest: +SKIP
    ...     ws.copy_task_file(checkout / "data.csv", "data.csv", root=checkout, where="task.yaml")
    ...     ws.start()
    ...     ws.tool("read", {"path": "data.csv"}).text
    """

    backend = "bwrap"

    def __init__(self, spec: WorkspaceSpec) -> None:
        super().__init__(spec)  # type: ignore[arg-type]
        self.spec: WorkspaceSpec = spec
        self._scratch = ScratchSandbox(prefix=spec.name, scratch_dir=spec.scratch_dir)
        self.host_workspace: Path = self._scratch.workspace
        """The workspace on the host (not created until a file is put in or :meth:`start` runs)."""
        self._box = None
        self.info.update({"backend": self.backend, "host_workspace": str(self.host_workspace)})

    @property
    def workdir(self) -> str:
        return self.spec.mount_point

    @property
    def running(self) -> bool:
        return self._box is not None

    # -- lifecycle -------------------------------------------------------------------------

    def copy_task_file(self, source: Path, rel: str, *, root: Path, where: str,
                       budget: CopyBudget | None = None) -> Path:
        """Copy a task's file or directory ``source`` to ``rel`` in the workspace; returns where it landed.

        ``rel`` must land inside the workspace (else ValueError) and ``source``, with every link
        under it, must resolve inside ``root`` (the task's checkout; else
        :class:`~unified.execution.copying.CopyRefused`). ``where`` starts every error message.
        """
        dest = (self.host_workspace / rel).resolve()
        if self.host_workspace.resolve() not in dest.parents:
            raise ValueError(f"{where} points outside the workspace")
        copy_confined(source, dest, root=Path(root), where=where, budget=budget)
        return dest

    def start(self) -> WorkspaceSession:
        """Confine the workspace (made if missing); commands may run from now on."""
        if self._closed:
            raise ExecutionError("bwrap: the workspace session is closed")
        spec = self.spec
        self.host_workspace.mkdir(exist_ok=True)
        binds: list[Any] = [tuple(m) for m in spec.readonly_mounts]
        env = dict(spec.env)
        if spec.commands:
            shims = self._scratch.root / "shims"
            shims.mkdir()
            for name, program in spec.commands.items():
                (shims / name).symlink_to(program)
            binds.insert(0, (str(shims), COMMANDS_DIR))
            env["PATH"] = f"{COMMANDS_DIR}:{env.get('PATH', DEFAULT_PATH)}"
        try:
            self._box = self._scratch.start(timeout_s=spec.timeout_s, memory_mb=spec.memory_mb,
                                            max_processes=spec.max_processes, mount_point=spec.mount_point,
                                            readonly_binds=binds, env=env,
                                            address_space_mb=None if spec.per_process_address_space else 0)
        except SandboxError as exc:
            raise ExecutionError(f"bwrap: {exc}") from exc
        self.info["limits"] = dict(self._box.limits_info)
        return self

    def _close(self) -> None:
        self._box = None
        self._scratch.close()

    # -- commands --------------------------------------------------------------------------

    def _running_box(self):
        if self._box is None or self._closed:
            raise ExecutionError("bwrap: the workspace session is not running (call start())")
        return self._box

    def exec(  # safe: a method name, not the builtin
        self, command: str | list[str], timeout_s: float | None = None, stdin: str | bytes | None = None,
        workdir: str | None = None, env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run ``command`` in a sandbox of its own on the workspace (working directory: the mount point)."""
        box = self._running_box()
        if workdir or env:
            argv = ["sh", "-c", command] if isinstance(command, str) else [str(c) for c in command]
            prefix = ["env", *(f"{k}={v}" for k, v in (env or {}).items())]
            if workdir:
                argv = ["sh", "-c", f"cd {shlex.quote(workdir)} && exec \"$@\"", "sh", *argv]
            command = prefix + argv
        r = box.run(command, timeout_s=timeout_s, stdin=stdin)
        return ExecResult.of(r)

    def tool(self, op: str, args: dict[str, Any], timeout_s: float = 30.0) -> ToolResult:
        """Run one workspace tool (:data:`TOOL_OPS`) inside the sandbox; paths resolve there."""
        if op not in TOOL_OPS:
            raise ValueError(f"unknown workspace tool {op!r}; known: {', '.join(TOOL_OPS)}")
        return ToolResult(*run_op(self._running_box(), op, args, timeout_s=timeout_s))

    def shell(self, command: str, timeout_s: float, max_chars: int = 30000) -> ShellResult:
        """Run a shell command as a tool: its text shows the output, then the timeout or exit code."""
        return ShellResult(*run_shell(self._running_box(), command, timeout_s=timeout_s, max_chars=max_chars))

    # -- files out ---------------------------------------------------------------------------

    def host_path(self, path: str) -> Path | None:
        """The host file behind ``path`` under the mount point (None outside it or through a link out)."""
        mount = self.spec.mount_point.rstrip("/")
        if not (path == mount or path.startswith(mount + "/")):
            return None
        host = (self.host_workspace / path[len(mount):].lstrip("/")).resolve()
        root = self.host_workspace.resolve()
        return host if host == root or root in host.parents else None

    def read_workspace_file(self, path: str, budget: CopyBudget | None = None) -> bytes:
        """The bytes of the workspace file ``path``, read on the host (no sandbox start per file).

        FileNotFoundError when it is not a file under the mount point (or only through a link out);
        :class:`~unified.execution.copying.CopyBudgetExceeded` when its apparent size would pass
        ``budget`` (then nothing is read).
        """
        host = self.host_path(path)
        if host is None or not host.is_file():
            raise FileNotFoundError(f"File not found: {path}")
        if budget is not None:
            budget.take(host.stat().st_size, f"snapshot file {path}")
        return host.read_bytes()

    # -- the end of the agent's turn ----------------------------------------------------------

    def stop_agent_processes(self) -> dict[str, Any]:
        return {"ok": True, "detail": "each command ran in a sandbox of its own; none outlives it"}

    def verifier_env(self, safe_path: bool = True) -> dict[str, str]:
        """Every command's ``/tmp`` is fresh and private: it is the verifier's empty ``HOME``."""
        env = {"HOME": "/tmp", "XDG_CONFIG_HOME": "/tmp/.config", "XDG_CACHE_HOME": "/tmp/.cache",
               "XDG_DATA_HOME": "/tmp/.local/share", "PYTHONNOUSERSITE": "1", "PATH": DEFAULT_PATH}
        if safe_path:
            env["PYTHONSAFEPATH"] = "1"
        return env

    def command_path(self) -> str | None:
        return self.spec.env.get("PATH", DEFAULT_PATH)


def service_env() -> dict[str, str]:
    """The whole starting environment of a host process that serves a sandboxed agent (a task's mock
    service): a system ``PATH`` and a UTF-8 locale, none of our variables, so no host secret can be
    read from it or through it."""
    return minimal_host_env()


__all__ = ["COMMANDS_DIR", "TOOL_OPS", "ShellResult", "ToolResult", "WorkspaceSession", "WorkspaceSpec", "service_env"]
