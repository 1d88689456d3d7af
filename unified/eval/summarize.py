"""``summarize(run_dir)``: a run's summary (``summary.json`` + ``summary.md``) from what is on disk only.

It reads ``RUN/plan.json`` (:mod:`unified.eval.plan`), each planned benchmark's ``results.jsonl``, each planned
part's records (:mod:`unified.eval.parts`: the general suite's) and, for a merge, ``RUN/shards.json``; it asks each adapter for its official ``aggregate`` of
those results (the adapter's code, loaded from the plan's settings) and writes the summary atomically. Nothing
of the process that ran the episodes is needed: the runner calls it after every benchmark, ``--merge`` calls it
once on the joined records, and calling it again on a finished run rewrites the same summary (its
``updated_at`` aside). What the entries say is :mod:`unified.eval.report`'s docstring.

An ``aggregate`` that raises (or an adapter that no longer loads here) makes that benchmark's entry an
``error`` (an ImportError a ``skipped``) naming the call; the other entries and the summary are written.
What code runs is never read from the run directory: a ``module:Factory`` adapter that only ``plan.json``
names (its ``adapter_path``) is a ``skipped`` entry saying how to give it (:func:`adapter_for_summary`).
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

from unified.benchmarks.aggregate import mean_score
from unified.benchmarks.contract import BenchmarkUnavailable, RunContext, Task, with_run
from unified.benchmarks.discovery import adapter_paths
from unified.config import to_dict
from unified.eval.plan import Loaded, PlannedBenchmark, RunPlan, adapter_failure, open_adapter, read_plan
from unified.eval.records import BenchmarkEntry, RunSummary, ShardRun, fill_facts
from unified.eval.report import benchmark_entry, build_summary, write_summary
from unified.eval.rundir import BenchmarkStore
from unified.registry import UnknownNameError
from unified.eval.shards import SHARDS_FILE, merge_command, parse_shard, shard_part, shard_reason


def _not_run(planned: PlannedBenchmark) -> BenchmarkEntry:
    return BenchmarkEntry(status=planned.status, reason=planned.reason,  # type: ignore[arg-type]
                          how_to_fix=planned.how_to_fix, traceback=planned.traceback, comparable=False)


class UntrustedAdapterPath(BenchmarkUnavailable):
    """A ``module:Factory`` adapter named only by a run directory's ``plan.json`` (never imported)."""


def adapter_for_summary(planned: PlannedBenchmark, cfg: Any, loaded: dict[str, Loaded] | None,
                        paths: dict[str, str]) -> Any:
    """The adapter whose ``aggregate`` summarises ``planned``: the one this process loaded, an installed
    adapter (a registered entry-point name), or a ``module:Factory`` path the user gave on this command
    line (``paths``: :func:`unified.benchmarks.discovery.adapter_paths` of the trusted items, by name). A
    code path that only a run directory names is never imported (issue 42, R5: a shard's plan.json naming
    ``os:system`` ran it as the merging user): UntrustedAdapterPath."""
    name = planned.name
    if loaded and name in loaded:
        return loaded[name].adapter
    if name not in paths and (":" in name or planned.adapter_path):
        path = planned.adapter_path or name
        raise UntrustedAdapterPath(
            f"its adapter {path!r} is a code path named by the run directory's plan.json, and a run directory "
            "never decides what code runs", f"give `--benchmarks {path}` on this command line to load it, or "
            "install the package that registers it as a benchmark")
    return open_adapter(name, cfg, paths)


ShardAggregate = tuple[int, dict[str, Any]]
"""(the shard's pairs of the benchmark, the aggregate its own summary recorded)."""


def aggregate_without_code(planned: PlannedBenchmark, inputs: list, shards: list[ShardAggregate] | None,
                           why: BaseException) -> dict[str, Any] | None:
    """The aggregate of a benchmark whose adapter cannot be loaded here (not installed, or a code path only a
    run directory names), from the records alone; None when the records cannot give it.

    - ``aggregate_rule == "mean"`` (the adapter keeps the SDK default): :func:`mean_score` of the same
      inputs, exactly what the adapter would return (``computed_without_adapter`` says so and why);
    - a merge of shards whose summaries each recorded the adapter's aggregate with a numeric ``score``:
      their pair-weighted mean ``sum_i p_i * score_i / sum_i p_i``, exact for a mean over episodes only, so
      the entry names the rule in ``not_comparable_because``.
    """
    if planned.aggregate_rule == "mean":
        return {**mean_score(inputs), "computed_without_adapter": f"the SDK's default mean, from the records ({why})"}
    holding = [(pairs, agg) for pairs, agg in shards or [] if pairs > 0]  # a shard of 0 pairs adds nothing
    usable = [(pairs, agg) for pairs, agg in holding
              if isinstance(agg.get("score"), (int, float)) and not isinstance(agg.get("score"), bool)]
    if not usable or len(usable) != len(holding):
        return None
    total = sum(pairs for pairs, _ in usable)
    metric = str(usable[0][1].get("metric") or "score")
    reason = (f"aggregated without the adapter's code ({why}): the pair-weighted mean of the {len(usable)} shards' "
              "own aggregates, exact only when the benchmark's aggregate is a mean over episodes")
    return {"score": sum(pairs * float(agg["score"]) for pairs, agg in usable) / total,
            "metric": f"{metric}, pair-weighted over shards", "n": total, "not_comparable_because": [reason]}


def benchmark_summary(plan: RunPlan, planned: PlannedBenchmark, out: Path,
                      loaded: dict[str, Loaded] | None = None,
                      paths: dict[str, str] | None = None,
                      shard_aggregates: dict[str, list[ShardAggregate]] | None = None) -> BenchmarkEntry:
    """One benchmark's summary entry from its plan and its records in ``out`` (``loaded``, ``paths``:
    :func:`adapter_for_summary`; ``shard_aggregates``: for a merge, each shard's recorded aggregate, used
    by :func:`aggregate_without_code` when the adapter cannot be loaded)."""
    paths = paths or {}
    if planned.status != "run":
        return fill_facts(planned.name, _not_run(planned), paths.get(planned.name))
    cfg = plan.config
    store = BenchmarkStore(out, planned.directory)
    wanted = set(planned.pairs)
    shard = parse_shard(cfg.shard)
    in_run = {task_id for task_id, _ in planned.pairs}
    not_scored = set(planned.not_scored)
    scored = [Task(id=t, benchmark=planned.directory) for t in planned.tasks if t in in_run and t not in not_scored]
    scored_ids = {t.id for t in scored}
    results = [r for key, r in store.load(repair=False).items() if key in wanted]
    inputs = [r for r in results if r.task_id in scored_ids or r.details.get("prereq")]
    failure = None
    call = "load"
    try:
        adapter = adapter_for_summary(planned, cfg, loaded, paths)
        call = "aggregate"
        aggregate = with_run(adapter, "aggregate", inputs, run=RunContext(work_dir=store.work_dir, runs=planned.runs))
        if not isinstance(aggregate, dict):
            raise TypeError(f"aggregate() returned {type(aggregate).__name__}, not a dict")
    except Exception as exc:  # this benchmark's entry says so; the others and the summary are written
        without_code = (aggregate_without_code(planned, inputs, (shard_aggregates or {}).get(planned.name), exc)
                        if call == "load" and isinstance(exc, (BenchmarkUnavailable, ImportError, UnknownNameError))
                        else None)
        if without_code is None:
            failure = (*adapter_failure(planned.name, call, exc), traceback.format_exc())
            aggregate = {}
        else:
            aggregate = without_code
    entry = benchmark_entry(tasks=scored, results=results, runs=planned.runs, runs_protocol=planned.runs_protocol,
                            aggregate=aggregate, tasks_in_benchmark=planned.tasks_in_benchmark,
                            subset=f"--split {cfg.split}" if cfg.split else None,
                            shard=shard_reason(shard, len(wanted), planned.pairs_total) if shard else None)
    if shard:
        entry.shard = shard_part(shard, len(wanted), planned.pairs_total)
    if failure is not None:
        entry.status, entry.reason, entry.how_to_fix, entry.traceback = failure  # type: ignore[assignment]
        entry.comparable = False
    entry.runs_dir = str(store.dir)
    entry.settings = dict(planned.settings)
    entry.limits = to_dict(planned.limits)
    return fill_facts(planned.name, entry, paths.get(planned.name))


def run_kind(plan: RunPlan, out: str | Path,
             benchmarks: dict[str, BenchmarkEntry]) -> tuple[ShardRun | None, dict[str, Any] | None]:
    """What says a summary is a shard's (:class:`ShardRun`, the summary's ``shard``) or a merge's (the
    contents of ``shards.json``, its ``merged_from``); (None, None) for a plain run. ``benchmarks``:
    the summary's entries (a shard's carry their :class:`ShardPart` counts)."""
    shard = parse_shard(plan.config.shard)
    if shard is not None:
        counted = [e.shard for e in benchmarks.values() if e.shard is not None]
        command = merge_command(out, shard.count)
        return ShardRun(shard=str(shard), index=shard.index, count=shard.count,
                        pairs=sum(c.pairs for c in counted), pairs_total=sum(c.pairs_total for c in counted),
                        merge_command=command, note=f"not a whole run; merge with `{command}`"), None
    path = Path(out) / SHARDS_FILE
    if path.is_file():
        try:
            return None, json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return None, {"error": f"{path}: {exc}"}
    return None, None


def summarize(run_dir: str | Path, *, benchmarks: list[str] | None = None, plan: RunPlan | None = None,
              loaded: dict[str, Loaded] | None = None, finished: dict[str, BenchmarkEntry] | None = None,
              trusted: frozenset[str] | set[str] = frozenset(),
              shard_aggregates: dict[str, list[ShardAggregate]] | None = None) -> RunSummary:
    """Write ``run_dir``'s summary from its plan and records; returns it.

    ``benchmarks``: only these planned benchmarks (the runner's summary after each one; default all).
    ``plan``: the plan already in memory (default: ``run_dir/plan.json``); ``loaded``: the adapters the
    planner loaded in this process (default: installed adapters loaded again with the plan's settings; a
    ``module:Factory`` path only when it is in ``trusted``, the ``--benchmarks`` items the user's own command
    line gave, never because plan.json names it). ``finished``: the
    runner's entries of benchmarks whose records no longer change, reused (each ``aggregate`` is asked
    once per run); the entries computed here are added to it."""
    out = Path(run_dir)
    plan = plan or read_plan(out)
    names = [b.name for b in plan.benchmarks] if benchmarks is None else benchmarks
    finished = {} if finished is None else finished
    paths = {**{item: item for item in trusted if ":" in item}, **adapter_paths(trusted)}  # a given path that
    # does not import keeps its text as its name: loading it again says why it is skipped
    for name in names:
        if name not in finished:
            finished[name] = benchmark_summary(plan, plan.benchmark(name), out, loaded, paths, shard_aggregates)
    entries = {name: finished[name] for name in names}
    cfg = plan.config
    sections = {part.suite: part.section(out) for part in plan.parts}
    shard, merged_from = run_kind(plan, out, entries)
    return write_summary(out, build_summary(model=cfg.model, prompting=cfg.prompting, benchmarks=entries,
                                            shard=shard, merged_from=merged_from, **sections))
