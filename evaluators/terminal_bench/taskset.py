"""Which Terminal-Bench task set a run used, and whether it is the paper's (issue 52).

Terminal-Bench 2.1 (harbor-framework/terminal-bench-2-1) keeps 2.0's 89 task names and changes
26-28 of the tasks (timeouts and resources among them); the two have separate leaderboards, so a
2.1 figure is not comparable with the paper's 2.0 one. The names alone cannot tell them apart:
the identity is

- ``version``: ``task_set_version`` in the adapter config when given, else what the checkout says
  of itself: its git ``origin`` URL (``terminal-bench-2-1`` -> 2.1, ``terminal-bench-2`` -> 2.0),
  else its README's first mention of "Terminal-Bench 2.x"; None when nothing says;
- ``task_list_digest``: sha256 of the sorted task ids, one a line;
- ``content_digest``: sha256 over each task's ``task.toml``, ``instruction.md`` and ``tests/``
  files (path and bytes), in order: what 2.1 changed shows here.

:func:`comparison` names what separates the run's set from :data:`PAPER_TASK_SET`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

PAPER_TASK_SET = {"version": "2.0", "n_tasks": 89}
"""The paper's Terminal-Bench: 2.0, its 89 tasks."""
HARBOR_DENOMINATOR_RULE = (
    "harbor 0.25.0's (the pinned version): every trial of every task is in the mean, a model-provider error or a "
    "verifier failure counting 0; harbor 0.26.0 drops model-provider errors and four verifier-failure kinds from "
    "its mean and pass@k denominators, which gives a higher figure on the same trials")
"""Which denominator our figure follows."""

_ORIGIN = re.compile(r'\[remote "origin"\][^\[]*?url\s*=\s*(\S+)', re.DOTALL)
_README = re.compile(r"terminal[- ]bench[- ]?(2)[.-]([01])\b", re.IGNORECASE)


def _origin(root: Path) -> str | None:
    for config in (root / ".git" / "config", root.parent / ".git" / "config"):
        if config.is_file():
            found = _ORIGIN.search(config.read_text(encoding="utf-8", errors="replace"))
            if found:
                return found.group(1)
    return None


def detect_version(root: Path) -> tuple[str | None, str]:
    """(version, where it was read) of the task checkout at ``root``."""
    url = _origin(root)
    if url:
        name = url.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1].lower()
        if name in ("terminal-bench-2-1", "terminal-bench-2.1"):
            return "2.1", f"git origin {url}"
        if name in ("terminal-bench-2", "terminal-bench-2-0", "terminal-bench-2.0"):
            return "2.0", f"git origin {url}"
    for readme in (root / "README.md", root.parent / "README.md"):
        if readme.is_file():
            found = _README.search(readme.read_text(encoding="utf-8", errors="replace"))
            if found:
                return f"{found.group(1)}.{found.group(2)}", f"{readme}"
    return None, "nothing in the checkout names its version"


def _task_bytes(path: Path) -> list[Path]:
    files = [path / "task.toml", path / "instruction.md"]
    tests = path / "tests"
    if tests.is_dir():
        files += sorted(p for p in tests.rglob("*") if p.is_file())
    return [f for f in files if f.is_file()]


def identity(root: str | Path, task_paths: dict[str, str], version: str | None = None) -> dict[str, Any]:
    """The task set's identity (module docstring); ``task_paths``: task id -> its folder."""
    root = Path(root)
    found, source = (version, "task_set_version in the adapter config") if version else detect_version(root)
    ids = sorted(task_paths)
    content = hashlib.sha256()
    for tid in ids:
        folder = Path(task_paths[tid])
        for f in _task_bytes(folder):
            content.update(f"{tid}/{f.relative_to(folder).as_posix()}\0".encode())
            content.update(f.read_bytes())
    return {"version": found, "version_source": source, "n_tasks": len(ids),
            "task_list_digest": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
            "content_digest": content.hexdigest(), "root": str(root)}


def comparison(task_set: dict[str, Any]) -> list[str]:
    """Why the run's task set is not the paper's (empty: it is)."""
    version = task_set.get("version")
    if version is None:
        return [f"task set version unknown ({task_set.get('version_source')}): not checked to be the paper's "
                f"Terminal-Bench {PAPER_TASK_SET['version']} (set benchmarks.terminal_bench_2.task_set_version)"]
    if version != PAPER_TASK_SET["version"]:
        return [f"Terminal-Bench {version} task set ({task_set.get('version_source')}), not the paper's "
                f"{PAPER_TASK_SET['version']}: {version} changed tasks (timeouts included) and has its own "
                f"leaderboard; its figure is not comparable with {PAPER_TASK_SET['version']} numbers"]
    return []
