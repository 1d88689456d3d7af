"""Summaries of a run (``summary.json`` + ``summary.md``) and ``--compare RUN_A RUN_B``.

``summary.json``::

    {"model": ..., "prompting": ..., "updated_at": ...,
     "benchmarks": {NAME: {"status": "ok"|"skipped"|"error", "aggregate": {"score": ..., "metric": ...},
                           "tasks", "runs", "results", "errors", "skipped", "reason", "how_to_fix"}},
     "suites": {SUITE: {NAME: score or null}}}

The markdown has one table per suite (like the paper's table) and, per benchmark, its
group/category breakdown when the aggregate has one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from unified.eval.adapter import SUITES
from unified.eval.general_report import attach_general, general_compare, general_markdown
from unified.eval.store import write_json_atomic, write_text_atomic


def _score(entry: dict[str, Any]) -> float | None:
    if entry.get("status") != "ok":
        return None
    value = (entry.get("aggregate") or {}).get("score")
    return float(value) if isinstance(value, (int, float)) else None


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def build_summary(cfg: Any, benchmarks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    suites: dict[str, dict[str, float | None]] = {}
    for suite in ("in_domain", "ood"):
        members = [b for b in SUITES[suite] if b in benchmarks]
        if members:
            suites[suite] = {b: _score(benchmarks[b]) for b in members}
    others = [b for b in benchmarks if b not in SUITES["all"]]
    if others:
        suites["other"] = {b: _score(benchmarks[b]) for b in others}
    return {"model": getattr(cfg, "model", ""), "prompting": getattr(cfg, "prompting", ""),
            "updated_at": time.time(), "benchmarks": benchmarks, "suites": suites}


def render_markdown(summary: dict[str, Any]) -> str:
    lines = [f"# Eval run: model `{summary.get('model')}`, prompting `{summary.get('prompting')}`", ""]
    benchmarks = summary["benchmarks"]
    for suite, members in summary["suites"].items():
        lines += [f"## {suite}", "", "| benchmark | score | metric | results | errors | status |",
                  "|---|---:|---|---:|---:|---|"]
        for name in members:
            entry = benchmarks[name]
            agg = entry.get("aggregate") or {}
            status = entry.get("status", "")
            if status != "ok":
                status = f"{status}: {entry.get('reason', '')}"
                if entry.get("how_to_fix"):
                    status += f" ({entry['how_to_fix']})"
            lines.append(f"| {name} | {_fmt(_score(entry))} | {agg.get('metric', '')} | {entry.get('results', 0)} | "
                         f"{entry.get('errors', 0)} | {status} |")
        lines.append("")
    for name, entry in benchmarks.items():
        agg = entry.get("aggregate") or {}
        for key in ("groups", "categories"):
            table = agg.get(key)
            if isinstance(table, dict) and table:
                lines += [f"### {name}: {key}", "", "| name | accuracy | n |", "|---|---:|---:|"]
                for sub, value in table.items():
                    if isinstance(value, dict):
                        lines.append(f"| {sub} | {_fmt(value.get('accuracy'))} | {_fmt(value.get('n', ''))} |")
                    else:
                        lines.append(f"| {sub} | {_fmt(value)} | |")
                lines.append("")
    lines += general_markdown(summary)
    return "\n".join(lines)


def write_summary(out: str | Path, cfg: Any, benchmarks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    summary = build_summary(cfg, benchmarks)
    attach_general(summary, out, cfg)  # the lm-eval general suite, when the run asked for it
    write_json_atomic(Path(out) / "summary.json", summary)
    write_text_atomic(Path(out) / "summary.md", render_markdown(summary))
    return summary


def load_summary(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no summary (is {run_dir} an eval run directory?)")
    return json.loads(path.read_text(encoding="utf-8"))


def compare(run_a: str | Path, run_b: str | Path) -> str:
    """Markdown delta table of two runs (B - A), per benchmark and per suite mean."""
    a, b = load_summary(run_a), load_summary(run_b)
    names = list(dict.fromkeys([*a["benchmarks"], *b["benchmarks"]]))
    lines = [f"| suite | benchmark | A: {a.get('model')} | B: {b.get('model')} | Δ (B−A) |", "|---|---|---:|---:|---:|"]
    for suite in ("in_domain", "ood", "other"):
        members = [n for n in names if (n in SUITES.get(suite, [])) or (suite == "other" and n not in SUITES["all"])]
        for name in members:
            sa, sb = _score(a["benchmarks"].get(name, {})), _score(b["benchmarks"].get(name, {}))
            delta = sb - sa if sa is not None and sb is not None else None
            lines.append(f"| {suite} | {name} | {_fmt(sa)} | {_fmt(sb)} | {'' if delta is None else f'{delta:+.2f}'} |")
    lines += general_compare(a, b)
    return "\n".join(lines)
