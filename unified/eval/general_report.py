"""The general suite in ``summary.json`` / ``summary.md`` and in ``--compare RUN_A RUN_B``.

``summary.json`` gets::

    "general": {"model": ..., "settings": {...lm-eval options...},
                "tasks": {TASK: {"status": "ok"|"skipped"|"error"|"not run", "metrics": [
                    {"name": "acc", "filter": "none", "value": 0.41, "stderr": 0.02, ...}],
                    "subtasks": {...}, "n_samples": ..., "seconds": ..., "reason", "how_to_fix",
                    "outputs": [lm-eval's own files, relative to the run directory]}}}

Values and standard errors are lm-eval's own (its scale: 0..1 for accuracies). In ``--compare``
the delta's standard error is ``sqrt(se_A^2 + se_B^2)``, which treats the two runs as independent
samples; both runs score the same documents, so the paired standard error is usually smaller
(lm-eval's per-sample files beside the results allow it).
"""

from __future__ import annotations

import math
from typing import Any

from unified.eval.records import GeneralSection


def _num(value: Any, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _with_se(metric: dict[str, Any] | None) -> str:
    if not metric or metric.get("value") is None:
        return "—"
    se = metric.get("stderr")
    return _num(metric["value"]) + ("" if se is None else f" ± {_num(se)}")


def _status_text(entry: dict[str, Any]) -> str:
    status = entry.get("status", "")
    if status == "ok":
        return "ok"
    text = f"{status}: {entry.get('reason', '')}".rstrip(": ")
    if entry.get("how_to_fix") and status == "skipped":
        text += f" ({entry['how_to_fix']})"
    return text.replace("|", "\\|").replace("\n", " ")


def general_markdown(general: GeneralSection | None) -> list[str]:
    """Markdown lines of the general section (empty when the run has none)."""
    if general is None:
        return []
    settings = general.settings
    shown = ", ".join(f"{k}={v}" for k, v in settings.items() if v is not None)
    lines = ["## general (lm-evaluation-harness)", "", f"lm-eval settings: {shown}", "",
             "| task | metric | filter | value ± stderr | n | seconds | status |", "|---|---|---|---:|---:|---:|---|"]
    for task, entry in general.tasks.items():
        metrics = entry.get("metrics") or []
        n, seconds = entry.get("n_samples"), entry.get("seconds")
        timing = _num(seconds, 1) if entry.get("status") == "ok" else ""
        if not metrics:
            lines.append(f"| {task} | | | — | {n or ''} | {timing} | {_status_text(entry)} |")
        for i, metric in enumerate(metrics):
            lines.append(f"| {task} | {metric['name']} | {metric['filter']} | {_with_se(metric)} | "
                         f"{n if i == 0 and n else ''} | {timing if i == 0 else ''} | "
                         f"{_status_text(entry) if i == 0 else ''} |")
    lines.append("")
    for task, entry in general.tasks.items():
        subtasks = entry.get("subtasks") or {}
        if not subtasks:
            continue
        lines += [f"### general: {task} subtasks", "", "| subtask | metric | value ± stderr |", "|---|---|---:|"]
        for name, metrics in subtasks.items():
            for metric in metrics:
                label = metric["name"] + ("" if metric["filter"] == "none" else f" ({metric['filter']})")
                lines.append(f"| {name} | {label} | {_with_se(metric)} |")
        lines.append("")
    return lines


def _metric_rows(general: GeneralSection | None) -> dict[tuple[str, str, str], dict[str, Any]]:
    rows = {}
    for task, entry in (general.tasks if general else {}).items():
        for metric in entry.get("metrics") or []:
            rows[(task, metric["name"], metric["filter"])] = metric
        if not entry.get("metrics"):
            rows[(task, "", "")] = {"status": entry.get("status")}
    return rows


def general_compare(a: GeneralSection | None, b: GeneralSection | None, model_a: str, model_b: str) -> list[str]:
    """Delta table of the general suite of two runs (B - A), with lm-eval's standard errors."""
    rows_a, rows_b = _metric_rows(a), _metric_rows(b)
    if not rows_a and not rows_b:
        return []
    lines = ["", "general (lm-evaluation-harness): value ± lm-eval's stderr; Δ ± sqrt(se_A² + se_B²)", "",
             f"| task | metric | A: {model_a} | B: {model_b} | Δ (B−A) |", "|---|---|---:|---:|---:|"]
    for key in dict.fromkeys([*rows_a, *rows_b]):
        task, name, filt = key
        ma, mb = rows_a.get(key), rows_b.get(key)
        label = name + ("" if filt in ("none", "") else f" ({filt})")
        cell_a = _with_se(ma) if ma and "value" in ma else (ma or {}).get("status") or "—"
        cell_b = _with_se(mb) if mb and "value" in mb else (mb or {}).get("status") or "—"
        delta = ""
        if ma and mb and ma.get("value") is not None and mb.get("value") is not None:
            delta = f"{mb['value'] - ma['value']:+.4f}"
            if ma.get("stderr") is not None and mb.get("stderr") is not None:
                delta += f" ± {math.sqrt(ma['stderr'] ** 2 + mb['stderr'] ** 2):.4f}"
        lines.append(f"| {task} | {label} | {cell_a} | {cell_b} | {delta} |")
    return lines
