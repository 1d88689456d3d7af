"""Terminal-Bench 2.0 tasks in their task-folder format (the Harbor layout).

One directory a task::

    <task>/instruction.md        what the agent is asked (Markdown)
    <task>/task.toml             [metadata], [agent] timeout_sec, [verifier] timeout_sec/env,
                                 [environment] docker_image/cpus/memory(_mb)/allow_internet/build_timeout_sec
    <task>/environment/Dockerfile  the image (or [environment] docker_image)
    <task>/tests/test.sh         the verifier; writes the reward to /logs/verifier/reward.txt (or .json)
    <task>/solution/solve.sh     the reference solution (the ``gold`` path)

Where the tasks come from (first that is set): ``root`` in the adapter config,
``$TERMINAL_BENCH_ROOT`` (a checkout of the Terminal-Bench 2.0 task repository, tasks at its
top level or under ``tasks/``), ``$UNIFIED_FIXTURES_DIR/terminal_bench`` (our fixture tasks).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from unified.eval.adapter import BenchmarkUnavailable

ROOT_ENV = "TERMINAL_BENCH_ROOT"
FIXTURES_ENV = "UNIFIED_FIXTURES_DIR"


class TaskFormatError(ValueError):
    """A task folder that does not follow the format (names the file and the field)."""


@dataclass
class TBTask:
    """One task folder, read."""

    id: str
    path: str
    instruction: str
    agent_timeout_s: float = 900.0
    verifier_timeout_s: float = 900.0
    verifier_env: dict[str, str] = field(default_factory=dict)
    docker_image: str | None = None
    build_context: str | None = None
    build_timeout_s: float = 1800.0
    cpus: float | None = None
    memory_mb: int | None = 2048
    allow_internet: bool = False
    difficulty: str = ""
    category: str = ""
    has_solution: bool = False

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)


def _memory_mb(value: Any, where: str) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(value), re.I)
    if not match:
        raise TaskFormatError(f"{where}: memory must look like '2G' or '512M', got {value!r}")
    number, unit = float(match.group(1)), match.group(2).upper()
    return int(number * {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[unit])


def read_task(task_dir: Path) -> TBTask:
    """Read one task folder; TaskFormatError names the file and the field that is wrong."""
    task_dir = Path(task_dir)
    toml_path = task_dir / "task.toml"
    instruction_path = task_dir / "instruction.md"
    for required in (toml_path, instruction_path, task_dir / "tests" / "test.sh"):
        if not required.is_file():
            raise TaskFormatError(f"{task_dir}: missing {required.relative_to(task_dir)}")
    try:
        config = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(f"{toml_path}: invalid TOML: {exc}") from None
    known = {"version", "metadata", "verifier", "agent", "environment", "solution"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise TaskFormatError(f"{toml_path}: unknown table(s) {unknown}; expected {sorted(known)}")
    agent, verifier, env = config.get("agent", {}), config.get("verifier", {}), config.get("environment", {})
    meta = config.get("metadata", {})
    for name, table in (("agent", agent), ("verifier", verifier), ("environment", env), ("metadata", meta)):
        if not isinstance(table, dict):
            raise TaskFormatError(f"{toml_path}: [{name}] must be a table")

    def number(table: dict, key: str, section: str, default: float | None) -> float | None:
        value = table.get(key, default)
        if value is not None and not isinstance(value, (int, float)):
            raise TaskFormatError(f"{toml_path}: [{section}] {key} must be a number, got {value!r}")
        return None if value is None else float(value)

    memory = env.get("memory_mb", env.get("memory"))
    dockerfile = task_dir / "environment" / "Dockerfile"
    image = env.get("docker_image")
    verifier_env = verifier.get("env", {})
    if not isinstance(verifier_env, dict):
        raise TaskFormatError(f"{toml_path}: [verifier] env must be a table")
    task = TBTask(
        id=task_dir.name, path=str(task_dir.resolve()), instruction=instruction_path.read_text().strip(),
        agent_timeout_s=number(agent, "timeout_sec", "agent", 900.0),
        verifier_timeout_s=number(verifier, "timeout_sec", "verifier", 900.0),
        verifier_env={str(k): str(v) for k, v in verifier_env.items()},
        docker_image=str(image) if image else None,
        build_context=str((task_dir / "environment").resolve()) if dockerfile.is_file() else None,
        build_timeout_s=number(env, "build_timeout_sec", "environment", 1800.0),
        cpus=number(env, "cpus", "environment", None),
        memory_mb=_memory_mb(memory, f"{toml_path}: [environment] memory") if memory is not None else 2048,
        allow_internet=bool(env.get("allow_internet", False)), difficulty=str(meta.get("difficulty", "")),
        category=str(meta.get("category", "")), has_solution=(task_dir / "solution" / "solve.sh").is_file())
    if not dockerfile.is_file() and not image:
        raise TaskFormatError(f"{task_dir}: neither environment/Dockerfile nor [environment] docker_image")
    return task


def resolve_root(root: str | None) -> Path:
    """The directory holding task folders (see the module docstring for the order)."""
    candidates = []
    if root:
        candidates.append(("config root", Path(root)))
    elif os.environ.get(ROOT_ENV):
        candidates.append((f"${ROOT_ENV}", Path(os.environ[ROOT_ENV])))
    elif os.environ.get(FIXTURES_ENV):
        candidates.append((f"${FIXTURES_ENV}", Path(os.environ[FIXTURES_ENV]) / "terminal_bench"))
    if not candidates:
        raise BenchmarkUnavailable(
            "no Terminal-Bench 2.0 tasks configured",
            f"clone the Terminal-Bench 2.0 task repository and set ${ROOT_ENV} (or --set "
            f"benchmarks.terminal_bench_2.root=PATH); for the fixture tasks set {FIXTURES_ENV}=tests/fixtures")
    source, path = candidates[0]
    if (path / "tasks").is_dir():
        path = path / "tasks"
    if not path.is_dir():
        raise BenchmarkUnavailable(f"{source} points at {path}, which is not a directory",
                                   "give the directory that holds the task folders")
    return path


def load_tasks(root: Path) -> tuple[list[TBTask], list[tuple[str, str]]]:
    """Every task folder under ``root`` (sorted), and (name, error) for the broken ones."""
    tasks, broken = [], []
    for child in sorted(Path(root).iterdir()):
        if not child.is_dir() or not (child / "task.toml").exists():
            continue
        try:
            tasks.append(read_task(child))
        except TaskFormatError as exc:
            broken.append((child.name, str(exc)))
    return tasks, broken
