"""lm-evaluation-harness as a planned part of a run: planned, sharded, run, resumed, merged and summarised
like a benchmark (:mod:`unified.eval.parts` is the seam; :mod:`unified.eval.general` runs lm-eval).

A benchmark's unit is a (task, trial) pair; lm-eval's is a task (a task, group or tag name of
``general.tasks``), run once: lm-eval's own seeds make a second trial the same numbers. So the part's
"pairs" are its tasks, and everything a benchmark gets follows from that:

- **plan**: :func:`plan_general` lists the tasks, which of them ``--out`` already holds an ``ok`` record of
  under this model and these lm-eval settings (:func:`unified.eval.general.fingerprint`), and which will run;
- **shard**: ``--shard I/N`` keeps the tasks whose hash falls in shard I, by the same rule as a benchmark's
  pairs (:func:`unified.eval.shards.shard_of` of the records' directory, the task name and trial 0), so a
  task keeps its shard whatever else is listed;
- **merge**: :meth:`PlannedGeneral.merged` joins the shards' task records and lm-eval's own output files into
  the merged directory and plans the unsharded command's part; a planned task without a record in its
  shard is a :class:`unified.eval.shards.ShardError` naming the shard to rerun;
- **summary**: :meth:`PlannedGeneral.section` is the summary's ``general`` section, read from the records.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from unified.eval.general import (GENERAL_SUITE, GeneralConfig, GeneralStore, fingerprint, general_entries,
                                  general_with_limit, run_general)
from unified.eval.records import GeneralSection
from unified.eval.shards import ShardError, parse_shard, shard_of
from unified.execution.copying import CopyBudget, merge_tree

LM_EVAL = "lm_eval"
"""The part's one name: ``--benchmarks lm_eval`` (``--suite general`` asks for the same part), its ``name`` in
``plan.json``'s ``parts``."""

MERGE_OUTPUTS_BUDGET_BYTES = 16 << 30
"""Most bytes a merge writes for lm-eval's own output files (the shards' copies stay where they are)."""


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class PlannedGeneral:
    """The lm-eval part of a run plan (one item of ``plan.json``'s ``parts``; module docstring). A
    :class:`unified.eval.parts.PlannedPart`: the plan, the runner, the summary and ``--merge`` call only its
    methods."""

    suite: ClassVar[str] = GENERAL_SUITE
    directory: ClassVar[str] = GENERAL_SUITE
    """``OUT/general/`` holds its records (:class:`unified.eval.general.GeneralStore`)."""

    config: GeneralConfig
    """lm-eval's options (``--limit`` applied, :func:`unified.eval.general.general_with_limit`)."""
    model: str
    name: str = LM_EVAL
    covered: list[str] | None = None
    """The tasks this run covers after ``--shard`` (config order); None: every task of ``config.tasks``
    (an unsharded run, and every plan written before sharding)."""
    recorded: list[str] = field(default_factory=list)
    """Covered tasks with an ``ok`` record of this model and these settings when the plan was made."""
    to_run: list[str] = field(default_factory=list)

    @property
    def tasks(self) -> list[str]:
        return list(self.config.tasks)

    @property
    def pairs(self) -> list[str]:
        """The tasks this run covers (its "pairs": one trial each)."""
        return self.tasks if self.covered is None else list(self.covered)

    def label(self) -> str:
        return f"{GENERAL_SUITE} (lm-eval: {', '.join(self.tasks)})"

    def lines(self) -> list[str]:
        """The ``--dry-run`` plan line, in the benchmarks' form (a shard's count as theirs)."""
        total, pairs = len(self.tasks), self.pairs
        part = f", this shard: {len(pairs)} of them" if self.covered is not None else ""
        return [f"# plan: {GENERAL_SUITE} (lm-eval): {total} tasks x 1 run(s) = {total} pairs{part}; "
                f"{len(self.recorded)} recorded, {len(self.to_run)} to run ({', '.join(pairs)})"]

    def run(self, out: str | os.PathLike[str], *, backend: str | None = None, auto: bool = False,
            loaded: Any = None) -> None:
        """Run (or resume) the covered tasks into ``out`` (:func:`unified.eval.general.run_general`) on the
        agent suites' loaded checkpoint when there is one (``loaded``). An auto-chosen vLLM server (``auto``)
        is for the agent suites: lm-eval's vllm class runs vLLM in this process (the gpu extra), so the tasks
        then run in-process unless ``--backend vllm`` itself said so. A shard that covers no task runs none."""
        if not self.pairs:
            _log(f"{GENERAL_SUITE}: no lm-eval task falls in this shard")
            return
        run_general(replace(self.config, tasks=self.pairs), self.model, out,
                    backend="hf" if auto and backend == "vllm" else backend, loaded=loaded)

    def section(self, out: str | os.PathLike[str]) -> GeneralSection:
        """The summary's ``general`` section from the covered tasks' records in ``out`` (its shape:
        :mod:`unified.eval.general_report`), read after lm-eval ran and at the start of a resumed run."""
        entries = (general_entries(GeneralStore(out), replace(self.config, tasks=self.pairs), self.model)
                   if self.pairs else {})
        for entry in entries.values():
            for key in ("model", "fingerprint", "settings", "finished_at"):
                entry.pop(key, None)
        return GeneralSection(model=self.model, settings=self.config.settings(), tasks=entries)

    def merged(self, shards: list[PlannedGeneral], dirs: list[Path], target: Path) -> PlannedGeneral:
        """The unsharded command's part (``self``: shard 0's) after copying every shard's task records
        (``dirs``, in shard order) into ``target/general/results.jsonl`` (rewritten; a line two shards hold
        alike is written once) and lm-eval's output files into ``target/general/lm_eval/`` (links and special
        files left out; a file two shards hold with other bytes keeps the lower shard's copy). A shard's
        covered task without a record of this model and settings is a ShardError naming the shard."""
        if any(s.tasks != self.tasks for s in shards):
            raise ShardError(f"{self.name}: the shards' plans list other lm-eval tasks; merge the shards of one command")
        fp = fingerprint(self.model, self.config)
        target_store = GeneralStore(target)
        target_store.path.unlink(missing_ok=True)
        seen: set[str] = set()
        for d in dirs:
            for record in GeneralStore(d).records():
                key = repr(sorted(vars(record).items()))
                if key not in seen:
                    seen.add(key)
                    target_store.append(record)
        latest = target_store.latest(fp)
        for planned, d in zip(shards, dirs):
            lacking = [task for task in planned.pairs if task not in latest]
            if lacking:
                raise ShardError(f"{self.name}: lm-eval task(s) {', '.join(lacking[:3])} of shard {d} have no record: "
                                 "that shard did not finish; rerun it (same command, same --out) and merge again")
        budget = CopyBudget(MERGE_OUTPUTS_BUDGET_BYTES)
        for d in dirs:
            source = GeneralStore(d).dir / "lm_eval"
            if source.is_dir():
                copied = merge_tree(source, target_store.dir / "lm_eval", budget=budget, within=target)
                for rel, why in copied.left_out:
                    _log(f"--merge: warning: {source / rel} left out: {why}")
        return replace(self, covered=None, recorded=[t for t in self.tasks if t in latest and latest[t].status == "ok"],
                       to_run=[])


def plan_general(cfg: Any, *, repair: bool = True) -> PlannedGeneral:
    """The lm-eval part's plan for an :class:`unified.eval.config.EvalConfig` asking for it (its tasks after
    ``--shard``, the recorded ones, the ones to run). ``repair``: cut a torn last record before reading
    (False for ``--dry-run``)."""
    general = general_with_limit(cfg.general, cfg.limit)
    shard = parse_shard(cfg.shard)
    covered = None if shard is None else [t for t in general.tasks
                                           if shard_of(GENERAL_SUITE, t, 0, shard.count) == shard.index]
    latest = GeneralStore(cfg.out).latest(fingerprint(cfg.model, general), repair=repair)
    recorded = {t for t, r in latest.items() if r.status == "ok"}
    tasks = general.tasks if covered is None else covered
    return PlannedGeneral(general, cfg.model, covered=covered, recorded=[t for t in tasks if t in recorded],
                          to_run=[t for t in tasks if t not in recorded])


def general_of_old_plan(value: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """A ``plan.json`` of version 1-3's ``general`` (version 1: lm-eval's options alone; 2-3: a
    PlannedGeneral without ``name``) as an item of ``parts``."""
    if isinstance(value, dict) and "config" not in value:  # version 1
        value = {"config": value, "model": (plan.get("config") or {}).get("model", "")}
    return {**value, "name": LM_EVAL} if isinstance(value, dict) else value
