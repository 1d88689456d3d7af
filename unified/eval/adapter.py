"""The adapter contract: what makes a benchmark pluggable into ``python -m unified.eval``.

A benchmark is a package that exposes an :class:`Adapter` under the entry-point group
``unified.benchmarks`` (see ``[project.entry-points."unified.benchmarks"]`` in pyproject.toml)::

    [project.entry-points."unified.benchmarks"]
    bfcl_v4 = "evaluators.bfcl_v4:BFCLAdapter"

The object an entry point names is called with the benchmark's config (``**config``, from
``--set benchmarks.NAME.KEY=VALUE``, or ``benchmark_config: {NAME: {KEY: VALUE}}`` in a recipe) and must return an :class:`Adapter`. An
adapter answers four questions and nothing else:

``tasks(split, limit) -> list[Task]``
    Which tasks, read from the benchmark's own files. A missing source (no checkout, no
    package) raises :class:`BenchmarkUnavailable` ``(reason, how_to_fix)``; the runner prints
    one line and records the benchmark as skipped (never a traceback, never a fake 0). A
    single task that cannot run here (no API key, ...) gets ``Task.skip_reason`` instead.
``open(task) -> Environment``
    A context manager that starts what the task needs and always stops it (also on errors
    and Ctrl-C). It gives the tools, the system prompt, the first user message,
    ``step(tool_calls) -> observations`` (exactly one Observation per call, in call order),
    ``next_user_turn(episode)`` for benchmarks with follow-up user turns (BFCL multi-turn,
    Claw-Eval's simulated user), ``done`` and ``metadata``. ``tools`` may change between
    user turns (BFCL ``miss_func`` adds functions later); the agent loop re-reads it.
``score(task, episode, env) -> EpisodeResult``
    The benchmark's official per-episode metric. Called after the episode ends and *before*
    the environment is closed, so it can read the environment's final state.
``aggregate(results) -> dict``
    The official aggregate (weights, Avg@k, pass^k ...). It must hold a float under
    ``"score"`` (the headline number, in percent or 0..1 as the benchmark reports it, named in
    ``"metric"``); anything else (per-category scores, counts) is free-form.

``runs_default`` is the number of rollouts per task the benchmark's protocol asks for
(Claw-Eval Avg@3: 3, BFCL: 1); ``--runs`` overrides it.

Adapters never see the prompting module or the policy: those belong to the agent loop
(:mod:`unified.agent`), so any adapter runs under any ``--prompting``.

``load_adapter(name, **config)`` finds an adapter by name; an unknown name is an error that
lists the registered ones ("did you mean ...?"). A name registered by entry point whose
module is not there yet raises :class:`BenchmarkUnavailable` ("not yet available").
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable

from unified.registry import UnknownNameError
from unified.types import Episode, EpisodeResult, Observation, Record, ToolCall, ToolSpec

ENTRY_POINT_GROUP = "unified.benchmarks"
"""The entry-point group benchmark packages register their adapter under."""

SUITES: dict[str, list[str]] = {
    "ood": ["claw_eval", "qwenclawbench", "bfcl_v4"],
    "in_domain": ["terminal_bench_2", "swe_bench_verified", "swe_bench_pro", "widesearch"],
}
"""The suites of the study (Qwen-AgentWorld report, Paradigm II); ``all`` is their union."""
SUITES["all"] = SUITES["in_domain"] + SUITES["ood"]


class BenchmarkUnavailable(RuntimeError):
    """A benchmark (or its data) that cannot run here; recorded as a skip, not an error.

    ``reason`` says why in one line, ``how_to_fix`` what to install, clone or set.
    """

    def __init__(self, reason: str, how_to_fix: str = "") -> None:
        self.reason, self.how_to_fix = reason, how_to_fix
        super().__init__(f"{reason}" + (f" ({how_to_fix})" if how_to_fix else ""))

    def line(self, name: str) -> str:
        """The one line the runner prints."""
        fix = f" -> {self.how_to_fix}" if self.how_to_fix else ""
        return f"{name}: skipped: {self.reason}{fix}"


@dataclass
class Task(Record):
    """One benchmark task, as the adapter read it."""

    id: str
    """The benchmark's own task id (unique within the benchmark)."""
    benchmark: str
    """Adapter name, e.g. ``bfcl_v4``."""
    split: str = ""
    """Split or category the task belongs to (e.g. ``multi_turn_base``)."""
    payload: dict[str, Any] = field(default_factory=dict)
    """Everything the adapter needs to open and score the task (JSON-serialisable)."""
    skip_reason: str | None = None
    """Set when this task cannot run here (missing API key ...): recorded as a skip."""
    group: str = ""
    """Optional coarser group (e.g. BFCL ``multi_turn``) for aggregation."""
    depends_on: list[str] = field(default_factory=list)
    """Ids of tasks that must finish first (BFCL memory questions need the memory-writing
    conversations of their scenario). The runner schedules them first; a dependency that is
    not part of the run is ignored."""
    scored: bool = True
    """False for tasks that only prepare state for others (they are run and recorded, but
    ``aggregate`` leaves them out)."""


class Environment:
    """One task's world, as a context manager: ``start`` on enter, ``stop`` always on exit.

    Subclasses set ``tools``, ``system_prompt`` and ``first_user_message`` (in ``__init__`` or
    ``start``) and implement ``step``. ``stop`` must be idempotent and must not raise.
    """

    tools: list[ToolSpec]
    system_prompt: str
    first_user_message: str
    malformed_call_ends_turn: ClassVar[bool] = False
    """When every call of a step is malformed, the user turn ends there (``next_user_turn``)
    instead of the agent seeing parse errors and trying again: bfcl's inference handlers do
    this (a response with nothing decodable ends the turn)."""
    steps_unoffered_calls: ClassVar[bool] = False
    """Well-formed calls to names that are not among ``tools`` go to ``step`` too (which must
    answer each one), instead of the agent loop answering "no tool named ...": bfcl executes
    every call and records the error itself."""

    def __init__(self) -> None:
        self.tools = []
        self.system_prompt = ""
        self.first_user_message = ""
        self.done = False
        """Set by the environment when the task is over (the agent loop then stops)."""
        self.metadata: dict[str, Any] = {}
        """Run facts recorded into Episode.metadata (e.g. ``sandbox``: ``bwrap``/``docker``)."""

    def start(self) -> None:
        """Start services, sandboxes, containers. Default: nothing."""

    def stop(self) -> None:
        """Stop everything ``start`` started. Default: nothing. Must not raise."""

    def step(self, tool_calls: list[ToolCall]) -> list[Observation]:
        """Execute every call (none dropped), return one Observation per call, in order.

        A call with ``parse_error`` set, or naming an unknown tool, must give an error
        Observation (``is_error=True``) rather than raise.
        """
        raise NotImplementedError

    def next_user_turn(self, episode: Episode) -> str | None:
        """The next user message once the agent answered without tool calls, or None when done."""
        return None

    def __enter__(self) -> "Environment":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


class Adapter:
    """Base class of benchmark adapters (see the module docstring for the contract)."""

    name: ClassVar[str] = ""
    runs_default: ClassVar[int] = 1

    def __init__(self, **config: Any) -> None:
        self.config = config

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        raise NotImplementedError

    def open(self, task: Task) -> Environment:
        raise NotImplementedError

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        raise NotImplementedError

    def aggregate(self, results: list[EpisodeResult]) -> dict[str, Any]:
        """Default: mean score in percent over scored (not skipped, not crashed-as-skip) results."""
        scored = [r for r in results if r.skipped is None]
        mean = 100.0 * sum(r.score for r in scored) / len(scored) if scored else 0.0
        return {"score": mean, "metric": "mean score (%)", "n": len(scored)}

    def agent_limits(self, limits: Any) -> Any:
        """The :class:`unified.agent.loop.AgentLimits` this benchmark runs under, given the run's.
        Default: the run's; an adapter whose protocol fixes its own limits (BFCL's step limit)
        returns those."""
        return limits

    runs_requested: int | None = None
    """Set by the runner: the trials per task this run asked for (``--runs``, else ``runs_default``),
    so ``aggregate`` can count a missing trial as the protocol does and label fewer trials."""

    work_dir: Path | None = None
    """Set by the runner before ``tasks``: a per-benchmark directory inside the run's output
    for state that must outlive one episode (and survive a resume), e.g. BFCL memory snapshots."""

    # Optional: the ground-truth actions, for the ``gold`` policy that verifies an adapter.
    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        """Per user turn, the calls a perfect agent makes (then it answers). Optional."""
        raise NotImplementedError(f"{self.name or type(self).__name__} has no ground truth to replay")

    def gold_answer(self, task: Task) -> str | None:
        """The final answer text a perfect agent gives, where the benchmark scores text. Optional."""
        return None


def config_list(value: Any) -> list[str]:
    """``None``/empty -> []; ``"a, b"`` -> ["a", "b"]; a list -> its items as strings."""
    if not value:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def limit_runnable(tasks: list[Task], limit: int | None) -> list[Task]:
    """The first ``limit`` runnable tasks, with the skipped ones met on the way (reported as skips)."""
    if not limit:
        return tasks
    out, runnable = [], 0
    for task in tasks:
        if runnable >= limit:
            break
        out.append(task)
        runnable += task.skip_reason is None
    return out


def select_task_ids(tasks: list[Task], task_ids: Iterable[str]) -> list[Task]:
    """The tasks whose id is in ``task_ids``, plus every task they depend on (transitively), in the
    benchmark's own order, so a chosen BFCL memory question still gets its memory-writing
    conversations. Ids that name no task here are ignored (they may belong to another benchmark)."""
    by_id = {task.id: task for task in tasks}
    keep: set[str] = set()
    pending = [i for i in task_ids if i in by_id]
    while pending:
        task_id = pending.pop()
        if task_id not in keep:
            keep.add(task_id)
            pending += [d for d in by_id[task_id].depends_on if d in by_id]
    return [task for task in tasks if task.id in keep]


def require_execution_backend(name: str | None):
    """The ``unified.execution`` backend ``name`` (``None``: auto), or BenchmarkUnavailable saying why."""
    from unified.execution import BackendUnavailable, get_backend

    try:
        backend = get_backend(name)
        backend.require()
    except BackendUnavailable as exc:
        raise BenchmarkUnavailable(f"no execution backend: {exc.reason}", exc.how_to_fix) from None
    return backend


# --------------------------------------------------------------------------------------
# discovery


def registered_benchmarks() -> dict[str, importlib.metadata.EntryPoint]:
    """Entry points of the ``unified.benchmarks`` group, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def expand_benchmarks(suite: str | None = None, benchmarks: Iterable[str] | None = None) -> list[str]:
    """Benchmark names from ``--suite`` and/or ``--benchmarks`` (order kept, duplicates dropped)."""
    names: list[str] = []
    if suite:
        if suite not in SUITES:
            raise UnknownNameError("suite", suite, list(SUITES))
        names += SUITES[suite]
    for item in benchmarks or []:
        names += [part.strip() for part in str(item).split(",") if part.strip()]
    return list(dict.fromkeys(names))


def load_adapter(name: str, **config: Any) -> Adapter:
    """The adapter registered as ``name``, constructed with ``config``.

    Raises UnknownNameError (listing valid names) for a name nobody registered, and
    BenchmarkUnavailable when the entry point's module is not installed/written yet.
    """
    if ":" in name:  # "package.module:Factory", an adapter that no entry point names (yet)
        module_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ModuleNotFoundError, AttributeError) as exc:
            raise BenchmarkUnavailable("not yet available", f"cannot import {name!r}: {exc}") from None
        adapter = factory(**config)
        if not getattr(adapter, "name", ""):
            adapter.name = attr  # type: ignore[misc]
        return adapter
    eps = registered_benchmarks()
    if name not in eps:
        known = sorted(set(eps) | set(SUITES["all"]))
        if name in SUITES["all"]:
            raise BenchmarkUnavailable(
                "not registered by any installed package",
                "run `make setup` (or `pip install -e .`) to refresh the entry points in pyproject.toml")
        raise UnknownNameError("benchmark", name, known)
    ep = eps[name]
    module_name = ep.value.split(":", 1)[0].strip()
    try:
        factory = ep.load()
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise BenchmarkUnavailable(
                "not yet available", f"its adapter module {module_name!r} is not in this installation") from None
        raise BenchmarkUnavailable(f"its adapter needs the missing package {missing!r}",
                                   f"pip install {missing.split('.')[0]}") from None
    except AttributeError:
        raise BenchmarkUnavailable("not yet available", f"{ep.value!r} does not exist yet") from None
    adapter = factory(**config)
    if not getattr(adapter, "name", ""):
        adapter.name = name  # type: ignore[misc]
    return adapter
