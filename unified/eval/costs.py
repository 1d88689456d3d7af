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
    settings: dict[str, Any] = field(default_factory=dict)
    """An eval row's plan: ``episodes`` per benchmark and the :class:`EpisodeSettings` it ran under (``model``,
    ``engine``, ``max_new_tokens``, ``thinking``, ``max_turns``, ``prompting``): what the estimator is checked on."""
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
    if trees and largest and max(trees) <= max(largest) + 0.05:  # the tree is the one process (sampled lower)
        trees = []
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


@dataclass(frozen=True)
class EpisodeSettings:
    """What an episode's time depends on: the policy's model and engine, its budgets and prompting module (the
    plan's resolved settings of one benchmark)."""

    model: str = "embedded"
    engine: str | None = None
    """``hf`` (in-process), ``vllm`` (a local vLLM server), ``openai`` (an endpoint); None: not known (hf's rate)."""
    max_new_tokens: int = 512
    thinking: bool = True
    max_turns: int = 40
    prompting: str = "act"
    max_episode_tokens: int = 32768
    max_seconds: float = 3600.0
    judge: str | None = None
    """The benchmark's judge / simulated user spec (None: the embedded default, on the policy's engine)."""


@dataclass
class EpisodeEstimate:
    """Seconds of one episode: the policy's calls, and the judge / grader / simulated user's share."""

    policy_s: float
    side_s: float
    calls: float
    tokens_per_call: float
    tokens_per_s: float
    side: str = ""

    @property
    def seconds(self) -> float:
        return self.policy_s + self.side_s


class NoMeasurement(ValueError):
    """The cost table measured nothing like this setting (the message says what)."""


def estimator(table: dict[str, Any] | None = None) -> dict[str, Any]:
    table = read_costs() if table is None else table
    return table.get("estimator") or {}


def episode_estimate(benchmark: str, settings: EpisodeSettings, table: dict[str, Any] | None = None) -> EpisodeEstimate:
    """One episode of ``benchmark`` under ``settings``, from the cost table's ``estimator`` section (calibrated on
    its measured eval rows; docs/costs.md says how)::

        calls     = min(max_turns, calls_b x calls_p)        calls_b: the policy calls an episode of b uses
                                                             (null: every turn); calls_p: the prompting module's
        tokens    = min(max_new_tokens x fill, max_episode_tokens / calls)
                                                             fill: thinking on or off (the prompting's own if set)
        policy_s  = min(calls x tokens / rate(engine), max_seconds)
        side_s    = grader: min(timeout, judge_tokens / rate(engine)) + user: turns x user_tokens / rate(engine)

    Raises :class:`NoMeasurement` for a benchmark, engine or prompting module the table has no figure for."""
    est = estimator(table)
    bench = (est.get("benchmarks") or {}).get(benchmark)
    if bench is None:
        raise NoMeasurement(f"{benchmark}: no measurement for this setting (the cost table has no episode of it)")
    engine = settings.engine or "hf"
    rates = est.get("tokens_per_s") or {}
    if settings.model == "gold":
        raise NoMeasurement(f"{benchmark}: no measurement for this setting (--model gold replays, it generates "
                            "nothing)")
    if engine not in rates:
        raise NoMeasurement(f"{benchmark}: no measurement for this setting (engine {engine}: its speed is the "
                            "server's)")
    prompting = (est.get("prompting") or {}).get(settings.prompting)
    if prompting is None:
        raise NoMeasurement(f"{benchmark}: no measurement for this setting (prompting {settings.prompting})")
    rate = float(rates[engine])
    fills = est.get("fill") or {}
    fill = prompting.get("fill", fills.get("thinking" if settings.thinking else "no_thinking", 1.0))
    cap = bench.get("calls")
    calls = float(settings.max_turns) if cap is None else min(float(settings.max_turns),
                                                                cap * prompting.get("calls", 1.0))
    tokens = min(settings.max_new_tokens * fill, settings.max_episode_tokens / max(calls, 1.0))
    policy = min(calls * tokens / rate, settings.max_seconds)
    side, words = 0.0, []
    grader = bench.get("grader")
    if grader:
        if settings.judge and settings.judge.startswith("openai:"):
            words.append("its grader's judge is an endpoint: not estimated")
        else:
            seconds = min(float(grader["timeout_s"]), grader["judge_tokens"] / rate)
            side += seconds
            words.append(f"grader's judge {duration(seconds)}" + (" (its timeout)" if seconds >= grader["timeout_s"]
                                                                   else ""))
    user = bench.get("user_tokens_per_turn")
    if user:
        seconds = calls * user / rate
        side += seconds
        words.append(f"simulated user {duration(seconds)}")
    return EpisodeEstimate(policy_s=policy, side_s=side, calls=calls, tokens_per_call=tokens, tokens_per_s=rate,
                           side=", ".join(words))


def estimate_seconds(episodes: dict[str, int], settings: dict[str, EpisodeSettings] | EpisodeSettings,
                     table: dict[str, Any] | None = None) -> tuple[float, list[str], list[str]]:
    """(seconds of the whole run, one phrase per estimated benchmark, one per benchmark with no measurement) for
    ``episodes`` per benchmark, episodes one after another, plus loading (the estimator's ``load_s``)."""
    table = read_costs() if table is None else table
    total, parts, missing = 0.0, [], []
    for name, n in episodes.items():
        if not n:
            continue
        setting = settings if isinstance(settings, EpisodeSettings) else settings.get(name, EpisodeSettings())
        try:
            e = episode_estimate(name, setting, table)
        except NoMeasurement as exc:
            missing.append(str(exc))
            continue
        total += n * e.seconds
        policy = (f"policy {e.calls:g} calls x {e.tokens_per_call:.0f} tokens at {e.tokens_per_s:g} tokens/s = "
                  f"{duration(e.policy_s)}")
        parts.append(f"{name} {n} x {duration(e.seconds)} ({policy}" + (f"; {e.side}" if e.side else "") + ")")
    if parts:
        total += float(estimator(table).get("load_s", 0.0))
    return total, parts, missing


def row_estimate(row: CostRow, table: dict[str, Any] | None = None) -> tuple[float, list[str], list[str]]:
    """:func:`estimate_seconds` of an eval row's recorded ``settings`` (what it is checked against)."""
    given = dict(row.settings)
    episodes = given.pop("episodes")
    return estimate_seconds(episodes, EpisodeSettings(**given), table)


def estimate_line(episodes: dict[str, int], settings: dict[str, EpisodeSettings] | EpisodeSettings,
                  table: dict[str, Any] | None = None) -> str:
    """``estimate: ...`` for a plan of ``episodes`` per benchmark under its ``settings``
    (:func:`episode_estimate`, the policy's calls and the judge / grader / simulated user's time); a benchmark
    with nothing measured like its setting says "no measurement for this setting"."""
    table = read_costs() if table is None else table
    total, parts, missing = estimate_seconds(episodes, settings, table)
    machine = (table.get("machine") or {}).get("cpus", "?")
    load = float(estimator(table).get("load_s", 0.0))
    text = (f"estimate: about {duration(total)} on a {machine}-CPU machine like the cost table's, for a model the "
            f"size of the embedded one (loading {duration(load)}; {'; '.join(parts)}; episodes counted one after "
            "another, --max-in-flight may overlap some)" if parts else "estimate: none")
    if missing:
        text += "; " + "; ".join(missing)
    return text + " (docs/costs.md)"
