"""What a warmup recipe needs that no single field can check, found before any weights load.

:func:`problems` returns one line per setting that would make the run fail later (after every
rank has loaded the policy): a model spec that names nothing (``embeded`` -> "did you mean
'embedded'"), a rubric reward without a judge (the 35B recipe ships ``judge_endpoint: ""``), a
judge spec that is not one, a dotted-path reward that does not load, training data that is not
there. ``python -m unified.warmup`` stops on them with exit status 2 (``--dry-run`` prints the
plan first, then the lines).
"""

from __future__ import annotations

from pathlib import Path

from unified.registry import UnknownNameError
from unified.warmup.config import WarmupConfig
from unified.inference.spec import parse_spec
from unified.rewards import CallableEntry, RubricEntry
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
    for i, entry in enumerate(cfg.rewards):
        if entry.weight > 0:
            out.extend(_reward_problems(entry, i))
    for name in ("train", "heldout"):
        for item in getattr(cfg.data, name):
            if not Path(item).exists():
                out.append(f"data.{name}: {item} does not exist (relative paths are read from {Path.cwd()})")
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
