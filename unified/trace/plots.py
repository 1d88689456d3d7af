"""The notebooks' figures (matplotlib, imported lazily).

Every function takes traced runs (:class:`unified.trace.RunTrace`) or a comparison table
(:func:`unified.trace.compare_runs`) and returns a ``matplotlib.figure.Figure``. Empty data
(a run without any prediction, or without results) gives a figure that says so instead of
failing, so a notebook runs on any run directory.
"""

from __future__ import annotations

from typing import Any

from unified.trace.stats import RunTrace

KIND_COLOURS = {"explicit": "tab:blue", "implicit": "tab:orange"}


def _figure(ncols: int = 1, width: float = 5.0, height: float = 3.5):
    import matplotlib

    if matplotlib.get_backend().lower() in ("", "agg") or not _interactive():
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def _interactive() -> bool:
    try:
        from IPython import get_ipython

        return get_ipython() is not None
    except ImportError:
        return False


def _integer_ticks(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_positions(run: RunTrace, bins: int = 10):
    """Where predictions sit in the turn's text: histogram of relative position (0 = start), per kind."""
    fig, (ax,) = _figure()
    drawn = False
    for kind, colour in KIND_COLOURS.items():
        positions = [p.position for p in run.predictions if p.kind == kind]
        if positions:
            ax.hist(positions, bins=bins, range=(0, 1), alpha=0.6, color=colour, label=f"{kind} (n={len(positions)})")
            drawn = True
    if drawn:
        ax.set_xlabel("relative position in the turn (explicit: completion, implicit: reasoning)")
        ax.set_ylabel("predictions")
        _integer_ticks(ax)
        ax.legend()
    else:
        _empty(ax, "predictions")
    ax.set_title("Where predictions appear")
    fig.tight_layout()
    return fig


def plot_by_step(run: RunTrace):
    """Per turn index: share of tool-calling steps with a prediction, and share of correct predictions."""
    fig, (ax,) = _figure()
    calls: dict[int, int] = {}
    with_pred: dict[int, int] = {}
    scored: dict[int, list[bool]] = {}
    for e in run.episodes:
        steps_with = {p.step for p in e.predictions if p.call_index is not None}
        for p in e.predictions:
            if p.correct is not None:
                scored.setdefault(p.step, []).append(bool(p.correct))
        for s in e.call_step_indices:
            calls[s] = calls.get(s, 0) + 1
            with_pred[s] = with_pred.get(s, 0) + (s in steps_with)
    if not calls:
        _empty(ax, "tool-calling steps")
    else:
        xs = sorted(calls)
        ax.plot(xs, [with_pred[x] / calls[x] for x in xs], marker="o", label="steps with a prediction")
        xs_acc = sorted(scored)
        ax.plot(xs_acc, [sum(scored[x]) / len(scored[x]) for x in xs_acc], marker="s", label="correct predictions")
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("turn (step index)")
        ax.set_ylabel("share")
        ax.legend()
    ax.set_title("Predictions per turn")
    fig.tight_layout()
    return fig


def plot_verdicts(run: RunTrace):
    """Counts of correct / wrong / unverifiable / unaligned predictions, per kind."""
    fig, (ax,) = _figure()
    cats = ("correct", "wrong", "unverifiable", "unaligned")
    kinds = list(KIND_COLOURS)
    counts = {k: [0] * len(cats) for k in kinds}
    for p in run.predictions:
        cat = ("unaligned" if p.call_index is None else "unverifiable" if p.correct is None
               else "correct" if p.correct else "wrong")
        counts[p.kind][cats.index(cat)] += 1
    if not run.predictions:
        _empty(ax, "predictions")
    else:
        width = 0.38
        for i, kind in enumerate(kinds):
            ax.bar([x + (i - 0.5) * width for x in range(len(cats))], counts[kind], width, label=kind,
                   color=KIND_COLOURS[kind])
        ax.set_xticks(range(len(cats)), cats)
        ax.set_ylabel("predictions")
        _integer_ticks(ax)
        ax.legend()
    ax.set_title("Prediction verdicts")
    fig.tight_layout()
    return fig


def plot_accuracy_vs_success(run: RunTrace):
    """One point per episode: prediction accuracy against the benchmark's score."""
    fig, (ax,) = _figure()
    points = [(e.accuracy, e.score, e.passed) for e in run.episodes if e.accuracy is not None and e.score is not None]
    if not points:
        _empty(ax, "episodes with both a scored prediction and a result")
    else:
        ax.scatter([a for a, _, _ in points], [s for _, s, _ in points],
                   c=["tab:green" if ok else "tab:red" for _, _, ok in points], alpha=0.7)
        rel = run.success_relation()
        r = rel["pearson_accuracy_score"]
        ax.set_title(f"Prediction accuracy vs task score (r = {r:.2f})" if r is not None
                     else "Prediction accuracy vs task score")
        ax.set_xlabel("episode prediction accuracy")
        ax.set_ylabel("episode score")
        ax.set_xlim(-0.05, 1.05)
    fig.tight_layout()
    return fig


def plot_comparison(table: dict[str, list[dict[str, Any]]], labels: tuple[str, str] = ("A", "B")):
    """Side by side: benchmark scores (left) and prediction statistics (right) of two runs."""
    fig, (left, right) = _figure(ncols=2, width=5.5)
    width = 0.38
    for ax, rows, name_of, title in (
        (left, [r for r in table["benchmarks"] if not r["benchmark"].startswith("mean episode score")
                and (isinstance(r["a"], (int, float)) or isinstance(r["b"], (int, float)))],
         lambda r: r["benchmark"], "Benchmark scores"),
        (right, [r for r in table["predictions"] if r["metric"] in ("prediction_rate", "accuracy")],
         lambda r: f"{r['kind']}\n{r['metric'].replace('_', ' ')}", "Predictions"),
    ):
        if not rows:
            _empty(ax, title.lower())
            continue
        xs = range(len(rows))
        for i, (side, label) in enumerate(zip(("a", "b"), labels)):
            ax.bar([x + (i - 0.5) * width for x in xs], [r[side] or 0.0 for r in rows], width, label=label)
        ax.set_xticks(list(xs), [name_of(r) for r in rows], fontsize=8)
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    return fig
