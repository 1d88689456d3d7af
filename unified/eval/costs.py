"""The cost table: what each first-hour command took on a measured machine, in one file
(``unified/eval/costs.json``, written by ``python -m measurements.costs``), and what reads it: the docs
(``docs/costs.md`` and the README/quickstart blocks rendered from it), the demo's banner, and the eval's
plan line (:func:`estimate_line`). Nothing else states a cost.

Each row: ``name``, ``command``, ``wall_s``, ``cpu_s`` (user + system of the command and its children),
``peak_rss_gib`` (the largest process), ``peak_tree_rss_gib`` (the largest sum over the command's process
tree, servers it started included: what the machine must hold; None where not sampled), ``disk_mb`` (what it added under its output), ``load`` (the 1-minute
load average before and after: the machine is shared, so a wall time is an upper bound), ``measured_at``,
``source`` (``measurements/costs.py`` or where an older figure came from), ``note``; a row not measured has
``wall_s`` None and says why in ``note``. ``per_episode``: mean wall seconds of one episode per benchmark
with the model and budgets it ran under, for estimates. ``machine``: CPUs, memory, CPU model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COSTS_FILE = Path(__file__).with_name("costs.json")


@dataclass
class CostRow:
    name: str
    command: str
    wall_s: float | None = None
    cpu_s: float | None = None
    peak_rss_gib: float | None = None
    peak_tree_rss_gib: float | None = None
    disk_mb: float | None = None
    load: list[float] = field(default_factory=list)
    measured_at: str = ""
    source: str = "measurements/costs.py"
    note: str = ""
    exit_status: int | None = None
    finished: bool = True
    """False: stopped before it ended (``wall_s`` is when it was stopped)."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    """A command measured several times (``measurements.costs --repeat N``): each run's ``wall_s``, ``cpu_s``,
    ``peak_rss_gib``, ``peak_tree_rss_gib``, ``load`` and ``exit_status``; the row's own figures are then the
    largest of the runs (what to plan for), and the table shows min / median / max."""


def spread(values: list[float]) -> tuple[float, float, float]:
    """(min, median, max) of ``values`` (the median of an even count: the mean of the middle two)."""
    ordered = sorted(values)
    n = len(ordered)
    middle = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return ordered[0], middle, ordered[-1]


def _range(values: list[float], show) -> str:
    low, mid, high = spread(values)
    return f"{show(low)} / {show(mid)} / {show(high)}"


def read_costs(path: str | Path = COSTS_FILE) -> dict[str, Any]:
    """The table as stored (``{}`` when the file is missing or unreadable: nothing is claimed then)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cost_rows(table: dict[str, Any] | None = None) -> dict[str, CostRow]:
    table = read_costs() if table is None else table
    return {r["name"]: CostRow(**r) for r in table.get("rows", [])}


def duration(seconds: float | None) -> str:
    """``1234`` -> ``20 min 34 s``; None -> ``not measured``."""
    if seconds is None:
        return "not measured"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"


def row_cells(row: CostRow) -> list[str]:
    if len(row.runs) > 1:
        return _repeated_cells(row)
    load = "–".join(f"{x:.1f}" for x in row.load) if row.load else "?"
    wall = duration(row.wall_s) if row.finished else f"> {duration(row.wall_s)} (stopped unfinished)"
    return [f"`{row.command}`", wall,
            "—" if row.cpu_s is None else duration(row.cpu_s),
            _memory(row),
            _size(row.disk_mb),
            load, row.measured_at[:10] or "?",
            (row.note + (f" ({row.source})" if row.source and row.source != "measurements/costs.py" else "")).strip()]


def _repeated_cells(row: CostRow) -> list[str]:
    """A row of several runs: wall, CPU time and the tree's peak as min / median / max, each run's load."""
    def figures(key: str) -> list[float]:
        return [r[key] for r in row.runs if r.get(key) is not None]

    gib = lambda x: f"{x:.2f}"  # noqa: E731
    walls, cpus, trees, largest = figures("wall_s"), figures("cpu_s"), figures("peak_tree_rss_gib"), \
        figures("peak_rss_gib")
    memory = ("—" if not largest else
              (f"{_range(trees, gib)} GiB in all" if trees else "") +
              (f" ({_range(largest, gib)} GiB the largest process)" if trees else f"{_range(largest, gib)} GiB"))
    loads = ", ".join("–".join(f"{x:.1f}" for x in r.get("load") or []) or "?" for r in row.runs)
    return [f"`{row.command}`", f"{_range(walls, duration)} (min / median / max of {len(row.runs)} runs)",
            _range(cpus, duration) if cpus else "—", memory.strip(), _size(row.disk_mb), loads,
            row.measured_at[:10] or "?",
            (row.note + (f" ({row.source})" if row.source and row.source != "measurements/costs.py" else "")).strip()]


def _memory(row: CostRow) -> str:
    if row.peak_rss_gib is None:
        return "—"
    largest = f"{row.peak_rss_gib:.2f} GiB"
    if row.peak_tree_rss_gib is None or row.peak_tree_rss_gib <= row.peak_rss_gib + 0.05:
        return largest
    return f"{row.peak_tree_rss_gib:.2f} GiB in all ({largest} the largest process)"


def _size(mb: float | None) -> str:
    if mb is None:
        return "—"
    if mb >= 1024:
        return f"{mb / 1024:.1f} GB"
    return f"{mb:.0f} MB" if mb >= 1 else f"{mb * 1024:.0f} KB"


def render_table(names: list[str] | None = None, table: dict[str, Any] | None = None) -> str:
    """The markdown table of the rows ``names`` (default: all), with the machine line above it."""
    table = read_costs() if table is None else table
    rows = cost_rows(table)
    machine = table.get("machine") or {}
    head = (f"Measured on {machine.get('cpus', '?')} CPUs ({machine.get('cpu_model', '?')}), "
            f"{machine.get('memory_gib', '?')} GiB, shared with other jobs: load is the 1-minute load average "
            "before–after each command, so wall times are upper bounds. Source: `unified/eval/costs.json` "
            "(`python -m measurements.costs`).")
    lines = [head, "", "| command | wall | CPU time | peak RSS | disk | load | date | note |",
             "|---|---|---|---|---|---|---|---|"]
    for name in names or list(rows):
        if name in rows:
            lines.append("| " + " | ".join(row_cells(rows[name])) + " |")
    return "\n".join(lines)


def episode_seconds(benchmark: str, table: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The measured mean wall seconds of one episode of ``benchmark`` and what it ran under, or None."""
    table = read_costs() if table is None else table
    return (table.get("per_episode") or {}).get(benchmark)


def estimate_line(episodes: dict[str, int], *, model: str, max_new_tokens: int, max_turns: int,
                  table: dict[str, Any] | None = None) -> str:
    """``estimate: ...`` for a plan of ``episodes`` per benchmark, from the measured seconds per episode
    of each benchmark (scaled by nothing: a figure measured under other budgets or another model is
    named as such). Benchmarks with no measured figure are listed as not estimated."""
    table = read_costs() if table is None else table
    total, parts, missing = 0.0, [], []
    for name, n in episodes.items():
        if not n:
            continue
        figure = episode_seconds(name, table)
        if figure is None:
            missing.append(name)
            continue
        total += n * figure["seconds"]
        same = (figure.get("model") == model and figure.get("max_new_tokens") == max_new_tokens
                and figure.get("max_turns") == max_turns)
        parts.append(f"{name} {n} x {figure['seconds']:.0f} s" + ("" if same else
                     f" (measured with {figure.get('model')}, {figure.get('max_new_tokens')} tokens a call, "
                     f"{figure.get('max_turns')} turns)"))
    machine = (table.get("machine") or {}).get("cpus", "?")
    text = (f"estimate: about {duration(total)} of episodes on a {machine}-CPU machine like the cost table's "
            f"({'; '.join(parts)}), plus loading the model" if parts else "estimate: none")
    if missing:
        text += f"; not measured: {', '.join(missing)} (no estimate for them)"
    return text + " (docs/costs.md)"
