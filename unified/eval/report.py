"""Summaries of a run (``summary.json`` + ``summary.md``) and ``--compare RUN_A RUN_B``.

A summary never says more than the run measured. Per benchmark it gives the tasks that ran,
were skipped and errored, a status, and whether the number can be put next to the official
leaderboard / the paper, with the reasons when it cannot.

``summary.json`` is a :class:`unified.eval.records.RunSummary` (written atomically, read back
strictly by :func:`unified.eval.records.load_summary`); its shape::

    {"model": ..., "prompting": ..., "updated_at": ...,
     "benchmarks": {NAME: {
         "status": "ok" | "partial" | "skipped" | "error",
         "aggregate": {"score": ..., "metric": ..., ...},      # the adapter's own aggregate
         "tasks": N,                # scored tasks selected for this run
         "tasks_run": n, "tasks_skipped": n, "tasks_errored": n, "tasks_not_recorded": n,
         "skip_reasons": {REASON: n_tasks}, "error_reasons": {FIRST LINE: n_tasks},
         "tasks_in_benchmark": N or null,   # known when --limit / --task-ids / --split cut it
         "runs": k, "runs_protocol": k,
         "results": n, "errors": n, "skipped": n,     # episodes (results.jsonl lines)
         "outcomes": {"pass": n, "agent_fail": n, "infrastructure_fail": n, "episodes": n},
         "comparable": bool, "not_comparable_because": [str, ...],
         "reason", "how_to_fix", "traceback",           # when the benchmark did not run at all
         "runs_dir", "settings": {...}, "limits": {...},   # where its records are, its Config, its AgentLimits
         "suites": [SUITE, ...], "paper_reference": {"label", "sft", "lwm_rl", "source"}}},  # from the adapter class
     "suites": {SUITE: {NAME: score or null}},
     "general": {...},          # the general suite, when asked for (unified.eval.general_report)
     "shard": {...} | "merged_from": {...}}    # a --shard run / a --merge (unified.eval.summarize.run_kind)

Each benchmark is listed under one suite: the first of the study's (``in_domain``, ``ood``) its
adapter declares, else the first it declares, else ``other``.

Status (per scored task: *skipped* when all its results are skipped, *errored* when one of its
results has ``error`` or ``details["grader_error"]``, *run* when it has every trial and none
errored, *not recorded* when trials are missing):

- ``ok``      every selected task ran;
- ``partial`` some ran, some were skipped, errored or not recorded (the score is shown, marked);
- ``error``   none ran and at least one errored (no score is shown);
- ``skipped`` none ran and none errored, or the benchmark itself could not run (no score).

**Contract for adapters** (read by :func:`benchmark_entry`):

``aggregate(...)["comparable"]: bool``
    True when the adapter's number, on a full run, is computed as the official leaderboard /
    paper computes it. An aggregate that does not say is treated as not comparable ("the
    adapter does not state ..."), so nothing is shown as comparable by default.
``aggregate(...)["not_comparable_because"]: list[str]``
    Why not, one short reason each, e.g. ``"partial: 5 of 300 tasks"``, ``"key missing: web
    search"``, ``"local sandbox instead of Docker"``, ``"simulated search"``, ``"fewer trials
    than the protocol's 3"``.
``EpisodeResult.details["grader_error"]: str``
    A grader that timed out or crashed while the episode's score stands as the benchmark
    gives it (e.g. 0): the task counts as errored in the summary.

The runner adds the generic reasons itself: ``--limit`` / ``--task-ids`` / ``--split`` (partial),
skipped, errored or unrecorded tasks, fewer trials than ``runs_default``, and "nothing ran" when no
episode was scored. ``comparable`` is true only when the adapter says so and no reason, the
adapter's or the runner's, applies; with no scored episode the aggregate's own ``comparable`` is
set false too, so summary.json and ``--compare`` never call an empty run comparable.

Outcomes (:func:`outcome_counts`), per episode not skipped, beside every score: *pass* (the
result passed, or scored in full where the benchmark has no pass flag), *agent fail* (scored and
not passed: the agent's work was judged) and *infrastructure fail* (errored: the environment, an
endpoint, the grader or the harness could not score it; an agent's bad output is scored, never
errored), so that a 0 from a setup timeout is never read as the agent's.

The markdown has one table per suite (score with pass / agent-fail / infra-fail, tasks run / skipped / errored, status, comparable, the
paper's SFT -> +LWM RL numbers beside ours where the adapter declares a ``paper_reference``), the reasons
under it, and per benchmark its group/category breakdown when the aggregate has one.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from unified.benchmarks.discovery import STUDY_SUITES
from unified.eval.general_report import general_compare, general_markdown
from unified.eval.records import (BenchmarkEntry, GeneralSection, RunSummary, ShardRun, load_summary,
                                  write_summary_json)
from unified.eval.shards import SHARDS_FILE
from unified.store import write_text_atomic

__all__ = ["NOT_STATED", "STATUSES", "benchmark_entry", "build_summary", "compare", "load_summary", "outcome_counts",
           "outcomes_cell", "render_markdown", "shorten", "suite_of", "write_summary"]

STATUSES = ("ok", "partial", "skipped", "error")
"""Benchmark statuses: see the module docstring."""

NOT_STATED = "the adapter does not state whether its number is computed as the official one"


def _is_errored(result: Any) -> bool:
    return result.error is not None or bool((result.details or {}).get("grader_error"))


def outcome_counts(results: Iterable[Any]) -> dict[str, int]:
    """Episodes by outcome (module docstring): ``pass``, ``agent_fail``, ``infrastructure_fail`` of ``episodes``."""
    out = {"pass": 0, "agent_fail": 0, "infrastructure_fail": 0, "episodes": 0}
    for r in results:
        if r.skipped is not None:
            continue
        out["episodes"] += 1
        if _is_errored(r):
            out["infrastructure_fail"] += 1
        elif r.passed or (r.passed is None and float(r.score) >= 1.0):
            out["pass"] += 1
        else:
            out["agent_fail"] += 1
    return out


def outcomes_cell(entry: BenchmarkEntry) -> str:
    """``pass / agent-fail / infra-fail of N`` episodes (empty when nothing was recorded)."""
    o = entry.outcomes or {}
    if not o.get("episodes"):
        return ""
    return f"{o['pass']} / {o['agent_fail']} / {o['infrastructure_fail']} of {o['episodes']}"


def _first_line(text: str, width: int = 120) -> str:
    """The line that says what happened: the first one, or a traceback's last (the exception), cut
    at a word boundary with an ellipsis when longer than ``width``."""
    lines = [line for line in str(text).strip().splitlines() if line.strip()] or [""]
    line = (lines[-1] if "Traceback (most recent call last)" in text else lines[0]).strip()
    return shorten(line, width)


def shorten(text: str, width: int) -> str:
    """``text`` cut at the last word boundary that fits ``width`` characters, ``…`` marking the cut."""
    if len(text) <= width:
        return text
    cut = text[:width - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > width // 2 else cut).rstrip(" ,;:") + "…"


def benchmark_entry(*, tasks: Iterable[Any], results: Iterable[Any], runs: int, runs_protocol: int,
                    aggregate: dict[str, Any], tasks_in_benchmark: int | None = None,
                    subset: str | None = None, shard: str | None = None) -> BenchmarkEntry:
    """One benchmark's summary entry: counts by task, status, comparability (module docstring).

    ``tasks``: the scored tasks selected for the run; ``results``: their EpisodeResults (all
    trials); ``tasks_in_benchmark``: how many scored tasks the whole benchmark has, when the
    selection was cut (``--limit``, ``--task-ids``); ``subset``: a description of a ``--split``;
    ``shard``: for a ``--shard I/N`` run, the reason that says so (it is never comparable).
    """
    tasks = list(tasks)
    by_task: dict[str, list[Any]] = {t.id: [] for t in tasks}
    results = [r for r in results if r.task_id in by_task]
    for r in results:
        by_task[r.task_id].append(r)
    run = skipped = errored = missing = 0
    skip_reasons: Counter[str] = Counter()
    error_reasons: Counter[str] = Counter()
    for task in tasks:
        rows = by_task[task.id]
        live = [r for r in rows if r.skipped is None]
        if rows and not live:
            skipped += 1
            skip_reasons[_first_line(rows[0].skipped)] += 1
        elif any(_is_errored(r) for r in live):
            errored += 1
            bad = next(r for r in live if _is_errored(r))
            error_reasons[_first_line(bad.error or f"grader: {bad.details.get('grader_error')}")] += 1
        elif len({r.trial for r in rows}) < runs:
            missing += 1
        else:
            run += 1
    total = len(tasks)
    if total and run == total:
        status = "ok"
    elif run:
        status = "partial"
    elif errored:
        status = "error"
    else:
        status = "skipped"

    reasons: list[str] = []
    if "comparable" not in aggregate:
        reasons.append(NOT_STATED)
    reasons += [str(r) for r in aggregate.get("not_comparable_because") or []]
    if subset:
        reasons.append(f"subset: {subset}")
    if shard:
        reasons.append(shard)
    if tasks_in_benchmark is not None and total < tasks_in_benchmark:
        reasons.append(f"partial: {total} of {tasks_in_benchmark} tasks selected")
    if skipped:
        why = "; ".join(f"{n} {reason}" for reason, n in skip_reasons.most_common(3))
        reasons.append(f"{skipped} of {total} tasks skipped ({why})")
    if errored:
        reasons.append(f"{errored} of {total} tasks errored")
    if missing:
        reasons.append(f"{missing} of {total} tasks have fewer recorded trials than {runs} (interrupted run?)")
    if runs < runs_protocol:
        reasons.append(f"fewer trials than the protocol's {runs_protocol} ({runs})")
    scored_episodes = sum(1 for r in results if r.skipped is None and not _is_errored(r))
    if not scored_episodes:
        reasons.append("nothing ran: no scored episode")
    reasons = list(dict.fromkeys(reasons))
    comparable = bool(aggregate.get("comparable")) and not reasons and status == "ok"
    if aggregate.get("comparable") and not scored_episodes:
        # the adapter's own flag is kept in summary.json: it must not say comparable either
        aggregate = {**aggregate, "comparable": False}
    reason = None
    if status in ("skipped", "error"):
        reason = (f"every task was skipped ({'; '.join(skip_reasons)})" if status == "skipped" and skipped
                  else "no task was selected" if not total and status == "skipped"
                  else f"no task ran: {errored} errored, {skipped} skipped" if status == "error"
                  else "no task has a result yet")
    return BenchmarkEntry(
        status=status, aggregate=dict(aggregate), tasks=total, tasks_run=run, tasks_skipped=skipped,
        tasks_errored=errored, tasks_not_recorded=missing, skip_reasons=dict(skip_reasons),
        error_reasons=dict(error_reasons), tasks_in_benchmark=tasks_in_benchmark, runs=runs,
        runs_protocol=runs_protocol, results=len(results), errors=sum(_is_errored(r) for r in results),
        skipped=sum(r.skipped is not None for r in results), outcomes=outcome_counts(results), comparable=comparable,
        not_comparable_because=reasons, reason=reason)


def _headline_cell(entry: BenchmarkEntry, shown: str) -> str:
    """The score cell named by the adapter's ``headline`` (Claw-Eval: ``Avg@3 x · Pass^3 y``); a benchmark
    with a headline and no score is ``not run (n/a)``, never 0."""
    headline = entry.aggregate.get("headline")
    if not isinstance(headline, dict) or not headline.get("score"):
        return shown
    extra = [(k, v) for k, v in headline.items() if k.startswith("pass^")]
    if entry.score() is None:
        return "not run (" + ", ".join([str(headline["score"]), *(k.capitalize() for k, _ in extra)]) + ": n/a)"
    return f"{headline['score']} {shown}" + "".join(f" · {k.capitalize()} {_fmt(v)}" for k, v in extra)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def ran_comparably(entry: BenchmarkEntry) -> bool:
    """:meth:`BenchmarkEntry.ran_comparably`."""
    return entry.ran_comparably()


def _comparable_cell(entry: BenchmarkEntry) -> str:
    return "yes" if entry.ran_comparably() else "no"


def status_cell(entry: BenchmarkEntry) -> str:
    """The status, with the reason (and how to fix it) when nothing ran."""
    status = entry.status
    if status in ("skipped", "error") and entry.reason:
        status = f"{status}: {entry.reason}"
        if entry.how_to_fix:
            status += f" ({entry.how_to_fix})"
    return status


def counts_cells(entry: BenchmarkEntry) -> tuple[str, str, str]:
    """``run/selected``, skipped and errored tasks (dashes for a benchmark that could not list its tasks)."""
    if entry.tasks_run is None:
        return "—", "—", "—"
    return f"{entry.tasks_run}/{entry.tasks or 0}", str(entry.tasks_skipped or 0), str(entry.tasks_errored or 0)


def suite_of(entry: BenchmarkEntry) -> str:
    """The one suite a benchmark is listed under (module docstring)."""
    declared = [str(s) for s in entry.suites or []]
    return next((s for s in STUDY_SUITES if s in declared), declared[0] if declared else "other")


def _by_suite(benchmarks: dict[str, BenchmarkEntry]) -> dict[str, list[str]]:
    """Suite -> its benchmarks (run order); the study's suites first, ``other`` last."""
    grouped: dict[str, list[str]] = {}
    for name, entry in benchmarks.items():
        grouped.setdefault(suite_of(entry), []).append(name)
    order = [s for s in STUDY_SUITES if s in grouped] + [s for s in grouped if s not in STUDY_SUITES and s != "other"]
    return {s: grouped[s] for s in order + (["other"] if "other" in grouped else [])}


def build_summary(*, model: str, prompting: str, benchmarks: dict[str, BenchmarkEntry],
                  general: GeneralSection | None = None, shard: ShardRun | None = None,
                  merged_from: dict[str, Any] | None = None) -> RunSummary:
    """The run's summary record: the entries as given, the suites' scores computed from them;
    ``shard`` / ``merged_from`` for a shard's or a merge's run (:func:`unified.eval.summarize.run_kind`)."""
    suites = {suite: {b: benchmarks[b].score() for b in members} for suite, members in _by_suite(benchmarks).items()}
    return RunSummary(model=model, prompting=prompting, updated_at=time.time(), benchmarks=dict(benchmarks),
                      suites=suites, general=general, shard=shard, merged_from=merged_from)


def _breakdown_lines(name: str, agg: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for key in ("groups", "categories"):
        table = agg.get(key)
        if not (isinstance(table, dict) and table):
            continue
        lines += [f"### {name}: {key}", "", "| name | accuracy | n | complete |", "|---|---:|---:|---|"]
        for sub, value in table.items():
            if isinstance(value, dict):
                acc = value.get("display_accuracy", value.get("accuracy"))
                size = value.get("size")
                n = _fmt(value.get("n", "")) + (f" of {size}" if size is not None else "")
                complete = value.get("complete")
                lines.append(f"| {sub} | {_fmt(acc)} | {n} | {'' if complete is None else ('yes' if complete else 'no')} |")
            else:
                lines.append(f"| {sub} | {_fmt(value)} | | |")
        lines.append("")
    return lines


def run_kind_markdown(summary: RunSummary) -> list[str]:
    """The paragraph that opens a shard's or a merged run's ``summary.md`` (none for a plain run)."""
    if summary.shard is not None:
        s = summary.shard
        per = ", ".join(f"{name} {e.shard.pairs} of {e.shard.pairs_total}"
                        for name, e in summary.benchmarks.items() if e.shard is not None)
        return [f"**Shard {s.shard}: not a whole run.** It holds {s.pairs} of {s.pairs_total} "
                f"(task, trial) pairs" + (f" ({per})" if per else "") + "; its scores cover those pairs only. "
                f"Merge the {s.count} shards with `{s.merge_command}`.", ""]
    merged = summary.merged_from
    if not isinstance(merged, dict):
        return []
    if "error" in merged:
        return [f"**Merged from shards**, but their list cannot be read: {merged['error']}", ""]
    shards = merged.get("shards", [])
    lines = [f"**Merged from {len(shards)} shards** (`--merge`): "
             + ", ".join(f"`{s['dir']}` ({s['shard']})" for s in shards) + "."]
    work = merged.get("work") or {}
    if work:
        lines.append("Their work files (`<benchmark>/work/`) were copied here: "
                     + ", ".join(f"{b} {w['files']} into `{w['dir']}`" for b, w in work.items()) + ".")
    clashes = merged.get("work_conflicts") or []
    if clashes:
        lines.append(f"{len(clashes)} work file(s) differed between shards; the lower shard's copy is kept here, "
                     f"the others stay in their shard directories (listed in {SHARDS_FILE}), e.g. "
                     f"`{clashes[0]['path']}` of `{clashes[0]['other']}`.")
    skipped = merged.get("work_skipped") or []
    if skipped:
        lines.append(f"{len(skipped)} work entries were left out (links, special files or past the merge's "
                     f"budget; they stay in their shard directories, listed in {SHARDS_FILE}), e.g. "
                     f"`{skipped[0]['path']}` of `{skipped[0]['shard']}`: {skipped[0]['why']}.")
    return [" ".join(lines), ""]


def render_markdown(summary: RunSummary) -> str:
    lines = [f"# Eval run: model `{summary.model}`, prompting `{summary.prompting}`", ""]
    lines += run_kind_markdown(summary)  # a shard, or a merge of shards: said before any number
    benchmarks = summary.benchmarks
    for suite, members in summary.suites.items():
        lines += [f"## {suite}", "",
                  "| benchmark | score | pass / agent-fail / infra-fail (episodes) | metric | tasks run | skipped | "
                  "errored | status | comparable | paper SFT → +LWM RL |",
                  "|---|---:|---:|---|---:|---:|---:|---|---|---|"]
        notes: list[str] = []
        for name in members:
            entry = benchmarks[name]
            score = entry.score()
            shown = _fmt(score) + ("*" if score is not None and entry.status == "partial" else "")
            shown = _headline_cell(entry, shown)
            paper = entry.paper_reference
            paper_cell = (f"{paper.label}: {paper.sft:.2f} → {paper.lwm_rl:.2f}"
                          + ("" if entry.ran_comparably() else " (not comparable)") if paper else "")
            run, skipped, errored = counts_cells(entry)
            lines.append(f"| {name} | {shown} | {outcomes_cell(entry)} | {entry.aggregate.get('metric', '')} | {run} | "
                         f"{skipped} | {errored} | "
                         f"{status_cell(entry)} | {_comparable_cell(entry)} | {paper_cell} |")
            if entry.not_comparable_because and entry.status in ("ok", "partial"):
                notes.append(f"- **{name}** not comparable: " + "; ".join(entry.not_comparable_because))
            if isinstance(entry.aggregate.get("caveat"), str) and entry.status in ("ok", "partial"):
                notes.append(f"- **{name}** caveat: {entry.aggregate['caveat']}")
            if entry.error_reasons:
                notes.append(f"- **{name}** errors: " + "; ".join(f"{n} x {reason}" for reason, n
                                                                 in entry.error_reasons.items()))
        lines.append("")
        if any(benchmarks[n].status == "partial" for n in members):
            lines += ["\\* partial: computed over the tasks that ran only.", ""]
        if notes:
            lines += notes + [""]
    for name, entry in benchmarks.items():
        lines += _breakdown_lines(name, entry.aggregate)
    lines += general_markdown(summary.general)
    return "\n".join(lines)


def write_summary(out: str | Path, summary: RunSummary) -> RunSummary:
    """``summary.json`` (the record) and ``summary.md`` (its tables), each written atomically."""
    write_summary_json(out, summary)
    write_text_atomic(Path(out) / "summary.md", render_markdown(summary))
    return summary


def _compare_cell(entry: BenchmarkEntry | None) -> str:
    if entry is None:
        return "—"
    run, skipped, errored = counts_cells(entry)
    fewer = entry.runs is not None and entry.runs_protocol is not None and entry.runs < entry.runs_protocol
    trials = f"; {entry.runs} of the protocol's {entry.runs_protocol} trials" if fewer else ""
    return (f"{_fmt(entry.score())} ({entry.status}; {run} run, {skipped} skipped, {errored} errored{trials}; "
            f"{'comparable' if entry.ran_comparably() else 'not comparable'})")


def compare(run_a: str | Path, run_b: str | Path) -> str:
    """Markdown delta table of two runs (B - A), per benchmark, with each side's status and counts.

    The delta is given only when both sides have a score; it is marked ``*`` when either side is
    partial or the two sides ran different numbers of tasks, and ``NOT COMPARABLE`` when the runs differ
    in a setting besides the weights (:func:`unified.eval.fingerprint.setting_differences`: sampling,
    budgets, thinking, turns, trials, judge, prompting, backend, data), every difference named below it."""
    from unified.eval.fingerprint import setting_differences
    from unified.eval.identity import weights_comparison

    a, b = load_summary(run_a), load_summary(run_b)
    names = list(dict.fromkeys([*a.benchmarks, *b.benchmarks]))
    identical, weights_line = weights_comparison(run_a, run_b)
    differences = setting_differences(run_a, run_b, names)
    run_wide = [d for d in differences if d.benchmark is None]
    lines = [weights_line, ""] if identical else []
    if differences:
        lines += [f"NOT COMPARABLE: A and B ran with {len(differences)} different setting(s) besides the weights "
                  "(listed below the table); a delta marked NOT COMPARABLE is not the effect of the weights alone.", ""]
    lines += [f"| suite | benchmark | A: {a.model} | B: {b.model} | Δ (B−A) |", "|---|---|---|---|---:|"]
    notes: list[str] = []
    merged = {name: b.benchmarks.get(name) or a.benchmarks[name] for name in names}
    for suite, members in _by_suite(merged).items():
        for name in members:
            ea, eb = a.benchmarks.get(name), b.benchmarks.get(name)
            sa, sb = (ea.score() if ea else None), (eb.score() if eb else None)
            delta = ""
            if sa is not None and sb is not None:
                delta = f"{sb - sa:+.2f}"
                if "partial" in (ea.status, eb.status) or ea.tasks_run != eb.tasks_run:
                    delta += "*"
                if run_wide or any(d.benchmark == name for d in differences):
                    delta += " NOT COMPARABLE"
            lines.append(f"| {suite} | {name} | {_compare_cell(ea)} | {_compare_cell(eb)} | {delta} |")
            for side, entry in (("A", ea), ("B", eb)):
                if entry and entry.not_comparable_because and entry.status in ("ok", "partial"):
                    notes.append(f"- {name} ({side}) not comparable: " + "; ".join(entry.not_comparable_because))
    if any("* |" in line or "* NOT COMPARABLE |" in line for line in lines):
        lines += ["", "\\* a side is partial or the sides ran different tasks: the delta compares different sets."]
    if differences:
        lines += ["", "Settings that differ (A vs B):"] + [f"- {d.line()}" for d in differences]
    if weights_line and not identical:
        notes.append(f"- {weights_line}")
    if notes:
        lines += [""] + notes
    lines += general_compare(a.general, b.general, a.model, b.model)
    return "\n".join(lines)
