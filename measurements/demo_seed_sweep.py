"""The demo's warmup over training seeds: does it learn, and on how many seeds does it keep the start?

    python -m measurements.demo_seed_sweep --out runs/sweep/base --seeds 0-9
    python -m measurements.demo_seed_sweep --out runs/sweep/lr1e-4 --seeds 0-9 --set train.learning_rate=1e-4
    python -m measurements.demo_seed_sweep --out runs/sweep/lr1e-4 --table      # the table of what ran

Each seed is one ``python -m unified.warmup --eval-before-after --heldout-temperature 0`` run of
``recipes/warmup/embedded_cpu.yaml`` with ``unified.demo.demo_warmup_overrides`` (the demo's settings, one
place), ``train.seed=S`` and the extra ``--set`` overrides, in its own process under ``OUT/seedS``. Its row
(kept step, validation reward of the start and of the kept step, held-out paired difference, clip
fraction per update, wall time) is appended to ``OUT/results.jsonl`` as soon as it ends; a rerun skips
the seeds already there. The weights (``final/``, ``checkpoint-*``: 4.2 GB a run) are deleted after the row
is written unless ``--keep-weights``. A measurement program, not library API.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"


def parse_seeds(text: str) -> list[int]:
    """``"0-3,7"`` -> ``[0, 1, 2, 3, 7]``."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi or lo) + 1))
    return seeds


def seed_row(run: Path, seed: int, seconds: float) -> dict[str, Any]:
    """One seed's figures from its ``before_after.json`` and ``metrics.jsonl``."""
    from unified.warmup.callbacks import METRICS_FILE, read_metrics
    from unified.warmup.guard import final_weights_step

    report = json.loads((run / "before_after.json").read_text())
    records = read_metrics(run / METRICS_FILE)
    collapse = report.get("collapse") or {}
    start = collapse.get("start_probe_reward")
    if start is None:  # a run made before the guard recorded it: the line it printed
        found = re.findall(r"probe at step 0: .*reward (-?[0-9.]+)", (run.parent / f"seed{seed}.log").read_text())
        start = float(found[-1]) if found else None
    probe = {0: start, **{int(r["step"]): r["probe/reward"] for r in records if r.get("probe/reward") is not None}}
    clip = [r.get("clip_ratio/region_mean") for r in sorted(records, key=lambda r: r["step"]) if "loss" in r]
    kept = final_weights_step(collapse, report["steps"])
    paired = report["paired"]
    return {"seed": seed, "steps": report["steps"], "kept_step": kept,
            "validation_start": start, "validation_kept": probe.get(kept),
            "validation_by_step": [probe.get(s) for s in range(report["steps"] + 1)],
            "heldout_diff": paired["mean_diff"], "heldout_se": paired["se_diff"],
            "heldout_up": paired["up"], "heldout_down": paired["down"], "heldout_prompts": paired["prompts"],
            "clip_fraction_by_update": clip, "wall_s": round(seconds, 1)}


def run_seed(out: Path, seed: int, extra: list[str], keep_weights: bool) -> dict[str, Any]:
    from unified.demo import DEMO_RECIPE, demo_warmup_overrides

    run = out / f"seed{seed}"
    overrides = [*demo_warmup_overrides(steps=2, heldout=8), f"train.seed={seed}", *extra]
    cmd = [sys.executable, "-m", "unified.warmup", "--recipe", str(DEMO_RECIPE), "--output-dir", str(run),
           "--eval-before-after", "--heldout-temperature", "0"]
    for item in overrides:
        cmd += ["--set", item]
    start = time.time()
    with open(out / f"seed{seed}.log", "ab") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        return {"seed": seed, "error": f"exit status {rc} (see {out / f'seed{seed}.log'})"}
    row = seed_row(run, seed, time.time() - start)
    if not keep_weights:
        for path in [run / "final", *run.glob("checkpoint-*")]:
            shutil.rmtree(path, ignore_errors=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The seeds as a markdown table plus the summary line (mean, SE, how many keep the start)."""
    ok = [r for r in rows if "error" not in r]
    lines = ["| seed | kept step | validation start -> kept | held-out paired diff +- SE (up/down) | "
             "clip fraction by update | wall |", "|---|---|---|---|---|---|"]
    for r in sorted(ok, key=lambda r: r["seed"]):
        clip = ", ".join("-" if c is None else f"{c:.2f}" for c in r["clip_fraction_by_update"])
        lines.append(f"| {r['seed']} | {r['kept_step']} | {r['validation_start']:.2f} -> {r['validation_kept']:.2f} | "
                     f"{r['heldout_diff']:+.2f} +- {r['heldout_se']:.2f} ({r['heldout_up']}/{r['heldout_down']}) | "
                     f"{clip} | {r['wall_s'] / 60:.1f} min |")
    if ok:
        diffs = [r["heldout_diff"] for r in ok]
        mean = sum(diffs) / len(diffs)
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) if len(diffs) > 1 else float("nan")
        kept_start = sum(r["kept_step"] == 0 for r in ok)
        positive = sum(d > 0 for d in diffs)
        lines.append(f"\n{len(ok)} seeds: held-out paired difference mean {mean:+.3f}, between-seed SE "
                     f"{sd / math.sqrt(len(diffs)):.3f}; {kept_start} of {len(ok)} keep the start; "
                     f"held-out up on {positive} of {len(ok)}")
    for r in rows:
        if "error" in r:
            lines.append(f"seed {r['seed']}: {r['error']}")
    return "\n".join(lines)


def seed_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The share of seeds that keep the start and that raise the held-out reward, and the held-out paired
    difference's mean with its between-seed standard error ``sd / sqrt(n)`` (``sd`` with ``n - 1``)."""
    ok = sorted((r for r in rows if "error" not in r), key=lambda r: r["seed"])
    diffs = [r["heldout_diff"] for r in ok]
    n = len(diffs)
    mean = sum(diffs) / n if n else float("nan")
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1)) if n > 1 else float("nan")
    return {"seeds": [r["seed"] for r in ok], "n": n, "kept_start": sum(r["kept_step"] == 0 for r in ok),
            "heldout_up": sum(d > 0 for d in diffs), "heldout_down": sum(d < 0 for d in diffs),
            "mean_diff": round(mean, 3), "se_diff": round(sd / math.sqrt(n), 3) if n > 1 else None,
            "errors": [r["seed"] for r in rows if "error" in r]}


def read_rows(out: Path) -> list[dict[str, Any]]:
    path = out / RESULTS
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="one directory per setting; seeds go under it")
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5")
    parser.add_argument("--set", action="append", default=[], dest="extra", help="a recipe override, repeatable")
    parser.add_argument("--keep-weights", action="store_true")
    parser.add_argument("--table", action="store_true", help="print the table of what ran, run nothing")
    parser.add_argument("--report", metavar="FILE", help="merge the seeds' summary (seed_summary) into FILE as its "
                        "--report-as key: the demo's recap reads recipes/warmup/demo_seed_report.json")
    parser.add_argument("--report-as", choices=["selection", "report"], default="report",
                        help="selection: the seeds the settings were chosen on; report: a fresh range never used")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.table:
        (out / "settings.json").write_text(json.dumps({"extra": args.extra}, indent=1) + "\n")
        done = {r["seed"] for r in read_rows(out) if "error" not in r}
        for seed in parse_seeds(args.seeds):
            if seed in done:
                continue
            row = run_seed(out, seed, args.extra, args.keep_weights)
            with open(out / RESULTS, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    rows = [seed_row(out / f"seed{r['seed']}", r["seed"], r["wall_s"])  # re-read: rows of older versions
            if "error" not in r and (out / f"seed{r['seed']}" / "before_after.json").is_file() else r
            for r in read_rows(out)]
    print(table(rows))
    if args.report:
        path = Path(args.report)
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        summary = seed_summary(rows)
        seeds = summary["seeds"]
        summary["range"] = f"seeds {min(seeds)}-{max(seeds)}" if seeds else "no seed"
        summary["settings"] = {"extra": json.loads((out / "settings.json").read_text()).get("extra", [])
                               if (out / "settings.json").is_file() else [], "out": str(out)}
        data[args.report_as] = summary
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
