"""The parts of an eval run that are not agent episodes, planned, run, sharded, merged and summarised through one seam.

An agent benchmark is an adapter whose (task, trial) pairs the runner sends through the agent loop. A
*part* is a benchmark whose work is not an episode: today lm-evaluation-harness
(:class:`unified.eval.general_plan.PlannedGeneral`, asked for as ``--benchmarks lm_eval`` or ``--suite general``).
A part is registered here (:data:`PART_KINDS`: its name, its suite, its planner and its plan record), and the
plan (:mod:`unified.eval.plan`: ``plan.json``'s ``parts``, one list), the runner (:mod:`unified.eval.runner`),
the summary (:mod:`unified.eval.summarize`) and ``--merge`` (:mod:`unified.eval.merge`) reach it only through
:class:`PlannedPart`, so none of them names one: a part is listed in the plan (:meth:`PlannedPart.lines`), keeps
the tasks of its ``--shard`` and what ``--out`` already records (its planner), is run after the benchmarks' episodes on
the same weights (:meth:`PlannedPart.run`), joined from its shards (:meth:`PlannedPart.merged`) and read back
from its own records into its section of the summary (:meth:`PlannedPart.section`, under :attr:`PlannedPart.suite`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from unified.config import ConfigError, from_dict
from unified.eval.general_plan import LM_EVAL, PlannedGeneral, general_of_old_plan, plan_general
from unified.eval.general import GENERAL_SUITE
from unified.registry import UnknownNameError


class PlannedPart(Protocol):
    """One planned part of a run (module docstring); it is also its own item of ``plan.json``'s ``parts``."""

    name: str
    """Its one name (``--benchmarks NAME``, and the key that reads its item of ``plan.json`` back)."""
    suite: str
    """Its ``--suite`` name, and the key of its section in ``summary.json``."""
    directory: str
    """``OUT/<directory>`` holds its records (not a benchmark's directory)."""

    @property
    def pairs(self) -> list[Any]:
        """What this run covers (after ``--shard``)."""
        ...

    def label(self) -> str:
        """What ``--dry-run``'s "would evaluate" line says for it."""
        ...

    def lines(self) -> list[str]:
        """Its plan lines (``# plan: ...``), in the benchmarks' form."""
        ...

    def run(self, out: str | os.PathLike[str], *, backend: str | None, auto: bool, loaded: Any) -> None:
        """Run (or resume) it into ``out`` after the benchmarks' episodes: ``backend`` is the engine chosen
        for the policy (``auto``: chosen by the runner, not by the user), ``loaded`` the policy's loaded
        checkpoint when one is in memory (None otherwise)."""
        ...

    def section(self, out: str | os.PathLike[str]) -> Any:
        """Its section of the summary, read from its records in ``out``."""
        ...

    def merged(self, shards: list[Any], dirs: list[Path], target: Path) -> PlannedPart:
        """The unsharded command's part, its shards' records (``shards``: each shard's part, ``dirs`` its
        directory, in shard order) joined into ``target``; a ShardError names a shard that did not finish."""
        ...


@dataclass(frozen=True)
class PartKind:
    """A registered part: ``--benchmarks name`` or ``--suite suite`` asks for it; ``plan(cfg, repair=...)``
    plans it; ``record`` is the dataclass of its ``plan.json`` item; ``old_plan_key`` / ``upgrade`` read the
    field a plan of an older version kept it in."""

    name: str
    suite: str
    directory: str
    plan: Callable[..., PlannedPart]
    record: type
    old_plan_key: str | None = None
    upgrade: Callable[[Any, dict[str, Any]], Any] | None = None


PART_KINDS: dict[str, PartKind] = {
    LM_EVAL: PartKind(LM_EVAL, GENERAL_SUITE, PlannedGeneral.directory, plan_general, PlannedGeneral,
                      old_plan_key=GENERAL_SUITE, upgrade=general_of_old_plan),
}
"""Part name -> its kind. A name or suite here is not an adapter's."""


def part_suites() -> dict[str, str]:
    """``--suite`` name -> part name."""
    return {kind.suite: kind.name for kind in PART_KINDS.values()}


def split_suites(suite: str | None) -> tuple[list[str], list[str]]:
    """``--suite general,ood`` -> (``["ood"]``, ``["lm_eval"]``): the adapters' suites and the parts asked for."""
    names = [p.strip() for p in (suite or "").split(",") if p.strip()]
    suites = part_suites()
    return [n for n in names if n not in suites], list(dict.fromkeys(suites[n] for n in names if n in suites))


def split_benchmarks(items: Iterable[str]) -> tuple[list[str], list[str]]:
    """``--benchmarks bfcl_v4,lm_eval`` -> (``["bfcl_v4"]``, ``["lm_eval"]``): the adapters' items and the parts."""
    names = [p.strip() for item in items for p in str(item).split(",") if p.strip()]
    return [n for n in names if n not in PART_KINDS], list(dict.fromkeys(n for n in names if n in PART_KINDS))


def parts_asked(cfg: Any) -> list[str]:
    """The part names ``cfg`` asks for (``--suite`` and ``--benchmarks``), in :data:`PART_KINDS` order."""
    asked = {*split_suites(cfg.suite)[1], *split_benchmarks(cfg.benchmarks)[1]}
    return [name for name in PART_KINDS if name in asked]


def reserved_names() -> set[str]:
    """Names no adapter may take: the parts' names and their records' directories (one name, one directory)."""
    return {n for kind in PART_KINDS.values() for n in (kind.name, kind.directory)}


def plan_parts(cfg: Any, *, repair: bool = True) -> list[PlannedPart]:
    """The planned parts ``cfg`` asks for (``repair``: cut a torn last record before reading its records)."""
    return [PART_KINDS[name].plan(cfg, repair=repair) for name in parts_asked(cfg)]


def parts_of_plan(data: dict[str, Any], source: str) -> list[PlannedPart]:
    """The ``parts`` of a ``plan.json``'s data (removed from ``data``), read strictly by each item's ``name``;
    a plan of an older version keeps a part in its own field (``old_plan_key``), read the same way."""
    items = data.pop("parts", None) or []
    if not isinstance(items, list):
        raise ConfigError(f"{source}: parts: expected a list")
    for kind in PART_KINDS.values():
        if kind.old_plan_key and kind.old_plan_key in data:
            old = data.pop(kind.old_plan_key)
            if old is not None:
                items.append(kind.upgrade(old, data) if kind.upgrade else old)
    parts = []
    for number, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if name not in PART_KINDS:
            raise ConfigError(f"{source}: parts[{number}].name: "
                              f"{UnknownNameError('part', str(name), list(PART_KINDS))}")
        parts.append(from_dict(PART_KINDS[name].record, item, where=f"parts[{number}]", source=source))
    return parts
