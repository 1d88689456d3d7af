"""Terminal-Bench 2.0 tasks in their task-folder format (the Harbor layout), both published schemas.

One directory a task::

    <task>/instruction.md          what the agent is asked (Markdown)
    <task>/task.toml               the configuration (see below)
    <task>/environment/Dockerfile  the image's recipe (optional when [environment] docker_image is set)
    <task>/tests/test.sh           the verifier; writes /logs/verifier/reward.json or reward.txt
    <task>/solution/               the reference solution: solve.sh and the files it uses (``gold``)

``task.toml`` comes in two published shapes, both read here:

- launch era: ``version = "1.0"``, ``[metadata]``, ``[verifier]``, ``[agent]``,
  ``[environment]`` (``docker_image``, ``cpus``, ``memory = "2G"`` or ``memory_mb``,
  ``allow_internet``, ``build_timeout_sec``);
- current (Harbor ``TaskConfig``): ``schema_version = "1.1"`` (``version`` renamed), a
  top-level ``artifacts`` list, a ``[task]`` package table (``name = "org/name"``,
  ``description``, ``keywords``, ``[[task.authors]]``), ``[solution.env]``,
  ``[environment.env]``, ``memory_mb``/``storage_mb``/``gpus``, ``mcp_servers``, and network as
  ``[environment] network_mode = "public" | "no-network" | "allowlist"`` (``allow_internet``
  kept as its deprecated spelling), optionally per phase in ``[agent]``/``[verifier]``.

Keys this reader does not use are kept as warnings on the task (``TBTask.warnings``), never a
reason to skip it; what makes a task impossible to run faithfully here (multi-step
``steps``, a Windows image, a separate verifier container) is a per-task skip with that reason.

Network: Harbor gives a task the network unless the task cuts it (its default
``network_mode`` is ``public``); ``TBTask.network`` follows that. The adapter can still cut it
(see :mod:`evaluators.terminal_bench`).

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

from unified.benchmarks.contract import BenchmarkUnavailable, TaskFormatError

ROOT_ENV = "TERMINAL_BENCH_ROOT"
FIXTURES_ENV = "UNIFIED_FIXTURES_DIR"

KNOWN_TABLES: dict[str, set[str]] = {
    "metadata": set(),  # free-form: every key is kept in TBTask.metadata
    "task": {"name", "version", "description", "authors", "keywords"},
    "agent": {"timeout_sec", "user", "network_mode", "allowed_hosts"},
    "verifier": {"timeout_sec", "env", "user", "network_mode", "allowed_hosts", "environment_mode", "environment",
                 "continuous", "collect"},
    "environment": {"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "memory", "storage_mb", "storage",
                    "gpus", "gpu_types", "tpu", "mcp_servers", "env", "skills_dir", "healthcheck", "workdir",
                    "allow_internet", "network_mode", "allowed_hosts"},
    "solution": {"env"},
}
KNOWN_TOP = {"version", "schema_version", "source", "artifacts", "steps", "multi_step_reward_strategy"} | set(KNOWN_TABLES)
NETWORK_MODES = ("public", "no-network", "allowlist")


@dataclass
class TBTask:
    """One task folder, read."""

    id: str
    path: str
    instruction: str
    name: str = ""
    """``[task] name`` (``terminal-bench/regex-log``) in the current schema; the folder name otherwise."""
    schema: str = ""
    """``schema_version`` (or the launch-era ``version``) as written."""
    agent_timeout_s: float = 900.0
    verifier_timeout_s: float = 600.0
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    environment_env: dict[str, str] = field(default_factory=dict)
    docker_image: str | None = None
    build_context: str | None = None
    """``environment/`` when it holds a Dockerfile."""
    workdir: str | None = None
    build_timeout_s: float = 600.0
    cpus: float | None = None
    memory_mb: int | None = 2048
    network: bool = True
    """Harbor's default (``network_mode = "public"``) unless the task cuts it."""
    network_source: str = "harbor default (public)"
    difficulty: str = ""
    category: str = ""
    has_solution: bool = False
    warnings: list[str] = field(default_factory=list)
    """Keys read but not used here, approximations (an allowlist run as full network ...)."""
    skip_reason: str | None = None
    """Why this task cannot run faithfully through this adapter (whatever the backend)."""

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


def _str_table(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TaskFormatError(f"{where} must be a table")
    return {str(k): str(v) for k, v in value.items()}


def _network(env: dict, toml_path: Path, warnings: list[str]) -> tuple[bool, str]:
    """(network on?, where that came from), as Harbor resolves ``network_mode``/``allow_internet``."""
    mode = env.get("network_mode")
    if mode is not None:
        if mode not in NETWORK_MODES:
            raise TaskFormatError(f"{toml_path}: [environment] network_mode must be one of {list(NETWORK_MODES)}, "
                                  f"got {mode!r}")
        if mode == "allowlist":
            warnings.append(f"[environment] network_mode = 'allowlist' ({env.get('allowed_hosts')}) runs with the "
                            "full network here: host allowlists are not enforced")
        return mode != "no-network", f"task.toml network_mode = {mode!r}"
    if "allow_internet" in env:
        value = env["allow_internet"]
        if not isinstance(value, bool):
            raise TaskFormatError(f"{toml_path}: [environment] allow_internet must be true or false, got {value!r}")
        return value, f"task.toml allow_internet = {str(value).lower()}"
    return True, "harbor default (public)"


def read_task(task_dir: Path) -> TBTask:
    """Read one task folder; TaskFormatError names the file and the field that is wrong."""
    task_dir = Path(task_dir)
    toml_path = task_dir / "task.toml"
    instruction_path = task_dir / "instruction.md"
    if not toml_path.is_file():
        raise TaskFormatError(f"{task_dir}: missing task.toml")
    try:
        config = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(f"{toml_path}: invalid TOML: {exc}") from None
    if config.get("steps"):  # multi-step: instruction/tests live under steps/<name>/
        skip = f"multi-step task (Harbor [[steps]]): not supported by this adapter\n{toml_path}: {len(config['steps'])} steps"
        return TBTask(id=task_dir.name, path=str(task_dir.resolve()), instruction="", skip_reason=skip,
                      name=str((config.get("task") or {}).get("name") or task_dir.name))
    for required in (instruction_path, task_dir / "tests" / "test.sh"):
        if not required.is_file():
            raise TaskFormatError(f"{task_dir}: missing {required.relative_to(task_dir)}")
    warnings = [f"unknown top-level key {k!r} (ignored)" for k in sorted(set(config) - KNOWN_TOP)]
    tables: dict[str, dict] = {}
    for name, known in KNOWN_TABLES.items():
        table = config.get(name, {})
        if not isinstance(table, dict):
            raise TaskFormatError(f"{toml_path}: [{name}] must be a table")
        tables[name] = table
        if known:
            warnings += [f"[{name}] {k} is not used here (ignored)" for k in sorted(set(table) - known)]
    agent, verifier, env, meta = tables["agent"], tables["verifier"], tables["environment"], tables["metadata"]

    def number(table: dict, key: str, section: str, default: float | None) -> float | None:
        value = table.get(key, default)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise TaskFormatError(f"{toml_path}: [{section}] {key} must be a number, got {value!r}")
        return None if value is None else float(value)

    memory = env.get("memory_mb", env.get("memory"))
    dockerfile = task_dir / "environment" / "Dockerfile"
    image = env.get("docker_image")
    if image is not None and not isinstance(image, str):
        raise TaskFormatError(f"{toml_path}: [environment] docker_image must be a string, got {image!r}")
    network, network_source = _network(env, toml_path, warnings)
    skip = None
    if str(env.get("os", "linux")).lower() != "linux":
        skip = f"not a Linux task: only Linux tasks run here\n{toml_path}: [environment] os = {env.get('os')!r}"
    elif verifier.get("environment_mode") == "separate" or verifier.get("environment"):
        skip = f"the verifier runs in a separate container: not supported\n{toml_path}: [verifier] environment"
    for phase in ("agent", "verifier"):
        mode = tables[phase].get("network_mode")
        if mode is not None and (mode != "no-network") != network:
            warnings.append(f"[{phase}] network_mode = {mode!r} differs from the environment's; one session serves "
                            "agent and verifier here, so the environment's setting applies to both")
    for unused in ("gpus", "storage_mb", "storage", "mcp_servers", "healthcheck", "skills_dir"):
        value = env.get(unused)
        if value not in (None, 0, [], "", {}):
            warnings.append(f"[environment] {unused} = {value!r} is not provided here")
    if config.get("artifacts"):
        warnings.append(f"artifacts {config['artifacts']!r} are not collected")
    package = tables["task"]
    task = TBTask(
        id=task_dir.name, path=str(task_dir.resolve()), instruction=instruction_path.read_text().strip(),
        name=str(package.get("name") or task_dir.name),
        schema=str(config.get("schema_version", config.get("version", ""))),
        agent_timeout_s=number(agent, "timeout_sec", "agent", 900.0),
        verifier_timeout_s=number(verifier, "timeout_sec", "verifier", 600.0),
        verifier_env=_str_table(verifier.get("env"), f"{toml_path}: [verifier] env"),
        solution_env=_str_table(tables["solution"].get("env"), f"{toml_path}: [solution] env"),
        environment_env=_str_table(env.get("env"), f"{toml_path}: [environment] env"),
        docker_image=image or None,
        build_context=str((task_dir / "environment").resolve()) if dockerfile.is_file() else None,
        workdir=str(env["workdir"]) if env.get("workdir") else None,
        build_timeout_s=number(env, "build_timeout_sec", "environment", 600.0),
        cpus=number(env, "cpus", "environment", None),
        memory_mb=_memory_mb(memory, f"{toml_path}: [environment] memory") if memory is not None else 2048,
        network=network, network_source=network_source,
        difficulty=str(meta.get("difficulty", "")), category=str(meta.get("category", "")),
        has_solution=(task_dir / "solution" / "solve.sh").is_file(), warnings=warnings, skip_reason=skip)
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
