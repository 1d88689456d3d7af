"""The eval runner: benchmarks x tasks x trials through the agent loop, into a run directory.

For each benchmark: find the adapter by entry point (a missing or unbuilt one is one printed
line and a recorded skip), list its tasks, drop the (task, trial) pairs already recorded in
``--out`` (resume), run the rest through :class:`unified.agent.loop.AgentLoop` with a progress
bar in episodes/s, append each result as it comes, then write the benchmark's official
aggregate into ``summary.json`` / ``summary.md`` (see :mod:`unified.eval.report`).
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from unified.agent.loop import AgentLoop, Job
from unified.agent.replay import Replayer, replayer_for
from unified.config import ConfigError, to_dict
from unified.benchmarks.contract import BenchmarkUnavailable, RunContext, check_task_ids, with_run
from unified.benchmarks.discovery import (ALL_SUITE, check_benchmark_config, declared_suites, expand_benchmarks,
                                          load_adapter)
from unified.benchmarks.helpers import limit_runnable, select_task_ids
from unified.eval.config import EvalConfig
from unified.eval.general import GENERAL_SUITE, general_with_limit, run_general, split_suites
from unified.eval.engine import EngineChoice, choose_backend, fallback_line
from unified.eval.identity import claim_run_dir, recorded_backend
from unified.eval.general_report import general_section
from unified.eval.records import BenchmarkEntry, RunSummary, fill_facts
from unified.eval.report import benchmark_entry, build_summary, write_summary
from unified.eval.shards import (MissingPairs, check_unsharded_parts, parse_shard, run_kind, shard_pairs, shard_part,
                                 shard_reason)
from unified.eval.rundir import BenchmarkStore, RunDirLock
from unified.store import write_json_atomic
from unified.inference.base import ChatModel, make_chat_model
from unified.registry import UnknownNameError


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


def run_eval(cfg: EvalConfig, *, policy: ChatModel | Replayer | None = None, resume_anyway: bool = False,
             allow_new_episodes: bool = True) -> RunSummary:
    """Run (or resume) the evaluation described by ``cfg``; returns the summary.

    The run directory is held for the whole run (:class:`unified.eval.rundir.RunDirLock`): a
    second run on the same ``--out`` raises :class:`unified.eval.rundir.RunDirError` naming this one.
    The selection and every ``benchmarks.NAME`` section are checked first: a rejected setting leaves
    no ``--out`` behind. ``allow_new_episodes=False`` (a merge of shards) raises
    :class:`unified.eval.shards.MissingPairs` instead of running a pair that has no result.
    A directory holding results of another configuration raises
    :class:`unified.eval.identity.IdentityMismatch` (a ``RunDirError``) unless ``resume_anyway``.
    Ctrl-C raises :class:`EvalInterrupted` after writing the summary of the finished episodes.

    ``cfg.backend`` ``auto`` (or None) is resolved first (:func:`unified.eval.engine.choose_backend`;
    its line is printed when the policy loads); the run directory and ``run.json`` record the engine chosen.
    """
    names, want_general = benchmarks_to_run(cfg)
    check_unsharded_parts(cfg, want_general)
    if not names and not want_general:
        suites = sorted({*declared_suites()[0], ALL_SUITE, GENERAL_SUITE})
        raise ValueError(f"nothing to evaluate: give --suite or --benchmarks (suites: {', '.join(suites)})")
    check_benchmark_config(cfg.benchmark_config)  # a mistyped key fails now, not after hours of other benchmarks
    if policy is None and names:
        choice = choose_backend(cfg.model, cfg.backend, recorded=recorded_backend(cfg.out, EvalConfig))
    else:  # a live model (its engine is the caller's), or the general suite alone (lm-eval's own classes)
        choice = EngineChoice(None if cfg.backend in (None, "auto") else cfg.backend)
    cfg = replace(cfg, backend=choice.backend)
    with RunDirLock(cfg.out):
        return _run_eval(cfg, names, want_general, policy=policy, allow_new=allow_new_episodes,
                         resume_anyway=resume_anyway, choice=choice)


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


def _run_eval(cfg: EvalConfig, names: list[str], want_general: bool, *,
              policy: ChatModel | Replayer | None = None, allow_new: bool = True,
              resume_anyway: bool = False, choice: EngineChoice = EngineChoice(None)) -> RunSummary:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)

    def record(run_cfg: EvalConfig) -> None:  # the run directory's identity and run.json, for the engine that runs
        claim_run_dir(out, run_cfg, names, resume_anyway=resume_anyway, policy_given=policy is not None)
        write_json_atomic(out / "run.json", {"config": to_dict(run_cfg), "updated_at": time.time()})

    record(cfg)

    def use_backend(backend: str) -> EvalConfig:  # the auto choice's fallback: record the engine that runs
        nonlocal cfg
        cfg = replace(cfg, backend=backend)
        record(cfg)
        return cfg
    benchmarks: dict[str, BenchmarkEntry] = {}
    # the general suite's section, read from the run directory now (a resumed run shows what it has) and
    # again once lm-eval ran; not at every write
    general = general_section(out, cfg.general, cfg.model) if want_general else None

    def summary() -> RunSummary:
        shard, merged_from = run_kind(cfg, out, benchmarks)  # a shard's or a merge's run says so (eval.shards)
        return write_summary(out, build_summary(model=cfg.model, prompting=cfg.prompting, benchmarks=benchmarks,
                                                general=general, shard=shard, merged_from=merged_from))

    holder = _Policy(cfg, policy, choice, use_backend)
    try:
        for name in names:
            entry, interrupted = _run_benchmark(name, cfg, out, holder, allow_new)
            benchmarks[name] = fill_facts(name, entry)
            summary()
            if interrupted:
                raise KeyboardInterrupt
        if want_general:  # lm-eval on the same weights (the agent suites' loaded checkpoint when there is one)
            # an auto-chosen vLLM server is for the agent suites: lm-eval's vllm class runs vLLM in this
            # process (the gpu extra), so the general suite runs in-process unless --backend vllm says so
            run_general(general_with_limit(cfg.general, cfg.limit), cfg.model, out,
                        backend="hf" if choice.auto and cfg.backend == "vllm" else cfg.backend,
                        loaded=getattr(holder.model, "loaded", None))
            general = general_section(out, cfg.general, cfg.model)
    except KeyboardInterrupt:
        summary()
        raise EvalInterrupted(_saved_results(out)) from None
    finally:
        holder.close()
    return summary()


def benchmarks_to_run(cfg: EvalConfig) -> tuple[list[str], bool]:
    """(benchmark names from ``--suite`` and ``--benchmarks``, whether ``general`` was asked for).

    An unknown suite is an UnknownNameError listing every suite (the adapters', ``all``, ``general``);
    the world-model eval is the ``lwm`` subcommand of the CLI, not a suite. An installed adapter whose module does not import cannot say which suites it joins,
    so it gets one line saying so when suites are asked for."""
    agent_suites, want_general = split_suites(cfg.suite)
    try:
        names = [n for s in agent_suites for n in expand_benchmarks(s)]
    except UnknownNameError as exc:
        raise UnknownNameError("suite", exc.name, [*exc.valid, GENERAL_SUITE]) from None
    if agent_suites:
        for name, why in declared_suites()[1].items():
            _log(f"{name}: not in any suite here: its adapter does not load ({why}); --benchmarks {name} "
                 "runs it as a recorded skip")
    return list(dict.fromkeys(names + expand_benchmarks(None, cfg.benchmarks))), want_general


def _not_run(status: str, reason: str, how_to_fix: str | None = None, traceback_text: str | None = None) -> BenchmarkEntry:
    return BenchmarkEntry(status=status, reason=reason, how_to_fix=how_to_fix, traceback=traceback_text,
                          comparable=False)


def _run_benchmark(name: str, cfg: EvalConfig, out: Path, policy: _Policy,
                   allow_new: bool = True) -> tuple[BenchmarkEntry, bool]:
    """One benchmark: its entry, and whether Ctrl-C stopped it (the caller writes the summary, then stops)."""
    try:
        adapter = load_adapter(name, **cfg.benchmark_config.get(name, {}))
        replayer = replayer_for(cfg.model)
        adapter.replay = replayer.name if replayer is not None else None  # before tasks(): Adapter.replay
        store = BenchmarkStore(out, adapter.name or name)
        if cfg.task_ids:
            tasks = limit_runnable(select_task_ids(adapter.tasks(cfg.split, None), cfg.task_ids), cfg.limit)
            if not tasks:
                _log(f"{name}: skipped: none of --task-ids is a task of this benchmark (split {cfg.split!r})")
                return _not_run("skipped", "none of the requested task ids is a task of this benchmark",
                                "check the ids against the benchmark's results.jsonl or its data"), False
        else:
            tasks = adapter.tasks(cfg.split, cfg.limit)
        check_task_ids(tasks, f"benchmark {name}")  # ids key records and name scratch paths: checked, unique
    except BenchmarkUnavailable as exc:
        _log(exc.line(name))
        return _not_run("skipped", exc.reason, exc.how_to_fix), False
    except (UnknownNameError, ConfigError):  # a misspelt name or setting: the usage error it is
        raise
    except Exception as exc:  # an adapter that cannot even list its tasks: recorded, the run goes on
        _log(f"{name}: failed before any episode: {type(exc).__name__}: {exc}")
        return _not_run("error", f"{type(exc).__name__}: {exc}", traceback_text=traceback.format_exc()), False
    runs = cfg.runs or adapter.runs_default
    effective_limits = adapter.agent_limits(cfg.limits)  # the protocol's own budgets, recorded in the summary
    run = RunContext(work_dir=store.work_dir, runs=runs)  # what open and aggregate learn about this run
    recorded = store.load()
    shard = parse_shard(cfg.shard)
    pairs_total = len(tasks) * runs
    wanted = shard_pairs(adapter.name or name, tasks, runs, shard)
    tasks = [t for t in tasks if any((t.id, trial) in wanted for trial in range(runs))]
    jobs = [Job(task, trial) for task in tasks for trial in range(runs)
            if (task.id, trial) in wanted and (task.id, trial) not in recorded]
    if jobs and not allow_new:
        raise MissingPairs(name, [(j.task.id, j.trial) for j in jobs])
    finished_ids = {task_id for task_id, _ in recorded}
    interrupted = False
    if jobs:
        model = policy.get()
        _log(f"{name}: {len(jobs)} episodes to run ({len(recorded)} already recorded), "
             f"{len(tasks)} tasks x {runs} run(s)")
        progress = _Progress(name, len(jobs))

        def on_result(result, episode) -> None:
            store.append(result, episode)
            progress.update(result.error is not None)

        loop = AgentLoop(adapter, model, prompting=cfg.prompting, prompting_options=cfg.prompting_options,
                         limits=effective_limits, max_in_flight=cfg.max_in_flight, model_name=cfg.model,
                         on_result=on_result, scheduling=cfg.scheduling, run=run)
        started = time.perf_counter()
        try:
            loop.run(jobs, finished_ids=finished_ids)
        except KeyboardInterrupt:  # the summary below still covers what finished; the caller stops
            interrupted = True
        finally:
            progress.close()
        elapsed = time.perf_counter() - started
        if not interrupted:
            _log(f"{name}: {len(jobs)} episodes in {elapsed:.1f}s "
                 f"({len(jobs) / max(elapsed, 1e-9):.3f} episodes/s)")
    scored_ids = {t.id for t in tasks if t.scored}
    results = [r for key, r in store.load().items() if key in wanted]
    aggregate = with_run(adapter, "aggregate", [r for r in results if r.task_id in scored_ids or r.details.get("prereq")],
                         run=run)
    entry = benchmark_entry(tasks=[t for t in tasks if t.scored], results=results, runs=runs,
                            runs_protocol=adapter.runs_default, aggregate=aggregate,
                            tasks_in_benchmark=_tasks_in_benchmark(adapter, cfg),
                            subset=f"--split {cfg.split}" if cfg.split else None,
                            shard=shard_reason(shard, len(wanted), pairs_total) if shard else None)
    if shard:
        entry.shard = shard_part(shard, len(wanted), pairs_total)
    entry.runs_dir = str(store.dir)
    entry.settings = to_dict(dict(adapter.config))  # the adapter's parsed Config, defaults included
    entry.limits = to_dict(effective_limits)  # after the adapter's agent_limits, not only the flags
    return entry, interrupted


def _saved_results(out: Path) -> int:
    """Results recorded in the run directory (every benchmark, this run's and earlier ones)."""
    count = 0
    for path in out.glob("*/results.jsonl"):
        with open(path, "rb") as handle:
            count += sum(1 for line in handle if line.endswith(b"\n"))
    return count


def _tasks_in_benchmark(adapter: Any, cfg: EvalConfig) -> int | None:
    """Scored tasks of the whole (split of the) benchmark when ``--limit``/``--task-ids`` cut the
    selection, so the summary can say "5 of 300"; None when nothing was cut or listing fails."""
    if not cfg.limit and not cfg.task_ids:
        return None
    try:
        return sum(1 for t in adapter.tasks(cfg.split, None) if t.scored)
    except Exception:  # the selection itself listed fine; the count is only informative
        return None
