"""The eval runner: the run plan's (task, trial) pairs through the agent loop, into a run directory.

:func:`run_eval` is the whole command: check the selection, choose the engine, make the plan
(:func:`unified.eval.plan.plan_run`: every adapter call of planning guarded per benchmark; a misspelt name
or setting is refused before ``--out`` is touched), take the run directory
(:class:`unified.eval.rundir.RunDirLock`), record its identity, write the plan as ``OUT/plan.json``, then
:func:`execute` it. :func:`execute` only runs episodes: for each planned benchmark the pairs without a
result go through :class:`unified.agent.loop.AgentLoop` with a progress bar in episodes/s, each result
appended as it comes; after each benchmark the summary is rewritten by
:func:`unified.eval.summarize.summarize`, which reads the plan and the records on disk.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from unified.agent.loop import AgentLoop, Job
from unified.agent.replay import Replayer, replayer_for
from unified.benchmarks.contract import RunContext
from unified.benchmarks.discovery import (ALL_SUITE, adapter_paths, check_benchmark_config, declared_suites,
                                          expand_benchmarks, named_benchmark_config)
from unified.config import ConfigError
from unified.eval.config import EvalConfig
from unified.eval.parts import part_suites, parts_asked, reserved_names, split_benchmarks, split_suites
from unified.eval.engine import EngineChoice, choose_backend, fallback_line
from unified.eval.identity import record_run_dir, recorded_backend
from unified.eval.plan import (Loaded, PlannedBenchmark, PlannedEngine, RunPlan, open_adapter, plan_lines, plan_run,
                               recount_recorded, select_tasks, write_plan)
from unified.eval.records import BenchmarkEntry, RunSummary
from unified.eval.rundir import BenchmarkStore, RunDirLock
from unified.eval.summarize import summarize
from unified.inference.base import ChatModel, make_chat_model
from unified.registry import UnknownNameError

__all__ = ["EvalConfig", "EvalInterrupted", "benchmarks_to_run", "engine_for", "execute", "run_eval"]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _Progress:
    """tqdm bar in episodes/s (unit ``ep``), or plain lines when tqdm is missing."""

    def __init__(self, name: str, total: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=name, unit="ep", file=sys.stderr, dynamic_ncols=True, mininterval=1.0)
        self.errors = 0

    def update(self, error: bool) -> None:
        self.errors += int(error)
        self.bar.set_postfix(errors=self.errors, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


class EvalInterrupted(Exception):
    """Ctrl-C (SIGINT) during a run: the summary of what finished is written; ``saved`` results
    are in the run directory and rerunning the same command resumes."""

    def __init__(self, saved: int) -> None:
        super().__init__(f"interrupted: {saved} results saved; rerun the same command to resume")
        self.saved = saved


def run_eval(cfg: EvalConfig, *, policy: ChatModel | Replayer | None = None,
             resume_anyway: bool = False) -> RunSummary:
    """Run (or resume) the evaluation described by ``cfg``; returns the summary.

    The run directory is held for the whole run (:class:`unified.eval.rundir.RunDirLock`): a
    second run on the same ``--out`` raises :class:`unified.eval.rundir.RunDirError` naming this one.
    The selection and every ``benchmarks.NAME`` section are checked first: a rejected setting leaves
    no ``--out`` behind. A directory holding results of another configuration raises
    :class:`unified.eval.identity.IdentityMismatch` (a ``RunDirError``) unless ``resume_anyway``.
    Ctrl-C raises :class:`EvalInterrupted` after writing the summary of the finished episodes.

    ``cfg.backend`` ``auto`` (or None) is resolved first (:func:`engine_for`; its line is printed when the
    policy loads); the run directory, ``run.json`` and ``plan.json`` record the engine chosen.
    """
    cfg = with_benchmark_names(cfg)
    names, parts = benchmarks_to_run(cfg)
    if not names and not parts:
        suites = sorted({*declared_suites()[0], ALL_SUITE, *part_suites()})
        raise ValueError(f"nothing to evaluate: give --suite or --benchmarks (suites: {', '.join(suites)})")
    paths = adapter_paths(cfg.benchmarks)
    check_benchmark_config(cfg.benchmark_config, paths)  # a mistyped key fails now, not after hours of other benchmarks
    choice = engine_for(cfg, names, policy_given=policy is not None)
    cfg = replace(cfg, backend=choice.backend)
    loaded: dict[str, Loaded] = {}
    try:  # planned before --out is touched: a misspelt benchmark or setting refuses the command, writing nothing
        plan = plan_run(cfg, names, engine=choice, policy_given=policy is not None, loaded=loaded,
                        repair=False)
    except KeyboardInterrupt:  # while the adapters listed their tasks: nothing new was run
        raise EvalInterrupted(_saved_results(Path(cfg.out))) from None
    with RunDirLock(cfg.out):
        record_run_dir(cfg.out, cfg, names, resume_anyway=resume_anyway, policy_given=policy is not None,
                       renamed={path: name for name, path in paths.items()})
        plan = recount_recorded(plan)  # under the lock: torn tails cut, what another run added meanwhile counted
        write_plan(cfg.out, plan)
        for line in plan_lines(plan):  # what will run, its budgets and an estimate, before the first episode
            _log(line[2:])
        return execute(plan, policy=policy, loaded=loaded, resume_anyway=resume_anyway)


def with_benchmark_names(cfg: EvalConfig) -> EvalConfig:
    """``cfg`` with its ``benchmarks.module:Class`` settings under the benchmark's one name
    (:func:`unified.benchmarks.discovery.named_benchmark_config`); both spellings of one benchmark: ConfigError."""
    return replace(cfg, benchmark_config=named_benchmark_config(cfg.benchmark_config))


def engine_for(cfg: EvalConfig, names: list[str], *, policy_given: bool = False) -> EngineChoice:
    """The policy's engine: chosen for a checkpoint spec (:func:`unified.eval.engine.choose_backend`, a resume
    keeping the engine of the results in ``--out``); the caller's for a live model; ``cfg.backend`` for
    the parts alone (lm-eval's own classes: :mod:`unified.eval.parts`)."""
    if not policy_given and names:
        return choose_backend(cfg.model, cfg.backend, recorded=recorded_backend(cfg.out, EvalConfig))
    return EngineChoice(None if cfg.backend in (None, "auto") else cfg.backend)


class _Policy:
    """The run's policy: the one given, or made on first use (the first benchmark with an episode to
    run) and closed at the end of the run. ``--model gold`` makes the loop's replayer, not a model.

    A policy served by vLLM routes the bare specs of judges and simulated users naming the same
    checkpoint to its server while it lives (:mod:`unified.inference.routes`). When the engine was
    chosen automatically and its vLLM server does not start, the policy runs in-process instead:
    ``use_backend("hf")`` re-records the run directory's identity for it first (refused, like any change
    of engine, when ``--out`` already holds results of the vLLM engine)."""

    def __init__(self, cfg: EvalConfig, given: ChatModel | Replayer | None, choice: EngineChoice = EngineChoice(None),
                 use_backend: Any = None) -> None:
        self.cfg, self.model, self.own = cfg, given, given is None
        self.choice, self.use_backend = choice, use_backend
        self.routed: str | None = None

    def get(self) -> ChatModel | Replayer:
        if self.model is None:
            cfg = self.cfg
            self.model = replayer_for(cfg.model)
            if self.model is None:
                _log(f"loading policy {cfg.model} ...")
                if self.choice.line:
                    _log(self.choice.line)
                self.model = self._chat_model()
        return self.model

    def _chat_model(self) -> ChatModel:
        from unified.inference.routes import serve_with_vllm
        from unified.inference.spec import parse_spec

        cfg = self.cfg
        try:
            model = make_chat_model(cfg.model, cfg.sampling, backend=cfg.backend, concurrency=cfg.max_in_flight)
        except (RuntimeError, OSError) as exc:  # VLLMUnavailable, exited or not healthy during start-up
            if not (self.choice.auto and cfg.backend == "vllm" and self.use_backend is not None):
                raise
            _log(fallback_line(cfg.model, exc))
            self.cfg = cfg = self.use_backend("hf")
            return make_chat_model(cfg.model, cfg.sampling, backend="hf", concurrency=cfg.max_in_flight)
        if parse_spec(cfg.model, backend=cfg.backend).backend == "vllm":
            serve_with_vllm(cfg.model)
            self.routed = cfg.model
        return model

    def close(self) -> None:
        if self.routed is not None:
            from unified.inference.routes import stop_serving_with_vllm

            stop_serving_with_vllm(self.routed)
            self.routed = None
        if self.own and self.model is not None:
            self.model.close()


def benchmarks_to_run(cfg: EvalConfig) -> tuple[list[str], list[str]]:
    """(benchmark names from ``--suite`` and ``--benchmarks``, the names of the parts that are not episodes
    asked for by either: :func:`unified.eval.parts.parts_asked`).

    An unknown suite is an UnknownNameError listing every suite (the adapters', ``all``, the parts'); an
    adapter named like a part or its records' directory (``lm_eval``, ``general``) is a ConfigError (one
    name, one directory);
    the world-model eval is the ``lwm`` subcommand of the CLI, not a suite. An installed adapter whose module does not import cannot say which suites it joins,
    so it gets one line saying so when suites are asked for."""
    agent_suites, _ = split_suites(cfg.suite)
    try:
        names = [n for s in agent_suites for n in expand_benchmarks(s)]
    except UnknownNameError as exc:
        raise UnknownNameError("suite", exc.name, [*exc.valid, *part_suites()]) from None
    if agent_suites:
        for name, why in declared_suites()[1].items():
            _log(f"{name}: not in any suite here: its adapter does not load ({why}); --benchmarks {name} "
                 "runs it as a recorded skip")
    adapters, _ = split_benchmarks(cfg.benchmarks)
    names = list(dict.fromkeys(names + expand_benchmarks(None, adapters)))
    taken = [n for n in names if n in reserved_names()]
    if taken:  # its records would land in a part's own directory
        raise ConfigError(f"--benchmarks: a benchmark named {taken[0]!r} takes the name of a part of the run that "
                          f"is not episodes (its records' directory OUT/{taken[0]}/); give the adapter class "
                          "another `name`")
    return names, parts_asked(cfg)


def execute(plan: RunPlan, *, policy: ChatModel | Replayer | None = None, loaded: dict[str, Loaded] | None = None,
            resume_anyway: bool = False) -> RunSummary:
    """Run the pairs of ``plan`` that have no result yet into ``plan.config.out``, appending each record;
    rewrite the summary after each benchmark (:func:`unified.eval.summarize.summarize`); returns the last one.

    The caller holds the run directory. ``loaded``: the adapters and tasks the planner listed in this process
    (else each benchmark with pairs to run is loaded again from the plan's settings). A benchmark planned as
    skipped or errored runs nothing. Ctrl-C raises :class:`EvalInterrupted` after the summary. The plan's
    own ``--benchmarks`` items are the ``module:Class`` code its summary may load (``trusted``): executing a
    plan runs its adapters in any case."""
    out = Path(plan.config.out)
    names = [b.name for b in plan.benchmarks]
    trusted = frozenset(plan.config.benchmarks)

    def use_backend(backend: str) -> EvalConfig:  # the auto choice's fallback: record the engine that runs
        nonlocal plan
        plan = replace(plan, config=replace(plan.config, backend=backend),
                       engine=PlannedEngine(backend, False, plan.engine.line))
        record_run_dir(out, plan.config, names, resume_anyway=resume_anyway, policy_given=plan.policy_given)
        write_plan(out, plan)
        return plan.config

    engine = EngineChoice(plan.engine.backend, plan.engine.auto, plan.engine.line)
    holder = _Policy(plan.config, policy, engine, use_backend)
    done: list[str] = []
    entries: dict[str, BenchmarkEntry] = {}  # a benchmark's entry, once its episodes are done
    try:
        for planned in plan.benchmarks:
            interrupted = planned.status == "run" and _run_pairs(plan, planned, out, holder, loaded)
            done.append(planned.name)
            summarize(out, benchmarks=done, plan=plan, loaded=loaded, finished=entries, trusted=trusted)
            if interrupted:
                raise KeyboardInterrupt
        for part in plan.parts:  # on the same weights (the agent suites' loaded checkpoint if any)
            part.run(out, backend=plan.config.backend, auto=engine.auto, loaded=getattr(holder.model, "loaded", None))
    except KeyboardInterrupt:
        summarize(out, benchmarks=done, plan=plan, loaded=loaded, finished=entries, trusted=trusted)
        raise EvalInterrupted(_saved_results(out)) from None
    finally:
        holder.close()
    return summarize(out, plan=plan, loaded=loaded, finished=entries, trusted=trusted)


def _run_pairs(plan: RunPlan, planned: PlannedBenchmark, out: Path, policy: _Policy,
               loaded: dict[str, Loaded] | None) -> bool:
    """One benchmark's pairs without a result; whether Ctrl-C stopped it (the caller writes the summary, then stops)."""
    cfg = plan.config
    store = BenchmarkStore(out, planned.directory)
    recorded = store.load()
    todo = [pair for pair in planned.to_run if pair not in recorded]
    if not todo:
        return False
    item = (loaded or {}).get(planned.name) or _load_again(planned, cfg)
    by_id = {t.id: t for t in item.tasks}
    jobs = [Job(by_id[task_id], trial) for task_id, trial in todo]
    model = policy.get()
    tasks = len({task_id for task_id, _ in planned.pairs})
    _log(f"{planned.name}: {len(jobs)} episodes to run ({len(recorded)} already recorded), "
         f"{tasks} tasks x {planned.runs} run(s)")
    progress = _Progress(planned.name, len(jobs))

    def on_result(result, episode) -> None:
        store.append(result, episode)
        progress.update(result.error is not None)

    loop = AgentLoop(item.adapter, model, prompting=cfg.prompting, prompting_options=cfg.prompting_options,
                     limits=planned.limits, max_in_flight=cfg.max_in_flight, model_name=cfg.model,
                     on_result=on_result, scheduling=cfg.scheduling,
                     run=RunContext(work_dir=store.work_dir, runs=planned.runs, sampling=cfg.sampling,
                                    policy_backend=getattr(model, "name", None)))  # what open/aggregate learn
    started = time.perf_counter()
    interrupted = False
    try:
        loop.run(jobs, finished_ids={task_id for task_id, _ in recorded})
    except KeyboardInterrupt:  # the summary still covers what finished; the caller stops
        interrupted = True
    finally:
        progress.close()
    elapsed = time.perf_counter() - started
    if not interrupted:
        _log(f"{planned.name}: {len(jobs)} episodes in {elapsed:.1f}s ({len(jobs) / max(elapsed, 1e-9):.3f} episodes/s)")
    return interrupted


def _load_again(planned: PlannedBenchmark, cfg: EvalConfig) -> Loaded:
    """The adapter and tasks of a plan made in another process (its planned tasks must still be listed)."""
    adapter = open_adapter(planned.name, cfg, adapter_paths(cfg.benchmarks))
    tasks = select_tasks(adapter, cfg)
    missing = sorted({task_id for task_id, _ in planned.to_run} - {t.id for t in tasks})
    if missing:
        raise RuntimeError(f"{planned.name}: the plan's tasks {missing[:3]} are no longer listed by the adapter; "
                           "plan the run again")
    return Loaded(adapter, tasks)


def _saved_results(out: Path) -> int:
    """Results recorded in the run directory (every benchmark, this run's and earlier ones)."""
    count = 0
    for path in out.glob("*/results.jsonl"):
        with open(path, "rb") as handle:
            count += sum(1 for line in handle if line.endswith(b"\n"))
    return count
