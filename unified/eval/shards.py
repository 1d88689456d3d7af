"""Evals spread over jobs: ``--shard I/N`` runs a fixed part of the (task, trial) pairs, ``--merge`` joins them.

Which shard runs a pair::

    shard(pair) = int(sha256(benchmark NUL group NUL trial)[:16], 16) mod N

``group`` is the task's own id, except for tasks joined by ``depends_on`` (BFCL memory questions
and the conversations that fill their memory): a connected set of such tasks is one group, named
by its smallest root id (a task with no dependency in the list), and all its tasks and trials go
to one shard, since a dependent task runs only after every trial of what it depends on. The
assignment depends on nothing but these names: not on ``--limit`` (a pair keeps its shard when
the limit grows), the order of the listing, or earlier runs; so each shard directory resumes on
its own like any run directory. Shards are balanced only in expectation (a hash, not a deal):
with few tasks one shard may get more than another, or none.

``python -m unified.eval --merge OUT_0 ... OUT_{N-1} --out OUT`` checks that the directories are
the N shards of one command (same config but ``out`` and ``shard``; every index once; none still
running), copies their result and episode lines into ``OUT`` (one line per pair, sorted by task id and
trial) and their ``<benchmark>/work/`` files (adapter state such as BFCL memory snapshots and
SWE-bench test logs) into ``OUT/<benchmark>/work/``, then lets the runner resume ``OUT`` as the
unsharded command with no new episode allowed: it computes the same aggregates and summary an
unsharded run would, from the same records. A pair found in no shard is an error naming the shard
to rerun. A work file that two shards hold with different bytes keeps the copy of the lower shard
index; ``OUT/shards.json`` and the summary list the others (they stay in their shard directories).
Work files may come from sandboxed episodes, so they are copied as untrusted
(:func:`unified.execution.copying.merge_tree`): directories and regular files only, never through a
link, sparse files kept sparse, at most :data:`MERGE_WORK_BUDGET_BYTES` written; links, FIFOs,
sockets, devices and files past the budget are left out, each named on stderr, in ``shards.json``
(``work_skipped``) and in the summary.

Summaries say which kind of run they describe: a shard's ``summary.json`` has a top-level
``"shard"`` (a :class:`unified.eval.records.ShardRun`: ``{"shard": "I/N", "index", "count", "pairs": n,
"pairs_total": m, "merge_command": ..., "note": ...}``), its benchmarks' entries a ``"shard"``
(a :class:`unified.eval.records.ShardPart`) with their own counts and the reason ``shard I/N: ...`` under
``not_comparable_because``), and its ``summary.md`` opens with "Shard I/N: not a whole run" and the
merge command. A merged run's has ``"merged_from"`` (the contents of ``shards.json``) and a
paragraph naming the shard directories and where the work files went; its benchmark entries
and tables are those of the unsharded run.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unified.benchmarks.contract import Task
from unified.config import ConfigError, from_dict, to_dict
from unified.eval.records import BenchmarkEntry, RunSummary, ShardPart, ShardRun
from unified.execution.copying import CopyBudget, merge_tree
from unified.store import append_jsonl, write_json_atomic

SHARDS_FILE = "shards.json"
"""Written into a merged run directory: the shard directories it was made from."""
MERGE_WORK_BUDGET_BYTES = 16 << 30
"""Most bytes a merge writes for the shards' work files (holes are free); files past it stay in their shard."""


class ShardError(ValueError):
    """Shard directories that cannot be merged, or a merged run that would need new episodes."""


class MissingPairs(ShardError):
    """The runner found (task, trial) pairs without a result where none may run (a merge)."""

    def __init__(self, benchmark: str, pairs: list[tuple[str, int]]) -> None:
        self.benchmark, self.pairs = benchmark, pairs
        super().__init__(f"{benchmark}: {len(pairs)} (task, trial) pair(s) have no result, e.g. {pairs[:3]}")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (``--shard 2/4`` is index 2 of 0..3)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(text: str | None, where: str = "shard") -> Shard | None:
    """``"I/N"`` -> :class:`Shard` (None for None); ConfigError naming ``where`` unless ``0 <= I < N``."""
    if text is None:
        return None
    match = _SHARD.match(str(text))
    if not match:
        raise ConfigError(f"{where}: expected I/N (shard I of N, counted from 0), got {text!r}")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"{where}: expected I/N with 0 <= I < N, got {text!r}")
    return Shard(index, count)


def shard_type(text: str) -> str:
    """argparse ``type`` of ``--shard``: a usage error for anything but I/N."""
    import argparse

    try:
        parse_shard(text, "--shard")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


def shard_of(benchmark: str, group: str, trial: int, count: int) -> int:
    """The shard (0..count-1) of one pair of ``group``; ``trial`` is ignored for groups of several tasks
    (the caller passes -1 for them)."""
    digest = hashlib.sha256(f"{benchmark}\0{group}\0{trial}".encode()).hexdigest()
    return int(digest[:16], 16) % count


def dependency_groups(tasks: Iterable[Task]) -> dict[str, str | None]:
    """task id -> the name of its ``depends_on`` group (smallest root id), or None for a task alone.

    Dependencies on tasks that are not listed are ignored (they do not run here either)."""
    tasks = list(tasks)
    ids = {t.id for t in tasks}
    parent = {t.id: t.id for t in tasks}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for task in tasks:
        for dep in task.depends_on:
            if dep in ids:
                a, b = find(task.id), find(dep)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    members: dict[str, list[Task]] = {}
    for task in tasks:
        members.setdefault(find(task.id), []).append(task)
    out: dict[str, str | None] = {}
    for group in members.values():
        if len(group) == 1:
            out[group[0].id] = None
            continue
        roots = [t.id for t in group if not any(d in ids for d in t.depends_on)] or [t.id for t in group]
        for task in group:
            out[task.id] = min(roots)
    return out


def shard_pairs(benchmark: str, tasks: list[Task], runs: int, shard: Shard | None) -> set[tuple[str, int]]:
    """The (task id, trial) pairs of ``tasks`` x ``range(runs)`` that ``shard`` runs (all of them for None)."""
    pairs = {(t.id, trial) for t in tasks for trial in range(runs)}
    if shard is None or shard.count == 1:
        return pairs
    groups = dependency_groups(tasks)
    keep = set()
    for task_id, trial in pairs:
        group = groups[task_id]
        key = shard_of(benchmark, group, -1, shard.count) if group else shard_of(benchmark, task_id, trial,
                                                                                    shard.count)
        if key == shard.index:
            keep.add((task_id, trial))
    return keep


# --------------------------------------------------------------------------------------------------
# merging


def _shard_configs(dirs: list[Path]) -> tuple[dict[str, Any], list[Shard]]:
    """The shards' common config (``out`` and ``shard`` dropped) and each directory's shard."""
    common: dict[str, Any] | None = None
    shards: list[Shard] = []
    for d in dirs:
        path = d / "run.json"
        if not path.is_file():
            raise ShardError(f"{d}: no run.json (not an eval run directory, or its shard never started)")
        config = dict(json.loads(path.read_text(encoding="utf-8"))["config"])
        shard = parse_shard(config.pop("shard", None), f"{path}: config.shard")
        if shard is None:
            raise ShardError(f"{path}: not a shard (its command had no --shard I/N)")
        config.pop("out", None)
        if common is None:
            common = config
        elif config != common:
            diff = sorted(k for k in {*config, *common} if config.get(k) != common.get(k))
            raise ShardError(f"{path}: not a shard of the same command as {dirs[0]} (differs in: "
                             f"{', '.join(diff)})")
        shards.append(shard)
    assert common is not None
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
    return common, shards


def merge_runs(shard_dirs: list[str], out: str) -> RunSummary:
    """Merge the shard run directories ``shard_dirs`` into the run directory ``out``; returns its summary.

    Raises :class:`ShardError` (one line) when they are not all the shards of one command, when
    one is still running, when two hold different results for one pair, or when a pair has no
    result in any shard (naming the shard to rerun). ``out`` must be new or a previous merge of
    the same shards (merging again replaces its records)."""
    from unified.eval.config import EvalConfig
    from unified.eval.runner import run_eval
    from unified.eval.rundir import RunDirLock

    dirs = [Path(d) for d in shard_dirs]
    target = Path(out)
    if any(d.resolve() == target.resolve() for d in dirs):
        raise ShardError(f"--out {out} is one of the shard directories; give a new directory")
    if (target / "run.json").exists() and not (target / SHARDS_FILE).exists():
        raise ShardError(f"--out {out} holds a run that is not a merge; give a new directory")
    common, shards = _shard_configs(dirs)
    cfg = from_dict(EvalConfig, {**common, "out": str(target)}, source=f"{dirs[0]}/run.json")
    with ExitStack() as stack:
        for d in dirs:  # a shard still running would change under us: refuse (names its process)
            stack.enter_context(RunDirLock(d))
        benches = sorted({p.parent.name for d in dirs for p in d.glob("*/results.jsonl")})
        in_order = [d for _, d in sorted(zip((s.index for s in shards), dirs))]  # lower index wins a conflict
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
                                                            for d, s in zip(dirs, shards)],
                                                 "work": work, "work_conflicts": conflicts, "work_skipped": skipped})
        try:
            return run_eval(cfg, allow_new_episodes=False)
        except MissingPairs as exc:
            by_shard = sorted({_pair_shard(exc.benchmark, cfg, shards[0].count, p) for p in exc.pairs})
            where = ", ".join(f"{i}/{shards[0].count} ({next(d for d, s in zip(dirs, shards) if s.index == i)})"
                              for i in by_shard)
            raise ShardError(f"{exc}: shard(s) {where} did not finish; rerun them (same command, same --out) "
                             "and merge again") from None


def _pair_shard(benchmark: str, cfg: Any, count: int, pair: tuple[str, int]) -> int:
    """The shard that should have run ``pair`` (its group is known only from the task list; a lone
    task's shard is its own)."""
    from unified.benchmarks.discovery import load_adapter

    name, groups = benchmark, {}
    try:
        adapter = load_adapter(benchmark, **cfg.benchmark_config.get(benchmark, {}))
        name = adapter.name or benchmark
        groups = dependency_groups(adapter.tasks(cfg.split, cfg.limit))
    except Exception:  # only for naming the shard: fall back to the lone-task rule
        pass
    group = groups.get(pair[0])
    return shard_of(name, group, -1, count) if group else shard_of(name, pair[0], pair[1], count)


def _merge_benchmark(bench: str, dirs: list[Path], target: Path) -> None:
    """One benchmark's results and episodes from every shard into ``target/bench`` (rewritten)."""
    from unified.eval.rundir import BenchmarkStore

    results: dict[tuple[str, int], tuple[dict, Path]] = {}
    episodes: dict[tuple[str, int], dict] = {}
    for d in dirs:
        store = BenchmarkStore(d, bench)
        if not store.results_path.exists():
            continue
        recorded = store.load()  # repairs a torn tail; first record of a pair wins, as in a resume
        by_key = {(e.task_id, e.trial): e for e in store.episodes().values()}
        for key, result in recorded.items():
            row = to_dict(result)
            if key in results and results[key][0] != row:
                raise ShardError(f"{bench}: {key} has different results in {results[key][1]} and {d}")
            results.setdefault(key, (row, d))
            if key in by_key:
                episodes.setdefault(key, by_key[key].to_dict())
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
    a link, holes kept, within ``budget``.

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


# --------------------------------------------------------------------------------------------------
# what a summary says about shards


def merge_command(out: str | Path, count: int) -> str:
    """The ``--merge`` command for the shards of the run whose shard writes into ``out``: concrete when
    ``out`` is named ``shard-I`` (``slurm/eval.sh``'s layout), else with placeholders."""
    path = Path(out)
    if re.fullmatch(r"shard-\d+", path.name):
        parent = path.parent
        dirs = " ".join(str(parent / f"shard-{i}") for i in range(count))
        return f"python -m unified.eval --merge {dirs} --out {parent}"
    return f"python -m unified.eval --merge OUT_0 ... OUT_{count - 1} --out OUT"


def shard_reason(shard: Shard, pairs: int, total: int) -> str:
    """The ``not_comparable_because`` line of a shard's benchmark entry."""
    return f"shard {shard}: {pairs} of {total} (task, trial) pairs, not a whole run"


def run_kind(cfg: Any, out: str | Path, benchmarks: dict[str, BenchmarkEntry]) -> tuple[ShardRun | None, dict[str, Any] | None]:
    """What says a summary is a shard's (:class:`ShardRun`, the summary's ``shard``) or a merge's (the
    contents of ``shards.json``, its ``merged_from``); (None, None) for a plain run. ``benchmarks``:
    the summary's entries (a shard's carry their :class:`ShardPart` counts)."""
    shard = parse_shard(getattr(cfg, "shard", None))
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


def run_kind_markdown(summary: RunSummary) -> list[str]:
    """The paragraph that opens a shard's or a merged run's ``summary.md`` (none for a plain run)."""
    if summary.shard is not None:
        s = summary.shard
        per = ", ".join(f"{name} {e.shard.pairs} of {e.shard.pairs_total}"
                        for name, e in summary.benchmarks.items() if e.shard is not None)
        return [f"**Shard {s.shard}: not a whole run.** It holds {s.pairs} of {s.pairs_total} "
                f"(task, trial) pairs" + (f" ({per})" if per else "") + "; its scores cover those pairs only. "
                f"Merge the {s.count} shards with `{s.merge_command}`.", ""]
    merged = summary.merged_from
    if not isinstance(merged, dict):
        return []
    if "error" in merged:
        return [f"**Merged from shards**, but their list cannot be read: {merged['error']}", ""]
    shards = merged.get("shards", [])
    lines = [f"**Merged from {len(shards)} shards** (`--merge`): "
             + ", ".join(f"`{s['dir']}` ({s['shard']})" for s in shards) + "."]
    work = merged.get("work") or {}
    if work:
        lines.append("Their work files (`<benchmark>/work/`) were copied here: "
                     + ", ".join(f"{b} {w['files']} into `{w['dir']}`" for b, w in work.items()) + ".")
    clashes = merged.get("work_conflicts") or []
    if clashes:
        lines.append(f"{len(clashes)} work file(s) differed between shards; the lower shard's copy is kept here, "
                     f"the others stay in their shard directories (listed in {SHARDS_FILE}), e.g. "
                     f"`{clashes[0]['path']}` of `{clashes[0]['other']}`.")
    skipped = merged.get("work_skipped") or []
    if skipped:
        lines.append(f"{len(skipped)} work entries were left out (links, special files or past the merge's "
                     f"budget; they stay in their shard directories, listed in {SHARDS_FILE}), e.g. "
                     f"`{skipped[0]['path']}` of `{skipped[0]['shard']}`: {skipped[0]['why']}.")
    return [" ".join(lines), ""]


def shard_part(shard: Shard, pairs: int, total: int) -> ShardPart:
    """A shard's counts for one benchmark's entry (its ``shard``)."""
    return ShardPart(shard=str(shard), pairs=pairs, pairs_total=total)


def check_unsharded_parts(cfg: Any, want_general: bool) -> None:
    """``cfg.shard`` is I/N, and a sharded run does not include the general suite (lm-eval runs its
    tasks in one process). ConfigError otherwise, before anything runs."""
    if parse_shard(getattr(cfg, "shard", None)) and want_general:
        raise ConfigError("--shard: the general suite (lm-eval) cannot be sharded; run it in its own job "
                          "without --shard")
