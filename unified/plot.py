"""``python -m unified.plot``: PNG figures of a warmup's training curves and of two eval runs.

    python -m unified.plot runs/warmup                      # -> runs/warmup/plots/training.png
    python -m unified.plot runs/warmup/metrics.jsonl --out figures/
    python -m unified.plot --compare runs/eval/sft runs/eval/warmup --labels SFT "+LWM RL"
                                                            # -> runs/eval/warmup/compare.png

**Training curves** read ``metrics.jsonl`` (one record per logging step, written by the warmup's
``JsonlMetricsCallback`` whether or not wandb runs) and draw, against the optimizer step: the
reward (mean over the step's completions, with a band of +- ``reward_std``, and each reward
function's ``rewards/<name>/mean``); the loss; the mean completion length (band: min to max) and
the share truncated at ``max_completion_length`` (``completions/clipped_ratio``) with the share of
samples a judge could not score (``rewards/dropped_share``) and of groups whose rewards are all equal
(``rewards/zero_variance_share``, :mod:`unified.warmup.failfast`); the KL to the
reference (``kl``, logged when ``beta > 0``) and the entropy; and the GSPO clip fraction
(``clip_ratio/region_mean``, low and high). A metric the run did not log is a panel that says so.

**Comparison** reads each run's ``results.jsonl`` records and draws, per benchmark, one bar per
run: the mean episode score over the episodes that ran (skipped ones left out),
``mean = (1/n) sum_i s_i``, with an error bar of one standard error ``SE = sd / sqrt(n)``, ``sd``
the sample standard deviation (``n - 1``); a benchmark with a single episode gets no error bar.
This is the per-episode mean, not necessarily the benchmark's headline aggregate in
``summary.md`` (BFCL, for example, reports accuracy per category in percent).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from unified.store import read_jsonl

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


def plot_training(path: str | Path, out: str | Path | None = None) -> Path:
    """The training-curves PNG of a warmup (see the module docstring); returns its path."""
    file, records = read_training_metrics(path)
    plt = _pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    per_function = sorted({k for r in records for k in r if k.startswith("rewards/") and k.endswith("/mean")})
    _panel(axes[0][0], records, "reward (band: ± reward_std)",
           [("reward", "reward")] + [(k, k.split("/")[1]) for k in per_function], band=("reward", "reward_std", ""))
    _panel(axes[0][1], records, "loss", [("loss", "loss")])
    _panel(axes[0][2], records, "completion length, tokens (band: min-max)",
           [("completions/mean_length", "mean")],
           band=("completions/mean_length", "completions/min_length", "completions/max_length"))
    _panel(axes[1][0], records, "shares: truncated completions, unscored samples, groups without signal",
           [("completions/clipped_ratio", "truncated"), ("rewards/dropped_share", "dropped (judge failed)"),
            ("rewards/zero_variance_share", "zero-variance groups")])
    kl_logged = any("kl" in r for r in records)
    _panel(axes[1][1], records, "KL to reference, entropy" if kl_logged else "entropy (KL not logged: beta = 0)",
           [("kl", "kl"), ("entropy", "entropy")])
    _panel(axes[1][2], records, "clip fraction (GSPO)",
           [("clip_ratio/region_mean", "region"), ("clip_ratio/low_mean", "low"), ("clip_ratio/high_mean", "high")])
    fig.suptitle(f"{file} ({len(records)} logged steps)", fontsize=10)
    fig.tight_layout()
    return _save_png(plt, fig, Path(out) if out else file.parent / "plots", "training.png")


def benchmark_scores(run_dir: str | Path) -> dict[str, tuple[float, float | None, int]]:
    """Per benchmark: (mean episode score, standard error or None when n < 2, n) over the
    results that ran (skipped left out); see the module docstring."""
    from unified.trace.load import load_run

    by_bench: dict[str, list[float]] = {}
    for result in load_run(run_dir).results:
        if result.skipped is None:
            by_bench.setdefault(result.benchmark, []).append(float(result.score))
    out = {}
    for name, scores in sorted(by_bench.items()):
        n = len(scores)
        mean = sum(scores) / n
        se = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1) / n) if n > 1 else None
        out[name] = (mean, se, n)
    return out


def plot_compare(run_a: str | Path, run_b: str | Path, labels: tuple[str, str] | None = None,
                 out: str | Path | None = None) -> Path:
    """Per-benchmark bars (mean episode score ± SE) of two runs; returns the PNG's path. When both runs
    recorded the same weights digest (:func:`unified.eval.identity.weights_comparison`) the title says
    IDENTICAL WEIGHTS: the bars then differ by sampling and numerics only."""
    from unified.eval.identity import weights_comparison

    identical, _ = weights_comparison(run_a, run_b)
    labels = labels or (Path(run_a).resolve().name, Path(run_b).resolve().name)
    scores = [benchmark_scores(run_a), benchmark_scores(run_b)]
    names = sorted(set(scores[0]) | set(scores[1]))
    if not names:
        raise ValueError(f"neither {run_a} nor {run_b} has an episode that ran (all skipped)")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(names) + 2), 4))
    width = 0.38
    top = 1.0  # episode scores are 0..1 for most benchmarks; the axis grows when one is larger
    for i, (side, label) in enumerate(zip(scores, labels)):
        present = [name for name in names if name in side]
        xs = [names.index(name) + (i - 0.5) * width for name in present]
        bars = ax.bar(xs, [side[name][0] for name in present], width, label=label)
        with_se = [(x, side[name]) for x, name in zip(xs, present) if side[name][1] is not None]
        if with_se:  # no error bar where n = 1
            ax.errorbar([x for x, _ in with_se], [v[0] for _, v in with_se], yerr=[v[1] for _, v in with_se],
                        fmt="none", ecolor="black", capsize=4)
        for bar, name in zip(bars, present):
            ax.annotate(f"n={side[name][2]}", (bar.get_x() + bar.get_width() / 2, 0), xytext=(0, 2),
                        textcoords="offset points", ha="center", fontsize=7)
        top = max(top, *(v + (se or 0.0) for v, se, _ in side.values())) if side else top
    ax.set_ylim(0, top * 1.1)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel("mean episode score (± 1 SE)")
    if identical:
        ax.set_title("Per-benchmark score (IDENTICAL WEIGHTS: A and B are the same tensors)", fontsize=9)
    else:
        ax.set_title("Per-benchmark score")
    ax.legend()
    fig.tight_layout()
    return _save_png(plt, fig, Path(out) if out else Path(run_b) / "compare.png", "compare.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unified.plot", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:7]))
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
