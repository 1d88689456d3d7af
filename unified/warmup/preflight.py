"""What a warmup recipe needs that no single field can check, found before any weights load.

:func:`problems` returns one line per setting that would make the run fail later (after every
rank has loaded the policy): a model spec that names nothing (``embeded`` -> "did you mean
'embedded'"), a rubric reward without a judge (the 35B recipe ships ``judge_endpoint: ""``), a
judge spec that is not one, training data that is not there. ``python -m unified.warmup`` stops on
them with exit status 2 (``--dry-run`` prints the plan first, then the lines).
"""

from __future__ import annotations

from pathlib import Path

from unified.registry import UnknownNameError
from unified.warmup.config import WarmupConfig

_SPEC_ERRORS = (ValueError, FileNotFoundError, UnknownNameError)  # SpecError, CheckpointNotFoundError


def problems(cfg: WarmupConfig) -> list[str]:
    """One line for each setting of ``cfg`` that cannot run (empty when the recipe is complete)."""
    from unified.inference.spec import parse_spec

    out: list[str] = []
    try:
        spec = parse_spec(cfg.model.name_or_path)
        if not spec.is_checkpoint:
            out.append(f"model.name_or_path: {cfg.model.name_or_path!r} is not a checkpoint to train (embedded, "
                       "a checkpoint directory, a .gguf or a hub id)")
    except _SPEC_ERRORS as exc:
        out.append(f"model.name_or_path: {exc}")
    r = cfg.rewards
    if r.rubric_weight > 0:
        if not r.judge_endpoint and not r.judge_model:
            out.append(f"rewards.judge_endpoint is empty (and rewards.judge_model too) but rewards.rubric_weight="
                       f"{r.rubric_weight} needs a judge: --set rewards.judge_endpoint=openai:URL#MODEL "
                       "(slurm/lwm_warmup.sh: JUDGE=openai:URL#MODEL), or --set rewards.rubric_weight=0")
        elif r.judge_endpoint and r.judge_model:
            out.append("rewards: set one of judge_endpoint and judge_model, not both")
        elif r.judge_endpoint:
            try:
                if not parse_spec(r.judge_endpoint).is_endpoint:
                    out.append(f"rewards.judge_endpoint: {r.judge_endpoint!r} is not openai:URL#MODEL "
                               "(a local judge checkpoint goes in rewards.judge_model)")
            except _SPEC_ERRORS as exc:
                out.append(f"rewards.judge_endpoint: {exc}")
        else:
            try:
                parse_spec(r.judge_model)
            except _SPEC_ERRORS as exc:
                out.append(f"rewards.judge_model: {exc}")
    for name in ("train", "heldout"):
        for item in getattr(cfg.data, name):
            if not Path(item).exists():
                out.append(f"data.{name}: {item} does not exist (relative paths are read from {Path.cwd()})")
    return out
