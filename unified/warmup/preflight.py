"""What a warmup recipe needs that no single field can check, found before any weights load.

:func:`problems` returns one line per setting that would make the run fail later (after every
rank has loaded the policy): a model spec that names nothing (``embeded`` -> "did you mean
'embedded'"), a rubric reward without a judge (the 35B recipe ships ``judge_endpoint: ""``), a
judge spec that is not one, a dotted-path reward that does not load, training data that is not
there. ``python -m unified.warmup`` stops on them with exit status 2 (``--dry-run`` prints the
plan first, then the lines).

:func:`judge_problems` then asks every judge endpoint one real question before any weights load: the
reward entry's own prompt and request body (max tokens, temperature, thinking) on the first training
row, with the prediction set to its reference observation, under the entry's ``judge_timeout_s``, one
attempt and no answer cache. A call that fails, or an answer that the reward's own parser cannot read,
is one line naming the entry, the endpoint and the error; the command stops with exit status 2. A judge
that dies later is the fail-fast monitor's (:mod:`unified.warmup.failfast`). ``--dry-run`` asks nothing
(it may run where the judge is not reachable). Local judges (``judge_model``) load in the trainer and
are not asked.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from unified.registry import UnknownNameError
from unified.warmup.agentic_checks import agentic_problems
from unified.warmup.config import WarmupConfig, is_agentic
from unified.inference.spec import parse_spec
from unified.lwm.dataset import rl_rows
from unified.rewards import CallableEntry, RubricEntry
from unified.rewards.entries import applied_entries
from unified.warmup.plan import plan_problems

_SPEC_ERRORS = (ValueError, FileNotFoundError, UnknownNameError)  # SpecError, CheckpointNotFoundError


def problems(cfg: WarmupConfig) -> list[str]:
    """One line for each setting of ``cfg`` that cannot run (empty when the recipe is complete)."""
    out: list[str] = []
    try:
        spec = parse_spec(cfg.model.name_or_path)
        if not spec.is_checkpoint:
            out.append(f"model.name_or_path: {cfg.model.name_or_path!r} is not a checkpoint to train (embedded, "
                       "a checkpoint directory, a .gguf or a hub id)")
    except _SPEC_ERRORS as exc:
        out.append(f"model.name_or_path: {exc}")
    agentic = is_agentic(cfg)
    applied = {id(e) for e in applied_entries(cfg.rewards)}  # an agentic run's single-turn entries are not asked
    for i, entry in enumerate(cfg.rewards):
        if id(entry) in applied:
            out.extend(_reward_problems(entry, i))
    for name in ("train", "heldout") if not agentic else ():  # an agentic run's tasks are its benchmark's
        for item in getattr(cfg.data, name):
            if not Path(item).exists():
                out.append(f"data.{name}: {item} does not exist (relative paths are read from {Path.cwd()})")
    out.extend(agentic_problems(cfg))  # settings an agentic run would not apply, its engine (unified/warmup/agentic_checks.py)
    out.extend(plan_problems(cfg))  # memory/time plan of the layout (unified/warmup/plan.py)
    return out


def _reward_problems(entry, index: int) -> list[str]:
    """A rubric entry without a usable judge, a dotted path that does not load."""
    key = f"rewards.{entry.name}"
    if isinstance(entry, CallableEntry):
        try:
            entry.build()
        except Exception as exc:  # a dotted path that does not import, or builds no reward function
            return [f"rewards[{index}]: {exc}"]
        return []
    if not isinstance(entry, RubricEntry):
        return []
    if not entry.judge_endpoint and not entry.judge_model:
        return [f"{key}.judge_endpoint is empty (and {key}.judge_model too) but {key}.weight={entry.weight:g} "
                f"needs a judge: --set {key}.judge_endpoint=openai:URL#MODEL (slurm/lwm_warmup.sh: "
                f"JUDGE=openai:URL#MODEL), or --set {key}.weight=0"]
    if entry.judge_endpoint and entry.judge_model:
        return [f"{key}: set one of judge_endpoint and judge_model, not both"]
    try:
        if entry.judge_endpoint and not parse_spec(entry.judge_endpoint).is_endpoint:
            return [f"{key}.judge_endpoint: {entry.judge_endpoint!r} is not openai:URL#MODEL "
                    f"(a local judge checkpoint goes in {key}.judge_model)"]
        if entry.judge_model:
            parse_spec(entry.judge_model)
    except _SPEC_ERRORS as exc:
        return [f"{key}.{'judge_endpoint' if entry.judge_endpoint else 'judge_model'}: {exc}"]
    return []


def judge_problems(cfg: WarmupConfig) -> list[str]:
    """One line per judge-backed reward entry whose endpoint does not answer one real request usably."""
    entries = [e for e in applied_entries(cfg.rewards) if isinstance(e, RubricEntry) and e.judge_endpoint]
    if not entries:
        return []
    try:
        row = _first_row(cfg)
    except Exception as exc:  # the data check above names missing files; anything else is said here
        return [f"judge check: could not read a training row of data.train {cfg.data.train}: "
                f"{type(exc).__name__}: {exc}"]
    out = []
    for entry in entries:
        once = {"judge_max_retries": 0, "cache_dir": ""}
        if hasattr(entry, "judge_attempts"):
            once["judge_attempts"] = 1
        try:
            reward = dataclasses.replace(entry, **once).build()
            (breakdown,) = reward.breakdowns([row["prompt"]], [row["reference"]], reference=[row["reference"]],
                                             domain=[row["domain"]])
        except Exception as exc:  # building the reward (e.g. a missing checkout) or a reward that raised
            breakdown = None
            detail = f"{type(exc).__name__}: {exc}"
        else:
            detail = breakdown.detail
        if breakdown is None or not breakdown.parsed:
            out.append(f"rewards.{entry.name}: the judge {entry.judge_endpoint} did not give a usable answer to "
                       f"one request (timeout {entry.judge_timeout_s:g} s): {' '.join(str(detail).split())[:400]}")
    return out


def _first_row(cfg: WarmupConfig) -> dict:
    paths = cfg.data.train
    rows = rl_rows(paths[0] if len(paths) == 1 else paths, seed=cfg.data.seed, limit=1)
    if not rows:
        raise ValueError("no rows")
    return rows[0]
