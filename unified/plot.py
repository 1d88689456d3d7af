"""``python -m unified.plot``: PNG figures of a warmup's training curves and of two eval runs.

    python -m unified.plot runs/warmup                      # -> runs/warmup/plots/training.png
    python -m unified.plot runs/warmup/metrics.jsonl --out figures/
    python -m unified.plot --compare runs/eval/sft runs/eval/warmup --labels SFT "+LWM RL"
                                                            # -> runs/eval/warmup/compare.png

**Training curves** read ``metrics.jsonl`` (one record per logging step, written by the warmup's
``JsonlMetricsCallback`` whether or not wandb runs) and draw, against the optimizer step: the
training reward (mean over the generation batch's completions, band +- ``reward_std``, and each reward
function's ``rewards/<name>/mean``); the validation probe the guard selects on (``probe/reward``, step 0 =
the start from the guard's record), the kept step (a star: the weights ``final/`` holds) and, after
``--eval-before-after``, the held-out reward before and after with its paired difference; the loss; the
mean completion length in tokens (band: min to max) and the share truncated at ``max_completion_length`` with the share
of samples a judge could not score (``rewards/dropped_share``) and of groups whose rewards are all equal
(``rewards/zero_variance_share``, :mod:`unified.warmup.failfast`);
the KL to the reference (``kl``, logged when ``beta > 0``) and the entropy; the GSPO clip fraction; seconds
per step; peak RSS in GiB. A step that generated nothing (one generation batch feeding several updates:
``loss`` logged, no ``reward``) is a dotted line naming the step whose batch it reused. A metric the run
did not log is a panel that says so.

**Comparison** reads each run's ``results.jsonl`` records and draws, per benchmark, one bar per
run: the mean episode score over the episodes that ran (skipped ones left out),
``mean = (1/n) sum_i s_i``, with an error bar of one standard error ``SE = sd / sqrt(n)``, ``sd``
the sample standard deviation (``n - 1``); a benchmark with a single episode gets no error bar. Scores
in 0..1 are drawn in %, a zero as a mark on the axis, a skipped or errored benchmark as a hatched
placeholder with its reason, and runs that differ in a setting besides the weights are titled NOT
COMPARABLE with the differences (:mod:`unified.eval.fingerprint`).
This is the per-episode mean, not necessarily the benchmark's headline aggregate in
``summary.md`` (BFCL, for example, reports accuracy per category in percent).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from unified.config.cli import ArgumentParser, plain_text
from unified.store import read_jsonl
from unified.eval.records import load_summary

METRICS_FILE = "metrics.jsonl"
"""The warmup's metrics file (``unified.warmup.callbacks.METRICS_FILE``)."""


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_png(plt, fig, target: Path, name: str) -> Path:
    """Write ``fig`` to ``target`` (a ``.png`` file, or a directory to hold ``name``), close it, return the file."""
    if target.suffix.lower() != ".png":
        target = target / name
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return target


def read_training_metrics(path: str | Path) -> tuple[Path, list[dict[str, Any]]]:
    """The metrics file of a warmup output dir (or the file itself) and its per-step records
    (TRL's end-of-training summary record, which has no ``loss``/``reward``, left out)."""
    path = Path(path)
    file = path / METRICS_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such file (give a warmup --output-dir or its {METRICS_FILE})")
    records = [r for r in read_jsonl(file) if isinstance(r, dict) and "step" in r and "train_runtime" not in r]
    if not records:
        raise ValueError(f"{file}: no training step logged yet")
    return file, records


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in records:
        value = r.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            xs.append(r["step"])
            ys.append(float(value))
    return xs, ys


def _panel(ax, records, title: str, lines: list[tuple[str, str]], band: tuple[str, str, str] | None = None) -> bool:
    """Draw ``lines`` (key, label) on ``ax``; ``band`` = (centre key, low key or ±key, high key)."""
    drawn = False
    if band is not None:
        centre, low, high = band
        xs, mid = _series(records, centre)
        if high:
            _, lo = _series(records, low)
            _, hi = _series(records, high)
        else:  # symmetric: centre +- low
            _, sd = _series(records, low)
            lo = [m - s for m, s in zip(mid, sd)]
            hi = [m + s for m, s in zip(mid, sd)]
        if len(xs) == 1 and len(lo) == len(hi) == 1:  # one step: a band has no width, an error bar does
            ax.errorbar(xs, mid, yerr=[[mid[0] - lo[0]], [hi[0] - mid[0]]], fmt="none", capsize=4, alpha=0.4)
        elif xs and len(lo) == len(xs) == len(hi):
            ax.fill_between(xs, lo, hi, alpha=0.2)
    for key, label in lines:
        xs, ys = _series(records, key)
        if xs:
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label)
            drawn = True
    ax.set_title(title)
    ax.set_xlabel("step")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    steps = [r["step"] for r in records]
    if steps and max(steps) - min(steps) < 4:  # a few steps: whole-number ticks around them
        ax.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
        ax.set_xticks(sorted(set(steps)))
    if drawn:
        if len(lines) > 1:
            ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "not logged by this run", ha="center", va="center", transform=ax.transAxes, color="grey")
    return drawn


def warmup_outcome(directory: Path) -> dict[str, Any]:
    """What a warmup directory says beyond its metrics: ``steps``, ``collapse`` (the guard's record: the
    start's validation probe, the kept step), and with ``--eval-before-after`` the held-out ``before`` /
    ``after`` / ``paired`` reward (``before_after.json``, else the ``run.json`` record); ``{}`` when neither."""
    import json

    for name in ("before_after.json", "run.json"):
        try:
            data = json.loads((directory / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and ("collapse" in data or "before" in data):
            return data
    return {}


def generation_steps(records: list[dict[str, Any]]) -> dict[int, int]:
    """``{step: the step whose generation batch it trained on}`` for steps that generated nothing (a
    logged ``loss`` and no ``reward``: with ``gspo.steps_per_generation`` a multiple k > 1 of the gradient
    accumulation, one generation batch feeds k optimizer updates and only its first logs a reward)."""
    reused: dict[int, int] = {}
    last = None
    for r in sorted(records, key=lambda r: r["step"]):
        if isinstance(r.get("reward"), (int, float)):
            last = r["step"]
        elif "loss" in r and last is not None:
            reused[r["step"]] = last
    return reused


def _mark_reused(ax, reused: dict[int, int]) -> None:
    for step, source in reused.items():
        ax.axvline(step, color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"no generation:\nreuses step {source}'s batch", (step, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, -4), textcoords="offset points", ha="center", va="top", fontsize=6, color="grey")


def _probe_panel(ax, records: list[dict[str, Any]], outcome: dict[str, Any]) -> None:
    """The validation probe the guard selects on (step 0 = the start), the kept step, and the held-out
    reward before and after (measured on other prompts, greedy)."""
    collapse = outcome.get("collapse") or {}
    xs, ys = _series(records, "probe/reward")
    start = collapse.get("start_probe_reward")
    if isinstance(start, (int, float)):
        xs, ys = [0, *xs], [float(start), *ys]
    drawn = False
    if xs:
        ax.plot(xs, ys, marker="o", markersize=4, label="validation probe (greedy)")
        drawn = True
    steps = outcome.get("steps") or (max(r["step"] for r in records) if records else 0)
    kept = collapse.get("kept_step") if isinstance(collapse.get("kept_step"), int) else (steps if collapse else None)
    if kept is not None and kept in xs:
        ax.plot([kept], [ys[xs.index(kept)]], marker="*", markersize=16, color="gold", markeredgecolor="black",
                linestyle="none", label=f"kept step {kept}" + (" (the start: weights unchanged)" if kept == 0 else ""))
    before, after, paired = outcome.get("before"), outcome.get("after"), outcome.get("paired") or {}
    if isinstance(before, dict) and isinstance(after, dict):
        n = paired.get("prompts", before.get("prompts", "?"))
        ax.plot([0], [before["mean_reward"]], marker="s", color="tab:red", linestyle="none",
                label=f"held-out before ({n} prompts)")
        where = kept if kept is not None else steps
        ax.plot([where], [after["mean_reward"]], marker="D", color="tab:green", linestyle="none",
                label=f"held-out after: paired {paired.get('mean_diff', float('nan')):+.2f} "
                      f"± {paired.get('se_diff', float('nan')):.2f} SE")
        drawn = True
    ax.set_title("validation probe, kept step, held-out before/after")
    ax.set_xlabel("step (0 = start)")
    ax.set_ylabel("reward per prompt (rule reward, 0-25)")
    if drawn:
        ax.legend(fontsize=6, loc="best")
        ticks = sorted({0, *xs, *(r["step"] for r in records)})
        ax.set_xlim(min(ticks) - 0.5, max(ticks) + 0.5)
        if len(ticks) <= 12:
            ax.set_xticks(ticks)
    else:
        ax.text(0.5, 0.5, "no validation probe or held-out scores\n(monitor.probe_size, --eval-before-after)",
                ha="center", va="center", transform=ax.transAxes, color="grey", fontsize=8)


def plot_training(path: str | Path, out: str | Path | None = None) -> Path:
    """The training-curves PNG of a warmup (see the module docstring); returns its path."""
    file, records = read_training_metrics(path)
    outcome = warmup_outcome(file.parent)
    reused = generation_steps(records)
    plt = _pyplot()
    fig, axes = plt.subplots(3, 3, figsize=(16, 12))
    per_function = sorted({k for r in records for k in r if k.startswith("rewards/") and k.endswith("/mean")})
    _panel(axes[0][0], records, "training reward of the generation batch (band: ± reward_std)",
           [("reward", "reward (weighted sum)")] + [(k, k.split("/")[1]) for k in per_function],
           band=("reward", "reward_std", ""))
    axes[0][0].set_ylabel("reward per completion")
    _probe_panel(axes[0][1], records, outcome)
    _panel(axes[0][2], records, "loss (GSPO objective)", [("loss", "loss")])
    axes[0][2].set_ylabel("loss (unitless)")
    _panel(axes[1][0], records, "completion length (band: min-max)", [("completions/mean_length", "mean")],
           band=("completions/mean_length", "completions/min_length", "completions/max_length"))
    axes[1][0].set_ylabel("tokens")
    _panel(axes[1][1], records, "shares: truncated, unscored (judge failed), groups without signal",
           [("completions/clipped_ratio", "truncated"), ("rewards/dropped_share", "dropped (judge failed)"),
            ("rewards/zero_variance_share", "zero-variance groups")])
    axes[1][1].set_ylabel("share of the batch (0-1)")
    axes[1][1].set_ylim(-0.02, 1.02)
    kl_logged = any("kl" in r for r in records)
    _panel(axes[1][2], records, "KL to reference, entropy" if kl_logged else "entropy (KL not logged: beta = 0)",
           [("kl", "kl"), ("entropy", "entropy")])
    axes[1][2].set_ylabel("nats per token")
    _panel(axes[2][0], records, "clip fraction (GSPO)",
           [("clip_ratio/region_mean", "region"), ("clip_ratio/low_mean", "low"), ("clip_ratio/high_mean", "high")])
    axes[2][0].set_ylabel("share of sequences clipped (0-1)")
    axes[2][0].set_ylim(-0.02, 1.02)
    _panel(axes[2][1], records, "seconds per step", [("step_time", "step time")])
    axes[2][1].set_ylabel("s (this machine, its load)")
    _panel(axes[2][2], records, "peak memory (RSS)", [("memory/peak_rss_gib", "peak RSS")])
    axes[2][2].set_ylabel("GiB")
    for ax in (axes[0][0], axes[0][2], axes[1][0], axes[1][1], axes[1][2], axes[2][0]):
        _mark_reused(ax, reused)
    note = ""
    if reused:
        note = (f"; dotted: {len(reused)} step(s) without generation (one batch feeds several updates: they log "
                "loss and clip fraction, no reward)")
    fig.suptitle(f"{file} ({len(records)} logged steps{note})", fontsize=10)
    fig.tight_layout()
    return _save_png(plt, fig, Path(out) if out else file.parent / "plots", "training.png")


def benchmark_scores(run_dir: str | Path) -> dict[str, tuple[float, float | None, int]]:
    """Per benchmark: (mean episode score, standard error or None when n < 2, n) over the
    results that ran (skipped left out); see the module docstring."""

    by_bench: dict[str, list[float]] = {}
    for result in _results(run_dir):
        if result.skipped is None:
            by_bench.setdefault(result.benchmark, []).append(float(result.score))
    out = {}
    for name, scores in sorted(by_bench.items()):
        n = len(scores)
        mean = sum(scores) / n
        se = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1) / n) if n > 1 else None
        out[name] = (mean, se, n)
    return out


def _results(run_dir: str | Path) -> list:
    """The run's episode results; none for a run directory whose benchmarks were all skipped before any
    episode (no records, only its summary)."""
    from unified.trace.load import load_run

    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"{run_dir}: the run directory does not exist")
    try:
        return load_run(run_dir).results
    except ValueError:
        if (Path(run_dir) / "summary.json").is_file():
            return []
        raise


def benchmark_statuses(run_dir: str | Path) -> dict[str, str]:
    """Per benchmark that has no episode that ran: why, in a few words (the summary's skip or error
    reason, else "all N tasks skipped" from the records); ``{}`` for a run where every benchmark ran."""

    skipped: dict[str, int] = {}
    ran: set[str] = set()
    for result in _results(run_dir):
        if result.skipped is None:
            ran.add(result.benchmark)
        else:
            skipped[result.benchmark] = skipped.get(result.benchmark, 0) + 1
    out = {name: f"all {n} tasks skipped" for name, n in skipped.items() if name not in ran}
    try:
        from unified.eval.fingerprint import planned_directories

        directory = planned_directories(run_dir)  # the records name a benchmark by its directory
        for name, entry in load_summary(run_dir).benchmarks.items():
            key = directory.get(name, name)
            if entry.status in ("skipped", "error") and key not in ran:
                out[key] = f"{entry.status}: {entry.reason or '?'}"
    except Exception:  # no summary yet (a run in progress) or an older one: the records alone
        pass
    return out


def plot_compare(run_a: str | Path, run_b: str | Path, labels: tuple[str, str] | None = None,
                 out: str | Path | None = None) -> Path:
    """The PNG of :func:`compare_figure` (``RUN_B/compare.png`` by default); returns its path."""
    plt, fig = compare_figure(run_a, run_b, labels)
    return _save_png(plt, fig, Path(out) if out else Path(run_b) / "compare.png", "compare.png")


def compare_figure(run_a: str | Path, run_b: str | Path, labels: tuple[str, str] | None = None):
    """Per-benchmark bars (mean episode score ± SE) of two runs: ``(pyplot, figure)``.

    Scores in 0..1 are drawn in % (every table says %); a zero is a bar drawn at the axis with its value
    written; a benchmark skipped or errored on a side is a hatched placeholder with the reason. When the
    runs differ in a setting besides the weights (:func:`unified.eval.fingerprint.setting_differences`) the
    title says NOT COMPARABLE and lists them, and a benchmark whose own settings differ is labelled so.
    When both runs recorded the same weights digest the title says IDENTICAL WEIGHTS."""
    from unified.eval.fingerprint import planned_directories, setting_differences
    from unified.eval.identity import weights_comparison

    for run in (run_a, run_b):
        if not Path(run).is_dir():
            raise FileNotFoundError(f"{run}: the run directory does not exist")
    identical, _ = weights_comparison(run_a, run_b)
    labels = labels or (Path(run_a).resolve().name, Path(run_b).resolve().name)
    scores = [benchmark_scores(run_a), benchmark_scores(run_b)]
    statuses = [benchmark_statuses(run_a), benchmark_statuses(run_b)]
    names = sorted(set(scores[0]) | set(scores[1]) | set(statuses[0]) | set(statuses[1]))
    if not names:
        raise ValueError(f"neither {run_a} nor {run_b} has a recorded benchmark")
    differences = setting_differences(run_a, run_b)
    directory = {**planned_directories(run_a), **planned_directories(run_b)}  # records name the directory
    values = [v + (se or 0.0) for side in scores for v, se, _ in side.values()]
    percent = all(0.0 <= v <= 1.0 for v in values)
    scale = 100.0 if percent else 1.0
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.9 * len(names) + 2), 5.2))
    width = 0.38
    top = max([1.0, *values]) * scale
    colours = ("tab:blue", "tab:orange")
    for i, (side, label) in enumerate(zip(scores, labels)):
        offset = (i - 0.5) * width
        present = [name for name in names if name in side]
        xs = [names.index(name) + offset for name in present]
        heights = [side[name][0] * scale for name in present]
        bars = ax.bar(xs, heights, width, label=label, color=colours[i], edgecolor=colours[i], linewidth=1.5)
        with_se = [(x, side[name]) for x, name in zip(xs, present) if side[name][1] is not None]
        if with_se:  # no error bar where n = 1
            ax.errorbar([x for x, _ in with_se], [v[0] * scale for _, v in with_se],
                        yerr=[v[1] * scale for _, v in with_se], fmt="none", ecolor="black", capsize=4)
        for bar, name in zip(bars, present):
            mean, se, n = side[name]
            x = bar.get_x() + bar.get_width() / 2
            if mean == 0:  # a zero is a result: a thick mark on the axis, not an empty slot
                ax.plot([bar.get_x(), bar.get_x() + bar.get_width()], [0, 0], color=colours[i], linewidth=4,
                        solid_capstyle="butt")
            text = f"{mean * scale:.0f}%" if percent else f"{mean:.2f}"
            ax.annotate(f"{text}\nn={n}", (x, mean * scale + (se or 0.0) * scale), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)
        for name, why in statuses[i].items():
            if name in side:
                continue
            x = names.index(name) + offset
            ax.bar([x], [top * 0.25], width, fill=False, hatch="//", edgecolor=colours[i], linewidth=1)
            ax.text(x, top * 0.02, f"{label}:\n" + _wrap(why, 22), rotation=90, ha="center", va="bottom",
                    fontsize=6, color="dimgrey")
    ax.set_ylim(0, top * 1.25)
    scoped = {directory.get(d.benchmark, d.benchmark) for d in differences if d.benchmark}
    ax.set_xticks(range(len(names)), [name + ("\n(not comparable)" if name in scoped else "") for name in names],
                  fontsize=8)
    ax.set_ylabel("mean episode score, % (± 1 SE)" if percent else "mean episode score (± 1 SE)")
    title = "Per-benchmark score" + (" (IDENTICAL WEIGHTS: A and B are the same tensors)" if identical else "")
    if differences:
        shown = "; ".join(d.line() for d in differences[:4])
        more = f"; and {len(differences) - 4} more (python -m unified.eval --compare)" if len(differences) > 4 else ""
        title = (f"NOT COMPARABLE: the runs differ in {len(differences)} setting(s) besides the weights"
                 + (" (IDENTICAL WEIGHTS: A and B are the same tensors)" if identical else "") + "\n"
                 + _wrap(shown + more, int(fig.get_figwidth() * 13)))
        ax.set_title(title, fontsize=8, color="darkred")
    else:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return plt, fig


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def main(argv: list[str] | None = None) -> int:
    doc = plain_text(__doc__)  # one-line usage errors, "did you mean" for a mistyped flag
    parser = ArgumentParser(prog="python -m unified.plot", description=doc.splitlines()[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog="\n".join(doc.splitlines()[2:7]))
    parser.add_argument("warmup", nargs="?", help="a warmup --output-dir (or its metrics.jsonl)")
    parser.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"), help="two eval run directories")
    parser.add_argument("--labels", nargs=2, metavar=("A", "B"), help="bar labels of --compare (default: dir names)")
    parser.add_argument("--out", help="the PNG file or a directory for it (default: see above)")
    args = parser.parse_args(argv)
    if bool(args.warmup) == bool(args.compare):
        print("unified.plot: error: give a warmup directory or --compare RUN_A RUN_B (see --help)", file=sys.stderr)
        return 2
    try:
        if args.compare:
            path = plot_compare(*args.compare, labels=tuple(args.labels) if args.labels else None, out=args.out)
        else:
            path = plot_training(args.warmup, args.out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"unified.plot: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
