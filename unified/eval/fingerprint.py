"""What two eval runs must share for the delta between them to be the effect of the weights: the run's
fingerprint, read back from its records, and the differences ``--compare`` names.

The fingerprint of a run directory is one flat dict of its settings besides the model:

- from ``identity.json`` (:mod:`unified.eval.identity`): ``backend``, ``prompting``, ``prompting_options``,
  ``split``, every ``sampling.*`` (``max_new_tokens``, ``temperature``, ``top_p``, ``thinking``, ``seed``)
  and ``limits.*`` key as given;
- from ``plan.json`` (:mod:`unified.eval.plan`): the selection (``limit``, ``task_ids``, ``runs``), and per
  benchmark ``NAME.trials``, ``NAME.tasks`` (how many), ``NAME.limits.*`` (the turn / token / time budgets
  its episodes ran under, after the adapter's protocol), ``NAME.settings.*`` (the adapter's resolved
  settings over the ones given; absolute paths left out: the data is compared by its digest), ``NAME.judge`` (judge and
  simulated user as resolved, environment variables included) and ``NAME.data`` (the digest of the
  selected tasks, :func:`unified.eval.plan.tasks_digest`).

``model``, ``model.files`` and ``model.weights`` are what a comparison compares, so they are not part of it
(``--compare`` says IDENTICAL WEIGHTS from ``model.weights``). A key that only one side recorded (an older
run directory, a benchmark only one side planned) is named too: what it was on the other side is unknown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unified.config import ConfigError, to_dict
from unified.eval.plan import read_plan
from unified.store import flatten_identity, read_identity

MODEL_KEYS = ("model", "model.files", "model.weights")
SELECTION_KEYS = ("limit", "task_ids", "runs", "shard")
IMPLIED_KEYS = ("limit", "runs")
"""Recorded, but not compared as such: what they select is compared per benchmark (``NAME.tasks``, ``NAME.trials``,
``NAME.data``), so ``--runs`` unset (the protocol's 1) and ``--runs 1`` are no difference. Likewise the run-wide
``limits.*`` where both plans record each benchmark's limits (a benchmark's protocol may override them)."""


def run_fingerprint(run_dir: str | Path) -> dict[str, Any]:
    """The flat fingerprint of a run directory (module docstring); ``{}`` when it records none."""
    run = Path(run_dir)
    flat: dict[str, Any] = {}
    identity = read_identity(run, lambda: None) or {}
    flat.update({k: v for k, v in (identity.get("fields") or {}).items() if k not in MODEL_KEYS})
    try:
        plan = read_plan(run)
    except (FileNotFoundError, ConfigError):
        return flat
    for key in SELECTION_KEYS:
        flat[key] = getattr(plan.config, key, None)
    for key, value in flatten_identity({"sampling": to_dict(plan.config.sampling),
                                        "limits": to_dict(plan.config.limits)}).items():
        flat.setdefault(key, value)  # a run directory without identity.json: its plan's config
    flat.setdefault("backend", plan.config.backend)
    flat.setdefault("prompting", plan.config.prompting)
    for b in plan.benchmarks:
        if b.status != "run":
            continue
        flat[f"{b.name}.trials"] = b.runs
        flat[f"{b.name}.tasks"] = len(b.tasks)
        if b.limits is not None:
            flat.update(flatten_identity(to_dict(b.limits), f"{b.name}.limits."))
        recorded = identity.get("benchmarks") or {}  # an identity from before one name per benchmark: module:Class
        given = recorded.get(b.name) or recorded.get(b.adapter_path or b.name) or {}  # as given, where the adapter resolves none
        resolved = {**flatten_identity(given, f"{b.name}.settings."), **flatten_identity(b.settings, f"{b.name}.settings.")}
        settings = {k: v for k, v in resolved.items() if not (isinstance(v, str) and v.startswith("/"))}
        flat.update(settings)
        flat[f"{b.name}.judge"] = b.judge
        flat[f"{b.name}.data"] = b.data_digest
    return flat


@dataclass(frozen=True)
class SettingDifference:
    """One key whose value differs between two runs; ``benchmark`` None: a run-wide setting."""

    key: str
    a: Any
    b: Any
    benchmark: str | None = None

    def line(self) -> str:
        return f"{self.key}: A {_show(self.a)} vs B {_show(self.b)}"


_MISSING = object()


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(not recorded)"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def planned_directories(run_dir: str | Path) -> dict[str, str]:
    """``{benchmark name as asked for: its records' directory}`` of a run's plan (``{}`` without one): the
    records (``results.jsonl``) name a benchmark by its directory, the plan and the summary by its name."""
    try:
        return {b.name: b.directory for b in read_plan(run_dir).benchmarks}
    except (FileNotFoundError, ConfigError):
        return {}


def setting_differences(run_a: str | Path, run_b: str | Path,
                        benchmarks: list[str] | None = None) -> list[SettingDifference]:
    """Every fingerprint key that differs between two runs, run-wide keys first. Per-benchmark keys are
    compared for ``benchmarks`` (default: every benchmark either plan names) that both runs planned (a
    benchmark on one side only is the table's business)."""
    fa, fb = run_fingerprint(run_a), run_fingerprint(run_b)
    if not fa or not fb:
        return []
    if benchmarks is None:
        benchmarks = list(dict.fromkeys([*planned_directories(run_a), *planned_directories(run_b)]))
    scoped = {name: [k for k in {*fa, *fb} if k.startswith(f"{name}.")] for name in benchmarks}
    owner = {k: name for name, keys in scoped.items() for k in keys}
    both_planned = {name for name in benchmarks if f"{name}.trials" in fa and f"{name}.trials" in fb}
    out = []
    for key in sorted({*fa, *fb}, key=lambda k: (k in owner, owner.get(k, ""), k)):
        name = owner.get(key)
        if key in IMPLIED_KEYS or (key.startswith("limits.") and both_planned):
            continue  # compared where they act: each benchmark's own limits (its protocol may override them)
        if name is not None and name not in both_planned:
            continue
        if name is None and "." in key and key.split(".", 1)[0] not in ("sampling", "limits", "prompting_options"):
            continue  # a benchmark's key that is not in this comparison
        va, vb = fa.get(key, _MISSING), fb.get(key, _MISSING)
        if va is _MISSING or vb is _MISSING or json.dumps(va, sort_keys=True, default=str) != \
                json.dumps(vb, sort_keys=True, default=str):
            out.append(SettingDifference(key, va, vb, name))
    return out
