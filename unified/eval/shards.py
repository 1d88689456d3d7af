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

The shard's run directory holds its plan (``plan.json``: its pairs, :mod:`unified.eval.plan`);
``python -m unified.eval --merge OUT_0 ... OUT_{N-1} --out OUT`` joins the shards' records and plans
(:mod:`unified.eval.merge`) and summarizes them as the unsharded run, without running anything.

The parts of a run that are not episodes are sharded by the same rule (:mod:`unified.eval.parts`): lm-eval's
tasks are its pairs, one trial each (``shard_of("general", task, 0, N)``, :mod:`unified.eval.general_plan`).

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
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from unified.benchmarks.contract import Task
from unified.config import ConfigError
from unified.eval.records import ShardPart

SHARDS_FILE = "shards.json"
"""Written into a merged run directory: the shard directories it was made from."""


class ShardError(ValueError):
    """Shard directories that cannot be merged (one line)."""


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


def shard_part(shard: Shard, pairs: int, total: int) -> ShardPart:
    """A shard's counts for one benchmark's entry (its ``shard``)."""
    return ShardPart(shard=str(shard), pairs=pairs, pairs_total=total)
