"""Copying files into and out of confined workspaces without following links out, within a size budget.

Two copies cross the sandbox boundary on the host, outside any sandbox limit (both are done for
adapters by :class:`~unified.execution.workspace.WorkspaceSession` and
:func:`~unified.execution.grader.run_grader`):

- **task files into a workspace** (:func:`copy_confined`): files a benchmark's task folder lists
  (Claw-Eval ``sandbox_files``, QwenClawBench assets). A symlink in the task folder must never
  copy the host file or directory it points to: every path, and every link met while walking a
  directory, must resolve inside the task's checkout (``root``), else :class:`CopyRefused` names
  the file. Links inside the checkout are followed (their content is copied); FIFOs, sockets and
  devices are left out.
- **an agent-written workspace out to a grader** (:func:`copy_workspace`): links are copied as
  links, never followed; special files are left out.

Both count every regular file at its *apparent* size (``st_size``): a sparse file uses no disk
blocks in the sandbox but is written out in full by a copy (and read in full by a reader), so
4 x 256 MiB of holes would cost 1 GiB of host ``/tmp``. Past the :class:`CopyBudget` the copy
stops with :class:`CopyBudgetExceeded`, which says how much was asked for; the caller records it.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_DEPTH = 64
"""Deepest directory nesting a copy walks (a link loop inside the checkout stops here)."""


class CopyRefused(ValueError):
    """A copy that would read outside its root (a link or path out of the task's checkout)."""


class CopyBudgetExceeded(CopyRefused):
    """A copy whose files add up (apparent size) to more than its budget."""


@dataclass
class CopyBudget:
    """Bytes (apparent size) a copy may still write."""

    limit_bytes: int
    used_bytes: int = 0

    def take(self, size: int, what: str) -> None:
        """Count ``size`` bytes of ``what``, or raise :class:`CopyBudgetExceeded` (nothing counted)."""
        if self.used_bytes + size > self.limit_bytes:
            raise CopyBudgetExceeded(
                f"{what}: {size} bytes (apparent size) would take the copy past its budget of "
                f"{self.limit_bytes} bytes ({self.used_bytes} already copied)")
        self.used_bytes += size


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def copy_confined(source: Path, dest: Path, *, root: Path, where: str, budget: CopyBudget | None = None) -> None:
    """Copy the file or directory ``source`` to ``dest``; ``source`` and every link under it must
    resolve inside ``root`` (module docstring, first copy). ``where`` starts every error message."""
    root = Path(root).resolve()
    _copy_confined(Path(source), Path(dest), root, where, budget, depth=0, chain=())


def _copy_confined(source: Path, dest: Path, root: Path, where: str, budget: CopyBudget | None, *, depth: int,
                   chain: tuple[Path, ...]) -> None:
    resolved = source.resolve()
    if not _inside(resolved, root):
        raise CopyRefused(f"{where}: {source} resolves to {resolved}, outside the task's checkout {root}; "
                          "a task file must not copy host files into the workspace")
    try:
        info = os.stat(resolved)
    except OSError as exc:
        raise FileNotFoundError(f"{where}: {source}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        if depth >= MAX_DEPTH or resolved in chain:
            raise CopyRefused(f"{where}: {source}: directory links loop (or nest deeper than {MAX_DEPTH})")
        dest.mkdir(parents=True, exist_ok=True)
        for entry in sorted(os.listdir(resolved)):
            _copy_confined(source / entry, dest / entry, root, where, budget, depth=depth + 1,
                           chain=(*chain, resolved))
    elif stat.S_ISREG(info.st_mode):
        if budget is not None:
            budget.take(info.st_size, f"{where}: {source}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(resolved, dest)
    # FIFOs, sockets, devices: left out (a reader that opened one would hang)


def copy_workspace(source: Path, dest: Path, *, budget: CopyBudget, depth: int = 0) -> None:
    """Copy the agent-written tree ``source`` to ``dest`` (module docstring, second copy): links
    as links, special files left out, regular files counted at apparent size against ``budget``;
    directories nested deeper than :data:`MAX_DEPTH` are refused."""
    source, dest = Path(source), Path(dest)
    if depth > MAX_DEPTH:
        raise CopyRefused(f"workspace directory {source} is nested deeper than {MAX_DEPTH} levels")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copystat(source, dest)
    for entry in sorted(os.scandir(source), key=lambda e: e.name):
        target = dest / entry.name
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(entry.path), target)
        elif stat.S_ISDIR(info.st_mode):
            copy_workspace(Path(entry.path), target, budget=budget, depth=depth + 1)
        elif stat.S_ISREG(info.st_mode):
            budget.take(info.st_size, f"workspace file {entry.path}")
            shutil.copy2(entry.path, target, follow_symlinks=False)


__all__ = ["CopyBudget", "CopyBudgetExceeded", "CopyRefused", "copy_confined", "copy_workspace"]
