"""The run plan: what an eval command will do, decided once, before any episode, and written as ``OUT/plan.json``.

``python -m unified.eval`` is three steps, each with one job::

    plan_run(cfg)      -> RunPlan     which benchmarks, their resolved settings and limits, the engine,
                                      the (task, trial) pairs after the --shard and resume filters,
                                      the parts that are not episodes (unified.eval.parts: lm-eval's tasks,
                                      sharded and resumed by the same rules)
    execute(plan)                     runs those pairs and appends their records (unified.eval.runner)
    summarize(run_dir) -> RunSummary  summary.json / summary.md from plan.json and the records on disk
                                      (unified.eval.summarize)

Planning asks every adapter for its tasks and limits (``tasks``, ``agent_limits``) inside a per-benchmark
guard: an adapter that raises there, or is not installed, becomes that benchmark's planned ``skipped`` /
``error`` (:func:`adapter_failure`) and the others are planned as usual. ``--shard I/N`` keeps the pairs of
shard I (:func:`unified.eval.shards.shard_pairs`); a pair already recorded in ``--out`` is not run again.
``--dry-run`` prints the plan (:func:`plan_lines`) and writes nothing; a run writes ``plan.json`` (through
:mod:`unified.store`, atomically) before its first episode, and :func:`read_plan` reads it back strictly
(:func:`unified.config.from_dict`). ``--merge`` writes the plan of the unsharded command into the merged
directory from the shards' plans (:mod:`unified.eval.merge`).
"""

from __future__ import annotations

import hashlib
import json
import sys
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from unified.agent.replay import replay_name
from unified.benchmarks.contract import Adapter, AgentLimits, BenchmarkUnavailable, Task, check_task_ids
from unified.benchmarks.discovery import adapter_paths, load_adapter
from unified.benchmarks.helpers import limit_runnable, select_task_ids
from unified.config import ConfigError, from_dict, to_dict
from unified.eval.config import EvalConfig
from unified.eval.costs import EpisodeSettings, estimate_line
from unified.eval.engine import EngineChoice
from unified.eval.parts import PlannedPart, parts_of_plan, plan_parts
from unified.eval.rundir import BenchmarkStore
from unified.eval.shards import parse_shard, shard_pairs
from unified.registry import UnknownNameError
from unified.store import read_regular_file, write_json_atomic

PLAN_FILE = "plan.json"
PLAN_MAX_BYTES = 256 << 20
"""Most bytes of a ``plan.json`` that are read (it lists every (task, trial) pair)."""
PLAN_VERSION = 4
"""2: ``general`` is lm-eval's planned part (was lm-eval's options alone); 3: a ``--benchmarks module:Class``
benchmark is planned under its class's ``name`` (``adapter_path`` keeps the ``module:Class``); a version-2 plan
named it by that text, read back under its ``directory``; 4: the parts that are not episodes are one list,
``parts`` (:mod:`unified.eval.parts`), each item read by its ``name``; a plan of 1-3 keeps lm-eval's in
``general``, read back as an item of ``parts``."""

Pair = tuple[str, int]
"""(task id, trial)."""


@dataclass
class PlannedEngine:
    """The policy's engine (:class:`unified.eval.engine.EngineChoice`, as planned)."""

    backend: str | None = None
    auto: bool = False
    line: str = ""


@dataclass
class PlannedBenchmark:
    """One benchmark of the plan. ``status`` ``run``: its pairs are below; ``skipped`` / ``error``: its
    adapter could not be planned (not installed, data missing, or an adapter call raised), ``reason``
    says why and nothing of it runs."""

    name: str
    """The benchmark's one name (:func:`unified.benchmarks.discovery.benchmark_name`): a registered name, or
    a ``module:Class`` item's class ``name``; the key of its settings and its summary entry."""
    directory: str
    """``OUT/<directory>`` holds its records (the adapter's ``name``, else ``name``)."""
    adapter_path: str | None = None
    """The ``module:Class`` the command named it by (``--benchmarks module:Class``), None for an installed
    benchmark. Recorded for messages only: code is loaded from the command line, never from a plan."""
    status: Literal["run", "skipped", "error"] = "run"
    reason: str | None = None
    how_to_fix: str | None = None
    traceback: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    """The adapter's parsed ``Config``, defaults included."""
    limits: AgentLimits | None = None
    """The limits its episodes run under (after the adapter's ``agent_limits``)."""
    runs: int = 1
    runs_protocol: int = 1
    tasks: list[str] = field(default_factory=list)
    """The selected tasks' ids in listing order (before ``--shard``)."""
    not_scored: list[str] = field(default_factory=list)
    """Selected tasks that are prerequisites, not scored (``Task.scored`` false)."""
    tasks_in_benchmark: int | None = None
    """Scored tasks of the whole (split of the) benchmark when ``--limit`` / ``--task-ids`` cut the selection."""
    pairs: list[Pair] = field(default_factory=list)
    """The (task, trial) pairs this run covers (after ``--shard``), in task then trial order."""
    pairs_total: int = 0
    """Pairs of the unsharded selection (``len(tasks) * runs``)."""
    to_run: list[Pair] = field(default_factory=list)
    """``pairs`` that had no result in ``--out`` when the plan was made (after the resume filter)."""
    judge: str | None = None
    """The judge / simulated user spec the adapter resolved (its ``judge_spec``: the setting, else its
    environment variable, else ``embedded``), None for a benchmark without one."""
    data_digest: str | None = None
    """:func:`tasks_digest` of the selected tasks: the data version, compared by ``--compare``."""
    sent: dict[str, Any] | None = None
    """The sampling fields its agent actually puts in a policy request
    (:meth:`unified.benchmarks.contract.Adapter.sent_request_settings`: the run's sampling for our agent loop,
    only what the user set for harbor's Terminus-2), None when the adapter could not say; ``config.sampling``
    is what the command asked for."""
    aggregate_rule: Literal["adapter", "mean"] = "adapter"
    """How its summary number is computed: ``mean``: the adapter keeps the SDK's default aggregate
    (:func:`unified.benchmarks.aggregate.mean_score`), which a summary recomputes from the records
    without the adapter's code; ``adapter``: its own ``aggregate`` (its code is needed, or, for a merge
    without it, the shards' recorded aggregates combined and labelled: :mod:`unified.eval.summarize`)."""

    def __post_init__(self) -> None:  # JSON has no tuples: [task id, trial] read back as (str, int)
        for name in ("pairs", "to_run"):
            try:
                setattr(self, name, [(str(task_id), int(trial)) for task_id, trial in getattr(self, name)])
            except (TypeError, ValueError):
                raise ConfigError(f"benchmark {self.name}: {name}: expected [task id, trial] pairs") from None


@dataclass
class RunPlan:
    """What one eval command does (module docstring); ``OUT/plan.json``."""

    config: EvalConfig
    """The command's config, its ``backend`` resolved (``auto`` -> what was chosen)."""
    version: int = PLAN_VERSION
    engine: PlannedEngine = field(default_factory=PlannedEngine)
    policy_given: bool = False
    """The caller passed a live model (``config.model`` is its label)."""
    benchmarks: list[PlannedBenchmark] = field(default_factory=list)
    parts: list[PlannedPart] = field(default_factory=list)
    """The planned benchmarks whose work is not an episode (:mod:`unified.eval.parts`: lm-eval's tasks), each
    with what it covers after ``--shard`` and what ``--out`` records; read back by :func:`read_plan`."""

    def benchmark(self, name: str) -> PlannedBenchmark:
        return next(b for b in self.benchmarks if b.name == name)

    def part(self, name: str) -> PlannedPart:
        return next(p for p in self.parts if p.name == name)


@dataclass
class Loaded:
    """An adapter the planner loaded and the tasks it listed, kept in memory so that :func:`execute`
    in the same process need not list them again (never written)."""

    adapter: Adapter
    tasks: list[Task]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def adapter_failure(name: str, call: str, exc: BaseException) -> tuple[str, str, str | None]:
    """(status, reason, how_to_fix) of an exception raised by an adapter's ``call`` (``tasks``,
    ``agent_limits``, ``aggregate``, ...): BenchmarkUnavailable and ImportError are skips (an ImportError
    names the module to install), anything else is an error of that benchmark. One line is printed.

    (A local classifier; the adapter SDK may grow a shared one.)"""
    if isinstance(exc, BenchmarkUnavailable):
        _log(exc.line(name))
        return "skipped", exc.reason, exc.how_to_fix
    if isinstance(exc, ImportError):
        module = exc.name or str(exc)
        _log(f"{name}: skipped: {call}() needs the module {module!r}, not importable here ({exc})")
        return "skipped", f"{call}() needs the module {module!r}: {exc}", f"install the package that provides {module!r}"
    where = "before any episode" if call in ("load", "tasks", "agent_limits") else f"in {call}()"
    _log(f"{name}: failed {where}: {type(exc).__name__}: {exc}")
    reason = f"{type(exc).__name__}: {exc}" if call in ("load", "tasks") else f"{call}() raised {type(exc).__name__}: {exc}"
    return "error", reason, None


def open_adapter(name: str, cfg: EvalConfig, paths: dict[str, str] | None = None) -> Adapter:
    """The adapter of benchmark ``name`` with its ``benchmark_config`` settings, told before any
    ``tasks()`` call which replayer answers its episodes (``Adapter.replay``: ``"gold"`` for
    ``--model gold``, else None). ``paths``: the ``module:Class`` of the names the user's command gave
    (:func:`unified.benchmarks.discovery.adapter_paths`); any other name is an installed benchmark."""
    adapter = load_adapter((paths or {}).get(name, name), **cfg.benchmark_config.get(name, {}))
    adapter.replay = replay_name(cfg.model)
    return adapter


def select_tasks(adapter: Adapter, cfg: EvalConfig) -> list[Task]:
    """The tasks of ``cfg``'s selection (``--split``, ``--task-ids`` with their dependencies, ``--limit``)."""
    if cfg.task_ids:
        return limit_runnable(select_task_ids(adapter.tasks(cfg.split, None), cfg.task_ids), cfg.limit)
    return adapter.tasks(cfg.split, cfg.limit)


def _tasks_in_benchmark(adapter: Adapter, cfg: EvalConfig) -> int | None:
    """Scored tasks of the whole (split of the) benchmark when ``--limit``/``--task-ids`` cut the
    selection, so the summary can say "5 of 300"; None when nothing was cut or listing fails."""
    if not cfg.limit and not cfg.task_ids:
        return None
    try:
        return sum(1 for t in adapter.tasks(cfg.split, None) if t.scored)
    except Exception:  # the selection itself listed fine; the count is only informative
        return None


def tasks_digest(tasks: list[Task]) -> str:
    """A short sha256 of the selected tasks as the adapter read them (id, split, group, dependencies, payload):
    two runs with the same digest ran the same data. Absolute paths in a payload count by their last
    component, so the same data checked out in another directory digests the same."""
    def strip(value: Any) -> Any:
        if isinstance(value, str) and value.startswith("/"):
            return value.rstrip("/").rsplit("/", 1)[-1]
        if isinstance(value, dict):
            return {str(k): strip(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        return value

    rows = [[t.id, t.split, t.group, list(t.depends_on), t.scored, strip(t.payload)] for t in tasks]
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:16]


def plan_benchmark(name: str, cfg: EvalConfig, out: Path, *, repair: bool = True,
                   loaded: dict[str, Loaded] | None = None, paths: dict[str, str] | None = None) -> PlannedBenchmark:
    """One benchmark's plan; every adapter call in it is guarded (a failure is the planned status).
    ``repair``: cut a torn last record before reading the recorded pairs (False for ``--dry-run``);
    ``paths``: :func:`open_adapter`'s."""
    call, directory = "load", name
    path = (paths or {}).get(name) or (name if ":" in name else None)
    try:
        adapter = open_adapter(name, cfg, paths)
        directory = adapter.name or name
        call = "tasks"
        tasks = select_tasks(adapter, cfg)
        if cfg.task_ids and not tasks:
            _log(f"{name}: skipped: none of --task-ids is a task of this benchmark (split {cfg.split!r})")
            return PlannedBenchmark(name, directory, path, "skipped", "none of the requested task ids is a task of "
                                    "this benchmark", "check the ids against the benchmark's results.jsonl or its data")
        check_task_ids(tasks, f"benchmark {name}")  # ids key records and name scratch paths: checked, unique
        call = "agent_limits"
        limits = adapter.agent_limits(cfg.limits)  # the protocol's own budgets, recorded in the summary
        if not isinstance(limits, AgentLimits):
            raise TypeError(f"agent_limits() returned {type(limits).__name__}, not AgentLimits")
        call = "tasks"
        in_benchmark = _tasks_in_benchmark(adapter, cfg)
        settings = to_dict(dict(adapter.config))
    except (UnknownNameError, ConfigError):  # a misspelt name or setting: the usage error it is
        raise
    except Exception as exc:  # this benchmark cannot be planned: recorded, the others go on
        status, reason, fix = adapter_failure(name, call, exc)
        return PlannedBenchmark(name, directory, path, status, reason, fix,
                                traceback.format_exc() if status == "error" else None)
    runs = cfg.runs or adapter.runs_default
    wanted = shard_pairs(directory, tasks, runs, parse_shard(cfg.shard))
    pairs = [(t.id, trial) for t in tasks for trial in range(runs) if (t.id, trial) in wanted]
    recorded = BenchmarkStore(out, directory).load(repair=repair)
    if loaded is not None:
        loaded[name] = Loaded(adapter, tasks)
    return PlannedBenchmark(
        name, directory, path, settings=settings, limits=limits, runs=runs, runs_protocol=adapter.runs_default,
        tasks=[t.id for t in tasks], not_scored=[t.id for t in tasks if not t.scored], tasks_in_benchmark=in_benchmark,
        pairs=pairs, pairs_total=len(tasks) * runs, to_run=[p for p in pairs if p not in recorded],
        judge=_judge_spec(adapter), data_digest=tasks_digest(tasks), sent=_sent_settings(adapter, name, cfg),
        aggregate_rule="mean" if getattr(type(adapter), "aggregate", None) is Adapter.aggregate else "adapter")


def _sent_settings(adapter: Adapter, name: str, cfg: EvalConfig) -> dict[str, Any] | None:
    """:attr:`PlannedBenchmark.sent` from the adapter's hook, given the ``--set`` settings (as identity.json
    records them); a hook that raises leaves it None (recorded, never a reason to skip the benchmark)."""
    hook = getattr(type(adapter), "sent_request_settings", None)
    try:
        return dict(hook(dict(cfg.benchmark_config.get(name, {})), cfg.sampling)) if hook else None
    except Exception:  # an adapter's own hook: what it sends stays unknown, the run goes on
        return None


def _sent_line(b: PlannedBenchmark, sampling: Any) -> str:
    """``; its agent sends ...`` when a benchmark's agent does not send the run's sampling as asked."""
    if b.sent is None:
        return ""
    asked = {"max_tokens": sampling.max_new_tokens, "temperature": sampling.temperature}
    if all(b.sent.get(k) == v for k, v in asked.items()):
        return ""
    fields = ", ".join(f"{k} {b.sent[k]:g}" if isinstance(b.sent[k], float) else f"{k} {b.sent[k]}"
                       for k in asked if k in b.sent) or "no temperature or max_tokens"
    return f"; its agent sends {fields} ({b.sent.get('source', 'the adapter says so')})"


def _judge_spec(adapter: Adapter) -> str | None:
    """The adapter's resolved judge (``judge_spec``) and simulated user (``user_spec``, when another)."""
    judge, user = getattr(adapter, "judge_spec", None), getattr(adapter, "user_spec", None)
    if not judge:
        return None
    return str(judge) + (f" (user {user})" if user and user != judge else "")


def plan_run(cfg: EvalConfig, names: list[str], *, engine: EngineChoice = EngineChoice(None),
             policy_given: bool = False, repair: bool = True, loaded: dict[str, Loaded] | None = None) -> RunPlan:
    """The plan of ``cfg`` for the benchmarks ``names`` (:func:`unified.eval.runner.benchmarks_to_run`) and,
    the parts ``--suite`` names that are not episodes (:func:`unified.eval.parts.plan_parts`). ``engine``: the engine chosen for the policy
    (``cfg.backend`` is set to it). ``loaded`` (optional) is filled with the adapters and tasks listed."""
    cfg = replace(cfg, backend=engine.backend)
    out = Path(cfg.out)
    paths = adapter_paths(cfg.benchmarks)
    return RunPlan(config=cfg, engine=PlannedEngine(engine.backend, engine.auto, engine.line), policy_given=policy_given,
                   benchmarks=[plan_benchmark(n, cfg, out, repair=repair, loaded=loaded, paths=paths) for n in names],
                   parts=plan_parts(cfg, repair=repair))


def recount_recorded(plan: RunPlan) -> RunPlan:
    """``plan`` (made with ``repair=False`` before the run directory was taken) with each benchmark's ``to_run``
    recounted from ``--out`` after cutting a torn last record (the writer's job, under the lock)."""
    out = Path(plan.config.out)
    benchmarks = []
    for b in plan.benchmarks:
        if b.status == "run":
            recorded = BenchmarkStore(out, b.directory).load(repair=True)
            b = replace(b, to_run=[p for p in b.pairs if p not in recorded])
        benchmarks.append(b)
    return replace(plan, benchmarks=benchmarks)


def write_plan(out: str | Path, plan: RunPlan) -> Path:
    """``OUT/plan.json``, atomically."""
    path = Path(out) / PLAN_FILE
    write_json_atomic(path, to_dict(plan))
    return path


def read_plan(run_dir: str | Path) -> RunPlan:
    """The :class:`RunPlan` of a run directory, read strictly (ConfigError naming the file and field);
    FileNotFoundError when it has none (a run directory of a version before plans)."""
    path = Path(run_dir) / PLAN_FILE
    try:  # only a regular file, never through a link, never a wait on a FIFO
        raw = read_regular_file(path, max_bytes=PLAN_MAX_BYTES)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no run plan (not an eval run directory, or one written before plans)") \
            from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    parts = parts_of_plan(data, str(path))  # each by its name (a plan of 1-3: lm-eval's in its own field)
    plan = replace(from_dict(RunPlan, data, source=str(path)), parts=parts)
    return _named_by_directory(plan) if plan.version < 3 else plan


def _named_by_directory(plan: RunPlan) -> RunPlan:
    """A plan of version 2 or older read under one name per benchmark: a benchmark it named by its
    ``module:Class`` text is renamed to its records' directory (its class's ``name``), the text kept as its
    ``adapter_path``; its settings in ``config.benchmark_config`` move with it. Nothing is imported."""
    renamed = {b.name: b.directory for b in plan.benchmarks if ":" in b.name and b.directory and ":" not in b.directory}
    if not renamed:
        return replace(plan, version=PLAN_VERSION)
    settings = {renamed.get(k, k): v for k, v in plan.config.benchmark_config.items()}
    return replace(plan, version=PLAN_VERSION, config=replace(plan.config, benchmark_config=settings),
                   benchmarks=[replace(b, name=renamed[b.name], adapter_path=b.name) if b.name in renamed else b
                               for b in plan.benchmarks])


def episode_settings(plan: RunPlan, b: PlannedBenchmark) -> EpisodeSettings:
    """What the time estimate of ``b``'s episodes depends on (:class:`unified.eval.costs.EpisodeSettings`)."""
    limits = b.limits or plan.config.limits
    return EpisodeSettings(model=plan.config.model, engine=plan.engine.backend,
                           max_new_tokens=plan.config.sampling.max_new_tokens, thinking=bool(plan.config.sampling.thinking),
                           max_turns=limits.max_turns, prompting=plan.config.prompting,
                           max_episode_tokens=limits.max_episode_tokens, max_seconds=limits.max_seconds, judge=b.judge)


def plan_lines(plan: RunPlan) -> list[str]:
    """The plan in words: one line per benchmark (tasks x trials, what is recorded, the budgets its episodes
    run under), then the whole run (episodes over benchmarks, sampling, a time estimate from the cost table,
    :func:`unified.eval.costs.estimate_line`). Printed by ``--dry-run`` and at the start of a run."""
    shard = plan.config.shard
    sampling = plan.config.sampling
    lines = []
    to_run: dict[str, int] = {}
    for b in plan.benchmarks:
        if b.status != "run":
            lines.append(f"# plan: {b.name}: {b.status}: {b.reason}" + (f" ({b.how_to_fix})" if b.how_to_fix else ""))
            continue
        part = f", shard {shard}: {len(b.pairs)} of them" if shard else ""
        budget = ""
        if b.limits is not None:
            turns = ("no turn cap (the benchmark's protocol)" if b.limits.max_turns >= 10**6
                     else f"<= {b.limits.max_turns} turns")
            budget = (f"; each episode {turns}, <= {b.limits.max_steps_per_turn} calls a user turn, "
                      f"<= {b.limits.max_episode_tokens} tokens, <= {b.limits.max_seconds:g} s")
        lines.append(f"# plan: {b.name}: {len(b.tasks)} tasks x {b.runs} trial(s) = {b.pairs_total} episodes{part}; "
                     f"{len(b.pairs) - len(b.to_run)} recorded, {len(b.to_run)} to run{budget}{_sent_line(b, sampling)}")
        to_run[b.name] = len(b.to_run)
    running = [b for b in plan.benchmarks if b.status == "run"]
    if running:
        lines.append(f"# plan: in all: {sum(to_run.values())} episode(s) of {len(running)} benchmark(s) still to run "
                     f"({len(plan.benchmarks) - len(running)} benchmark(s) not run); each policy call <= {sampling.max_new_tokens} "
                     f"tokens, thinking {'on' if sampling.thinking else 'off'}, temperature {sampling.temperature:g}; "
                     + estimate_line(to_run, {b.name: episode_settings(plan, b) for b in running}))
    return lines + [line for part in plan.parts for line in part.lines()]
