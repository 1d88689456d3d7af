"""The parts of an eval run that are not agent episodes, planned, run and summarised through one seam.

An agent benchmark is an adapter whose (task, trial) pairs the runner sends through the agent loop. A
*part* is what a ``--suite`` name asks for that is not: today the general suite's lm-evaluation-harness
tasks (:class:`unified.eval.general.PlannedGeneral`). The plan (:mod:`unified.eval.plan`), the runner
(:mod:`unified.eval.runner`) and the summary (:mod:`unified.eval.summarize`) reach every part only
through :class:`PlannedPart` and :data:`PART_SUITES`, so none of them names one: a part is listed in the
plan (:meth:`PlannedPart.lines`), run after the benchmarks' episodes on the same weights
(:meth:`PlannedPart.run`), and read back from its own records into its section of the summary
(:meth:`PlannedPart.section`, under the key :attr:`PlannedPart.suite`).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Protocol

from unified.eval.general import GENERAL_SUITE, plan_general


class PlannedPart(Protocol):
    """One planned part of a run (module docstring); it is also its own record in ``plan.json``."""

    suite: str
    """Its ``--suite`` name, and the key of its section in ``summary.json`` and of its field in ``plan.json``."""

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


PART_SUITES: dict[str, Callable[..., PlannedPart | None]] = {GENERAL_SUITE: plan_general}
"""``--suite`` name -> its planner ``(cfg, *, repair) -> PlannedPart | None`` (None: the command does not ask
for it). A suite named here is not an adapters' suite."""


def split_suites(suite: str | None) -> tuple[list[str], list[str]]:
    """``--suite general,ood`` -> (``["ood"]``, ``["general"]``): the adapters' suites and the parts asked for."""
    names = [p.strip() for p in (suite or "").split(",") if p.strip()]
    return [n for n in names if n not in PART_SUITES], [n for n in names if n in PART_SUITES]


def plan_parts(cfg: Any, *, repair: bool = True) -> list[PlannedPart]:
    """The planned parts ``cfg`` asks for (``repair``: cut a torn last record before reading its records)."""
    planned = (plan(cfg, repair=repair) for plan in PART_SUITES.values())
    return [part for part in planned if part is not None]
