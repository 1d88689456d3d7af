"""The notebooks' outputs without Jupyter, and the notebooks' path rules.

    python -m unified.trace runs/eval/pta                       # -> runs/eval/pta/figures/
    python -m unified.trace runs/eval/pta --out figs --judge openai:URL#MODEL
    python -m unified.trace --compare runs/eval/sft runs/eval/warmup --labels SFT "+LWM RL"

One run (``prediction_in_reasoning.ipynb``'s outputs): ``positions.png``, ``by_step.png``,
``verdicts.png``, ``accuracy_vs_success.png``, ``numbers.json`` (``{"stats": {"all", "explicit",
"implicit"}, "success_relation"}``) and ``report.md`` (the same numbers as tables, plus one row
per episode). Two runs (``sft_vs_warmup.ipynb``'s): ``comparison.png``, ``comparison.json`` and
``report.md``. The default output directory is ``RUN/figures`` (with ``--compare``: RUN_B's).

:func:`caller_path` is how the notebooks read their ``UNIFIED_*`` path parameters: a relative path
is taken from the directory the command was run in (the shell's ``PWD``; ``jupyter execute``
starts the kernel in the notebook's own directory), so
``UNIFIED_RUN_DIR=runs/eval/pta jupyter execute notebooks/prediction_in_reasoning.ipynb`` from the
repository root reads ``./runs/eval/pta``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from unified.trace.compare import compare_runs
from unified.trace.stats import RunTrace, trace_run
from unified.trace import plots

RUN_FIGURES = ("positions", "by_step", "verdicts", "accuracy_vs_success")
"""The figures of one run, in ``unified.trace.plots`` (``plot_<name>``)."""


def caller_dir() -> Path:
    """The directory the user ran the command in: ``$PWD`` when it names an existing directory
    (a shell keeps it; a Jupyter kernel inherits it while running elsewhere), else the cwd."""
    pwd = os.environ.get("PWD", "")
    return Path(pwd) if pwd and os.path.isabs(pwd) and os.path.isdir(pwd) else Path.cwd()


def caller_path(value: str | os.PathLike[str], *, must_exist: bool = False, what: str = "path") -> Path:
    """``value`` as an absolute path: relative ones against :func:`caller_dir` (module docstring).

    With ``must_exist``, a relative path found only from the process's own cwd (a notebook opened
    in a Jupyter server started elsewhere) is taken from there; one found in neither place is a
    ``FileNotFoundError`` naming both.
    """
    path = Path(os.path.expanduser(os.fspath(value)))
    if path.is_absolute():
        if must_exist and not path.exists():
            raise FileNotFoundError(f"{what} {path} does not exist")
        return path
    first = caller_dir() / path
    if not must_exist or first.exists():
        return first
    second = Path.cwd() / path
    if second.exists():
        return second
    tried = f"{first}" + (f" nor {second}" if second != first else "")
    raise FileNotFoundError(f"{what} {value!s}: neither {tried} exists (a relative path is read from the "
                            "directory the command ran in; give an absolute path)")


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    cell = lambda v: _fmt(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            + ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows] + [""])


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write_run_report(run: str | Path | RunTrace, out: str | Path | None = None, *, judge: str | None = None) -> Path:
    """One run's figures, ``numbers.json`` and ``report.md`` (module docstring); returns the directory."""
    trace = run if isinstance(run, RunTrace) else trace_run(run, judge=judge)
    target = Path(out) if out else Path(trace.path or ".") / "figures"
    target.mkdir(parents=True, exist_ok=True)
    for name in RUN_FIGURES:
        _save(getattr(plots, f"plot_{name}")(trace), target / f"{name}.png")
    stats = {kind or "all": trace.stats(kind) for kind in (None, "explicit", "implicit")}
    relation = trace.success_relation()
    (target / "numbers.json").write_text(json.dumps({"stats": stats, "success_relation": relation}, indent=2),
                                         encoding="utf-8")
    metrics = list(stats["all"])
    lines = [f"# Next-state predictions in {trace.path}", "",
             f"model `{trace.config.get('model', '?')}`, prompting `{trace.config.get('prompting', '?')}`, "
             f"{len(trace.episodes)} episodes; scores by {'the rubric judge' if judge else 'rule'}.", "",
             "## Statistics", ""]
    lines += _table([{"metric": m, **{k: stats[k][m] for k in stats}} for m in metrics],
                    ["metric", "all", "explicit", "implicit"])
    lines += ["## Prediction accuracy and task success", ""]
    lines += _table([{"quantity": k, "value": v} for k, v in relation.items()], ["quantity", "value"])
    rows = trace.episode_rows()
    if rows:
        lines += ["## Per episode", ""] + _table(rows, list(rows[0]))
    lines += ["## Figures", ""] + [f"![{name}]({name}.png)" for name in RUN_FIGURES] + [""]
    (target / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return target


def write_compare_report(run_a: str | Path, run_b: str | Path, out: str | Path | None = None, *,
                         labels: tuple[str, str] = ("A", "B"), judge: str | None = None) -> Path:
    """Two runs' ``comparison.png``, ``comparison.json`` and ``report.md``; returns the directory."""
    a, b = trace_run(run_a, judge=judge), trace_run(run_b, judge=judge)
    table = compare_runs(a, b)
    target = Path(out) if out else Path(run_b) / "figures"
    target.mkdir(parents=True, exist_ok=True)
    _save(plots.plot_comparison(table, labels), target / "comparison.png")
    (target / "comparison.json").write_text(json.dumps(table, indent=2), encoding="utf-8")
    rename = lambda rows: [{**r, labels[0]: r["a"], labels[1]: r["b"], "delta (B-A)": r["delta"]} for r in rows]  # noqa: E731
    lines = [f"# {labels[0]} ({run_a}) vs {labels[1]} ({run_b})", "", "## Benchmarks", ""]
    lines += _table(rename(table["benchmarks"]), ["benchmark", labels[0], labels[1], "delta (B-A)"])
    lines += ["## Predictions", ""]
    lines += _table(rename(table["predictions"]), ["kind", "metric", labels[0], labels[1], "delta (B-A)"])
    lines += ["![comparison](comparison.png)", ""]
    (target / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unified.trace", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[1:12]))
    parser.add_argument("run", nargs="?", help="an eval run directory (python -m unified.eval --out DIR)")
    parser.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"), help="two run directories instead")
    parser.add_argument("--labels", nargs=2, metavar=("A", "B"), default=("A", "B"), help="names of --compare's runs")
    parser.add_argument("--out", help="output directory (default: RUN/figures, or RUN_B/figures)")
    parser.add_argument("--judge", help="rubric-judge endpoint openai:URL#MODEL (default: rule scores)")
    args = parser.parse_args(argv)
    if bool(args.run) == bool(args.compare):
        print("unified.trace: error: give one run directory or --compare RUN_A RUN_B (see --help)", file=sys.stderr)
        return 2
    try:
        if args.compare:
            target = write_compare_report(*args.compare, args.out, labels=tuple(args.labels), judge=args.judge)
        else:
            target = write_run_report(args.run, args.out, judge=args.judge)
    except (FileNotFoundError, ValueError) as exc:
        print(f"unified.trace: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {target}: " + ", ".join(sorted(p.name for p in target.iterdir() if p.is_file())))
    return 0
