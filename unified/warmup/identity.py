"""What defines a warmup output directory, recorded in ``<output_dir>/identity.json``.

Rerunning a warmup command resumes from the last complete checkpoint, or says "already finished".
Both are right only for the same recipe, so the first run records the recipe's **identity** and
a rerun with another one stops before anything loads, naming the differing keys and the fix
(another ``--output-dir``, or ``--resume-anyway`` to continue the old checkpoint under the new
recipe all the same).

The identity is every key of the resolved recipe except those that do not change what is
trained: where it is written and how it resumes (``output_dir``, ``resume``), how long it runs
(``train.max_steps``: raising it continues a finished run), how often it saves and logs
(``train.save_steps``, ``train.save_total_limit``, ``train.logging_steps``, ``logging.*``),
dataloader workers, CPU threads and where the vLLM server listens. Added to it: ``model.files``
(a digest of the names, sizes and modification times of a local checkpoint's files) and
``data.content`` (a sha256 of the training and held-out files' contents). ``recipe_hash`` is the
sha256 of the whole identity. A directory written before identities were recorded is compared on
its ``recipe.resolved.yaml`` (without the two digests), then gets its ``identity.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from unified.config import from_dict, to_dict
from unified.store import IDENTITY_FILE, WEIGHT_FILES, content_fingerprint, files_fingerprint, flatten_identity, \
    identity_differences, read_identity, write_json_atomic
from unified.warmup.config import WarmupConfig
from unified.config import load_config
from unified.inference.spec import parse_spec
from unified.rewards.entries import legacy_entries

RESUME_ANYWAY_FLAG = "--resume-anyway"
NOT_IDENTITY = ("output_dir", "resume", "train.max_steps", "train.save_steps", "train.save_total_limit",
                "train.logging_steps", "train.dataloader_num_workers", "logging.", "generation.cpu_threads",
                "generation.vllm_server_host", "generation.vllm_server_port", "generation.vllm_server_timeout_s",
                "launch.main_process_port")
NOT_REWARD_IDENTITY = ("cache_dir", "judge_max_concurrency", "judge_timeout_s", "judge_max_retries")
"""Options of a reward entry that do not change what is trained (``rewards.NAME.KEY``)."""
_LEGACY_SECTIONS = ("rewards.", "shaping.")


class WarmupIdentityMismatch(ValueError):
    """A rerun of another recipe on an output directory that holds a run (one line)."""


def _is_identity_key(key: str) -> bool:
    return not any(key == k or (k.endswith(".") and key.startswith(k)) for k in NOT_IDENTITY)


def _reward_fields(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``rewards.NAME.KEY`` for each entry (the keys ``--set`` uses), without those of :data:`NOT_REWARD_IDENTITY`."""
    return {f"rewards.{e['name']}.{k}": v for e in entries for k, v in flatten_identity(e).items()
            if k != "name" and k not in NOT_REWARD_IDENTITY}


def recipe_fields(cfg: WarmupConfig) -> dict[str, Any]:
    """The flat keys of the resolved recipe that define the run (module docstring)."""
    data = to_dict(cfg)
    entries = data.pop("rewards")
    return {**{k: v for k, v in flatten_identity(data).items() if _is_identity_key(k)}, **_reward_fields(entries)}


def _upgrade_recorded(fields: dict[str, Any]) -> dict[str, Any]:
    """A recorded identity of the older rewards form (``rewards.rubric_weight``, ``shaping.*``, ...) in
    today's keys (``rewards.rubric.weight``, ``rewards.repetition.weight``, ...), so a rerun compares them."""
    if not any(k.startswith("shaping.") or k in ("rewards.rubric_weight", "rewards.rule_weight") for k in fields):
        return fields
    sections: dict[str, dict[str, Any]] = {"rewards.": {}, "shaping.": {}}
    rest = {}
    for key, value in fields.items():
        prefix = next((p for p in _LEGACY_SECTIONS if key.startswith(p)), None)
        if prefix is None:
            rest[key] = value
        else:
            sections[prefix][key[len(prefix):]] = value
    entries = from_dict(WarmupConfig, {"rewards": legacy_entries(sections["rewards."], sections["shaping."])}).rewards
    return {**rest, **_reward_fields(to_dict(entries))}


def warmup_identity(cfg: WarmupConfig) -> dict[str, Any]:
    """``fields`` (recipe keys + ``model.files`` + ``data.content``) and ``recipe_hash``."""
    fields = recipe_fields(cfg)
    try:
        spec = parse_spec(cfg.model.name_or_path)
        if spec.kind in ("local", "gguf"):
            fields["model.name_or_path"] = str(Path(spec.target).resolve())
            fields["model.files"] = files_fingerprint(spec.target, WEIGHT_FILES)
    except (ValueError, FileNotFoundError):  # reported by unified.warmup.preflight
        pass
    data = [p for p in [*cfg.data.train, *cfg.data.heldout] if Path(p).exists()]
    fields["data.content"] = content_fingerprint(data)
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {"fields": fields, "recipe_hash": digest}


def _has_run(out: Path) -> bool:
    return out.is_dir() and (any(p.is_dir() for p in out.glob("checkpoint-*")) or (out / "final").is_dir())


def _recorded(out: Path) -> dict[str, Any] | None:
    def from_resolved_recipe() -> dict[str, Any]:  # an older directory: without the digests it did not record
        fields = recipe_fields(load_config(WarmupConfig, out / "recipe.resolved.yaml"))
        if fields.get("model.name_or_path") and Path(str(fields["model.name_or_path"])).is_dir():
            fields["model.name_or_path"] = str(Path(str(fields["model.name_or_path"])).resolve())
        return {"fields": fields}

    record = read_identity(out, from_resolved_recipe)
    if record and isinstance(record.get("fields"), dict):
        try:
            record["fields"] = _upgrade_recorded(record["fields"])
        except ValueError:  # recorded reward settings this version cannot read: compared as they are
            pass
    return record


def check_output_dir(cfg: WarmupConfig, *, resume_anyway: bool = False) -> list[str]:
    """Raise :class:`WarmupIdentityMismatch` when ``cfg.output_dir`` holds a run of another recipe
    (unless ``resume_anyway``); returns the differences (empty if none). Writes nothing."""
    out = Path(cfg.output_dir)
    recorded = _recorded(out) if _has_run(out) else None
    if not recorded:
        return []
    diffs = identity_differences(recorded.get("fields", {}), warmup_identity(cfg)["fields"])
    if diffs and not resume_anyway:
        raise WarmupIdentityMismatch(
            f"--output-dir {out} holds a run of another recipe ({'; '.join(diffs)}): give a new --output-dir, "
            f"or rerun with {RESUME_ANYWAY_FLAG} to continue its checkpoint under this recipe")
    return diffs


def record_output_dir(cfg: WarmupConfig, accepted: list[str] | None = None) -> None:
    """Write ``identity.json`` (the main process only: ``RANK`` unset or 0)."""
    if os.environ.get("RANK", "0") != "0":
        return
    out = Path(cfg.output_dir)
    record = {**warmup_identity(cfg), "recorded_at": time.time()}
    previous = _recorded(out) or {}
    history = list(previous.get("accepted_differences", []))
    if accepted:
        history.append({"at": time.time(), "differences": accepted})
    if history:
        record["accepted_differences"] = history
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / IDENTITY_FILE, record)
