"""``--merge``: the N shard directories of one command joined into one run directory, summarized as the
unsharded run, without running anything.

``python -m unified.eval --merge OUT_0 ... OUT_{N-1} --out OUT`` reads each shard's ``plan.json``
(:mod:`unified.eval.plan`) and checks that they are the N shards of one command (same config but ``out``
and ``shard``, the same tasks listed, every index once; none still running); copies their result and
episode lines into ``OUT`` (one line per pair, sorted by task id and trial) and their ``<benchmark>/work/``
files (adapter state such as BFCL memory snapshots and SWE-bench test logs) into ``OUT/<benchmark>/work/``
(:func:`_merge_work`); writes the plan of the unsharded command (its pairs: the union of the shards') with
the directory's identity and ``run.json``; joins the parts that are not episodes (lm-eval's task records and
output files: :meth:`unified.eval.parts.PlannedPart.merged`); and calls :func:`unified.eval.summarize.summarize`, which
computes the same aggregates and summary an unsharded run would, from the same records. The runner is not
entered. A pair of a shard's plan with no result is an error naming that shard, to rerun. A work file that
two shards hold with different bytes keeps the copy of the lower shard index; ``OUT/shards.json`` and the
summary list the others (they stay in their shard directories).
"""

from __future__ import annotations

import shutil
import sys
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from unified.config import to_dict
from unified.eval.identity import record_run_dir
from unified.eval.plan import PLAN_FILE, PlannedBenchmark, RunPlan, read_plan, write_plan
from unified.eval.records import RunSummary, load_summary
from unified.eval.rundir import BenchmarkStore, RunDirLock
from unified.eval.shards import SHARDS_FILE, Shard, ShardError, parse_shard
from unified.eval.summarize import summarize
from unified.execution.copying import CopyBudget, merge_tree
from unified.store import append_jsonl, write_json_atomic

MERGE_WORK_BUDGET_BYTES = 16 << 30
"""Most bytes a merge writes for the shards' work files (holes are free); files past it stay in their shard."""


def _shard_plans(dirs: list[Path]) -> tuple[list[RunPlan], list[Shard]]:
    """Each directory's plan and shard, checked to be the shards of one command."""
    plans: list[RunPlan] = []
    shards: list[Shard] = []
    common: dict[str, Any] | None = None
    for d in dirs:
        path = d / PLAN_FILE
        if not path.is_file():
            raise ShardError(f"{d}: no {PLAN_FILE} (not an eval run directory, its shard never started, or it was "
                             "written by a version before run plans: rerun that shard)")
        plan = read_plan(d)
        shard = parse_shard(plan.config.shard, f"{path}: config.shard")
        if shard is None:
            raise ShardError(f"{path}: not a shard (its command had no --shard I/N)")
        config = {k: v for k, v in to_dict(plan.config).items() if k not in ("out", "shard")}
        if common is None:
            common = config
        elif config != common:
            diff = sorted(k for k in {*config, *common} if config.get(k) != common.get(k))
            raise ShardError(f"{path}: not a shard of the same command as {dirs[0]} (differs in: "
                             f"{', '.join(diff)})")
        plans.append(plan)
        shards.append(shard)
    count = shards[0].count
    if any(s.count != count for s in shards):
        raise ShardError(f"shards of different counts: {', '.join(map(str, shards))}")
    seen: dict[int, Path] = {}
    for d, s in zip(dirs, shards):
        if s.index in seen:
            raise ShardError(f"shard {s} given twice: {seen[s.index]} and {d}")
        seen[s.index] = d
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        raise ShardError(f"{len(missing)} of {count} shards not given: {', '.join(f'{i}/{count}' for i in missing)}")
    return plans, shards


def merged_plan(plans: list[RunPlan], shards: list[Shard], dirs: list[Path], target: Path) -> RunPlan:
    """The plan of the unsharded command from its shards' plans (``plans`` in shard order), checked
    against the records now in ``target``: a shard's planned pair without a result there is an error
    naming the shard to rerun."""
    first = plans[0]
    benchmarks: list[PlannedBenchmark] = []
    for planned in first.benchmarks:
        parts = [p.benchmark(planned.name) for p in plans]
        for part, shard, d in zip(parts, shards, dirs):
            if part.status != planned.status:
                ran, other = (part, planned) if part.status != "run" else (planned, part)
                raise ShardError(f"{planned.name}: {ran.status} in one shard ({ran.reason}) but {other.status} in "
                                 f"another (shard {shard} is {d}); rerun the shard where it did not run")
            if part.tasks != planned.tasks:
                raise ShardError(f"{planned.name}: shard {shard} ({d}) listed other tasks than shard {shards[0]}; "
                                 "the shards must see the same data")
        if planned.status != "run":
            benchmarks.append(planned)
            continue
        recorded = BenchmarkStore(target, planned.directory).load()
        lacking = {(str(shard), d): [pair for pair in part.pairs if pair not in recorded]
                   for part, shard, d in zip(parts, shards, dirs)}
        lacking = {where: pairs for where, pairs in lacking.items() if pairs}
        if lacking:
            pairs = [pair for found in lacking.values() for pair in found]
            where = ", ".join(f"{shard} ({d})" for shard, d in lacking)
            raise ShardError(f"{planned.name}: {len(pairs)} (task, trial) pair(s) have no result, e.g. {pairs[:3]}: "
                             f"shard(s) {where} did not finish; rerun them (same command, same --out) and merge again")
        union = {pair for part in parts for pair in part.pairs}
        pairs = [(t, trial) for t in planned.tasks for trial in range(planned.runs) if (t, trial) in union]
        benchmarks.append(replace(planned, pairs=pairs, to_run=[]))
    return replace(first, config=replace(first.config, out=str(target), shard=None), benchmarks=benchmarks)


def merge_runs(shard_dirs: list[str], out: str, *, trusted: frozenset[str] | set[str] = frozenset()) -> RunSummary:
    """Merge the shard run directories ``shard_dirs`` into the run directory ``out``; returns its summary.

    Raises :class:`ShardError` (one line) when they are not all the shards of one command, when
    one is still running, when two hold different results for one pair, or when a pair has no
    result in its shard (naming the shard to rerun). ``out`` must be new or a previous merge of
    the same shards (merging again replaces its records). ``trusted``: ``module:Factory`` adapter paths the
    user's command line gave (``--benchmarks``); any other adapter is loaded only from the installed
    registry, never because a shard's plan.json names it."""
    dirs = [Path(d) for d in shard_dirs]
    target = Path(out)
    if any(d.resolve() == target.resolve() for d in dirs):
        raise ShardError(f"--out {out} is one of the shard directories; give a new directory")
    if (target / "run.json").exists() and not (target / SHARDS_FILE).exists():
        raise ShardError(f"--out {out} holds a run that is not a merge; give a new directory")
    given_plans, given_shards = _shard_plans(dirs)
    order = sorted(range(len(dirs)), key=lambda i: given_shards[i].index)  # shard order: the lower index wins
    plans, shards, in_order = ([given_plans[i] for i in order], [given_shards[i] for i in order],
                               [dirs[i] for i in order])
    with ExitStack() as stack:
        for d in dirs:  # a shard still running would change under us: refuse (names its process)
            stack.enter_context(RunDirLock(d))
        stack.enter_context(RunDirLock(target))
        parts_dirs = {part.directory for part in plans[0].parts}  # the parts join their own records
        benches = sorted({p.parent.name for d in dirs for p in d.glob("*/results.jsonl")} - parts_dirs)
        work: dict[str, Any] = {}
        conflicts: list[dict[str, str]] = []
        skipped: list[dict[str, str]] = []
        budget = CopyBudget(MERGE_WORK_BUDGET_BYTES)
        for bench in benches:
            _merge_benchmark(bench, dirs, target)
            files, clashes, left_out = _merge_work(bench, in_order, target, budget)
            if files or clashes:
                work[bench] = {"dir": str(target / bench / "work"), "files": files}
            conflicts += clashes
            skipped += left_out
        for item in skipped:
            print(f"--merge: warning: {item['path']} of {item['shard']} left out: {item['why']}", file=sys.stderr)
        write_json_atomic(target / SHARDS_FILE, {"shards": [{"dir": str(d), "shard": str(s)}
                                                            for d, s in zip(dirs, given_shards)],
                                                 "work": work, "work_conflicts": conflicts, "work_skipped": skipped})
        plan = merged_plan(plans, shards, in_order, target)
        plan = replace(plan, parts=[part.merged([p.part(part.name) for p in plans], in_order, target)
                                    for part in plans[0].parts])
        record_run_dir(target, plan.config, [b.name for b in plan.benchmarks], policy_given=plan.policy_given)
        write_plan(target, plan)
        return summarize(target, plan=plan, trusted=trusted, shard_aggregates=_shard_aggregates(in_order))


def _shard_aggregates(dirs: list[Path]) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    """Per benchmark, each shard's (pairs, aggregate) from its own ``summary.json`` (only benchmarks every
    shard summarised with a shard part; what a summary without the adapter's code can combine)."""
    found: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for d in dirs:
        try:
            summary = load_summary(d)
        except (OSError, ValueError):
            return {}
        for name, entry in summary.benchmarks.items():
            if entry.shard is not None and entry.aggregate:
                found.setdefault(name, []).append((entry.shard.pairs, entry.aggregate))
    return {name: parts for name, parts in found.items() if len(parts) == len(dirs)}


def _merge_benchmark(bench: str, dirs: list[Path], target: Path) -> None:
    """One benchmark's results and episodes from every shard into ``target/bench`` (rewritten)."""
    results: dict[tuple[str, int], tuple[dict, Path]] = {}
    episodes: dict[tuple[str, int], dict] = {}
    for d in dirs:
        store = BenchmarkStore(d, bench)
        if not store.results_path.exists():
            continue
        try:  # streamed, a line at a time within the store's caps: a record file past them is one line
            recorded = store.load()  # repairs a torn tail; first record of a pair wins, as in a resume
            by_key = {(e.task_id, e.trial): e for e in store.episodes().values()}
        except ValueError as exc:
            raise ShardError(str(exc)) from None
        for key, result in recorded.items():
            row = result.to_row()
            if key in results and results[key][0] != row:
                raise ShardError(f"{bench}: {key} has different results in {results[key][1]} and {d}")
            results.setdefault(key, (row, d))
            if key in by_key:
                episodes.setdefault(key, by_key[key].to_row())
    dest = BenchmarkStore(target, bench)
    dest.dir.mkdir(parents=True, exist_ok=True)
    for path in (dest.results_path, dest.episodes_path):
        path.unlink(missing_ok=True)
    for key in sorted(results):  # a fixed order; aggregates do not depend on it
        if key in episodes:
            append_jsonl(dest.episodes_path, episodes[key])
        append_jsonl(dest.results_path, results[key][0])


def _merge_work(bench: str, dirs: list[Path], target: Path, budget: CopyBudget
                ) -> tuple[int, list[dict[str, str]], list[dict[str, str]]]:
    """Copy every shard's ``bench/work/`` tree into ``target/bench/work/`` (rewritten) with
    :func:`unified.execution.copying.merge_tree`: directories and regular files only, never through
    a link, holes kept, within ``budget`` (work files may come from sandboxed episodes).

    Returns (files copied, conflicts, left out): a relative path two shards hold with different bytes
    keeps the first shard's copy (``dirs`` in shard order) and is listed as ``{"path", "kept", "other"}``;
    links, special files and files past the budget stay in their shard, listed as ``{"path", "shard", "why"}``."""
    dest = target / bench / "work"
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)
    origin: dict[str, Path] = {}
    conflicts: list[dict[str, str]] = []
    left_out: list[dict[str, str]] = []
    for d in dirs:
        merged = merge_tree(d / bench / "work", dest, budget=budget, within=target)
        origin.update({rel: d for rel in merged.copied})
        conflicts += [{"path": f"{bench}/work/{rel}", "kept": str(origin[rel]), "other": str(d)} for rel in merged.differ]
        left_out += [{"path": f"{bench}/work" + ("" if rel == "." else f"/{rel}"), "shard": str(d), "why": why}
                     for rel, why in merged.left_out]
    return len(origin), conflicts, left_out


