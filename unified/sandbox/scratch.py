"""A sandbox on a private scratch directory that an environment fills first and deletes at the end.

A workspace session (:class:`unified.execution.workspace.WorkspaceSession`, what Claw-Eval and
QwenClawBench open) needs the same three steps around a task: make a
temporary root (world-readable, so the sandbox's throwaway uid can enter it), put the task's
files into ``<root>/workspace``, then start a :class:`~unified.sandbox.Sandbox` on that workspace;
and at the end leave the sandbox and delete the root, quietly, whatever state a crash left.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from unified.sandbox.bwrap import Sandbox, SandboxConfig


class ScratchSandbox:
    """``root`` is a fresh temporary directory; ``workspace`` (``root/workspace``) is not created here,
    so the caller may copy a tree into it; :meth:`start` confines it; :meth:`close` undoes everything."""

    def __init__(self, prefix: str, scratch_dir: str | Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_dir))
        self.root.chmod(0o755)
        self.workspace = self.root / "workspace"
        self.box: Sandbox | None = None

    def start(self, **config) -> Sandbox:
        """Enter a sandbox on ``workspace`` (``config``: the other :class:`SandboxConfig` fields)."""
        box = Sandbox(SandboxConfig(workspace=self.workspace, **config))
        box.__enter__()
        self.box = box
        return box

    def close(self) -> None:
        """Leave the sandbox (errors ignored: teardown must not mask the episode's own error) and delete root."""
        box, self.box = self.box, None
        if box is not None:
            try:
                box.__exit__(None, None, None)
            except Exception:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

