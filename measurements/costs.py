"""The cost table: wall time, CPU time, peak RSS and disk of setup, the demo, the tests and each first-hour
command, with the machine and its load, into ``unified/eval/costs.json`` (the one source of truth; the docs
quote it). A measurement program, not library API.

    python -m measurements.costs --list                          # the commands it knows
    python -m measurements.costs --run compare plot_compare view  # measure these, merge them into the table
    python -m measurements.costs --render                         # docs/costs.md + the README/quickstart blocks

Each command runs once, as ``nice -n 10 /usr/bin/time -f ... bash -c COMMAND`` from the repository root
(heavy ones under ``flock /tmp/unified-heavy.lock``, one heavy job at a time on a shared machine), in the
order given: later commands read what earlier ones wrote (``eval_ood_warmup`` needs ``warmup_1_step``).
Peak RSS is GNU time's maximum resident set of the command's largest process, and the tree's peak is the
largest sum of resident sets over the command's whole process tree (servers it started included), sampled
every 0.5 s; CPU time is user + system of the command and its children (the larger of GNU time's figure and
the tree's samples); disk is what its output directory holds after it; load is
``/proc/loadavg``'s 1-minute figure before and after. A measured row replaces the older one of that name.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from unified.eval.costs import COSTS_FILE, duration, read_costs, render_table  # noqa: E402

PY = ".venv/bin/python"
RUNS = "runs/costs"
LOCK = "/tmp/unified-heavy.lock"

# name -> (command run from the repo root, output it writes (for disk), heavy)
COMMANDS: dict[str, tuple[str, str | None, bool]] = {
    "setup": ("git clone -q . $SCRATCH/clone && make -C $SCRATCH/clone setup", "$SCRATCH/clone/.venv", True),
    "demo": ("make demo DEMO_ARGS='--out runs/costs/demo'", f"{RUNS}/demo", True),
    "test": ("make test", None, True),
    "warmup_1_step": (f"{PY} -m unified.warmup --recipe recipes/warmup/embedded_cpu.yaml --output-dir {RUNS}/warmup "
                      "--set train.max_steps=1", f"{RUNS}/warmup", True),
    "plot_warmup": (f"{PY} -m unified.plot {RUNS}/warmup", f"{RUNS}/warmup/plots", False),
    "eval_ood_embedded": (f"{PY} -m unified.eval --suite ood --model embedded --limit 1 --out {RUNS}/eval/sft",
                          f"{RUNS}/eval/sft", True),
    "eval_ood_warmup": (f"{PY} -m unified.eval --suite ood --model {RUNS}/warmup/final --limit 1 "
                        f"--out {RUNS}/eval/warmup", f"{RUNS}/eval/warmup", True),
    "eval_ood_quick": (f"{PY} -m unified.eval --suite ood --model embedded --preset quick --out {RUNS}/eval/quick",
                       f"{RUNS}/eval/quick", True),
    "eval_ood_with_checkouts": (f"{PY} -m unified.eval --suite ood --model embedded --limit 1 "
                                f"--out {RUNS}/eval/ood-checkouts", f"{RUNS}/eval/ood-checkouts", True),
    "eval_ood_with_checkouts_quick": (f"{PY} -m unified.eval --suite ood --model embedded --preset quick "
                                      f"--out {RUNS}/eval/ood-checkouts-quick", f"{RUNS}/eval/ood-checkouts-quick",
                                      True),
    # two runs of the same weights under other settings (sft, quick): the cost of a comparison, which reads
    # records only, does not depend on which two runs it reads
    "compare": (f"{PY} -m unified.eval --compare {RUNS}/eval/sft {RUNS}/eval/quick", None, False),
    "plot_compare": (f"{PY} -m unified.plot --compare {RUNS}/eval/sft {RUNS}/eval/quick --out {RUNS}/compare.png",
                     f"{RUNS}/compare.png", False),
    "view": (f"{PY} -m unified.view {RUNS}/eval/sft", f"{RUNS}/eval/sft/view.html", False),
    "eval_pta": (f"{PY} -m unified.eval --suite ood --model embedded --prompting predict_then_act --limit 1 "
                 f"--out {RUNS}/eval/pta", f"{RUNS}/eval/pta", True),
    "trace": (f"{PY} -m unified.trace {RUNS}/eval/pta", f"{RUNS}/eval/pta/figures", False),
    "lwm": (f"{PY} -m unified.eval lwm --model embedded --judge embedded --limit 2 --out {RUNS}/eval/lwm "
            "--max-new-tokens 128 --temperature 0 --no-thinking --judge-max-tokens 96 --judge-temperature 0",
            f"{RUNS}/eval/lwm", True),
    "general": (f"{PY} -m unified.eval --suite general --model embedded --set general.limit=2 "
                f"--out {RUNS}/eval/general", f"{RUNS}/eval/general", True),
}

# which rows each doc block quotes (README's "What each command needs", the quickstart's first hour)
BLOCKS = {
    "README.md": ["setup", "demo", "test", "warmup_1_step", "eval_ood_embedded", "eval_ood_quick",
                  "eval_ood_with_checkouts", "eval_ood_with_checkouts_quick", "eval_pta"],
    "docs/quickstart.md": ["setup", "demo", "test", "warmup_1_step", "plot_warmup",
                           "eval_ood_embedded", "eval_ood_warmup", "eval_ood_quick", "eval_ood_with_checkouts",
                           "eval_ood_with_checkouts_quick", "compare", "plot_compare", "view", "eval_pta", "trace", "lwm", "general"],
}
BEGIN, END = "<!-- costs:begin (python -m measurements.costs --render) -->", "<!-- costs:end -->"


def machine() -> dict[str, Any]:
    mem = next((int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:")), 0)
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    return {"cpus": os.cpu_count(), "memory_gib": round(mem / 2**20, 1), "cpu_model": model,
            "kernel": platform.release(), "python": platform.python_version()}


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def disk_mb(path: Path) -> float | None:
    if not path.exists():
        return None
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def sample_tree(child: subprocess.Popen, every_s: float = 0.5) -> tuple[float, float]:
    """Wait for ``child``, sampling its whole process tree every ``every_s``: the largest sum of the tree's
    resident sets (bytes) and the user + system seconds of every process seen (each at its last sample).
    GNU time sees only the processes its command waited for, and a server the command started (vLLM's
    engine and worker, in their own session) is not among them: the tree is what the machine holds."""
    import psutil

    peak, cpu_seen = 0.0, {}
    root = psutil.Process(child.pid)
    while child.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        total = 0.0
        for proc in procs:
            try:
                total += proc.memory_info().rss
                times = proc.cpu_times()
                cpu_seen[(proc.pid, proc.create_time())] = times.user + times.system
            except psutil.Error:
                continue
        peak = max(peak, total)
        time.sleep(every_s)
    return peak, sum(cpu_seen.values())


def measure(name: str, scratch: Path) -> dict[str, Any]:
    command, output, heavy = COMMANDS[name]
    command = command.replace("$SCRATCH", str(scratch))
    timing = scratch / f"{name}.time"
    argv = ["nice", "-n", "10", "/usr/bin/time", "-f", "%e %U %S %M", "-o", str(timing), "bash", "-c", command]
    if heavy:
        argv = ["flock", LOCK, *argv]
    before = load1()
    log = REPO / RUNS / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        child = subprocess.Popen(argv, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
        tree_rss, tree_cpu = sample_tree(child)
        rc = child.returncode
    after = load1()
    fields = timing.read_text().split()[-4:] if timing.is_file() else []
    wall, user, system, rss_kb = (float(x) for x in fields) if len(fields) == 4 else (None,) * 4
    out = Path(output.replace("$SCRATCH", str(scratch))) if output else None
    row = {"name": name, "command": command.replace(str(scratch), "SCRATCH").replace(f"{PY} ", "python "),
           "wall_s": wall, "cpu_s": None if user is None else round(max(user + system, tree_cpu), 1),
           "peak_rss_gib": None if rss_kb is None else round(rss_kb / 2**20, 2),
           "peak_tree_rss_gib": round(tree_rss / 2**30, 2) if tree_rss else None,
           "disk_mb": None if out is None else (lambda d: None if d is None else round(d, 3))(
               disk_mb(out if out.is_absolute() else REPO / out)),
           "load": [before, after], "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "source": "measurements/costs.py", "note": "" if rc == 0 else f"exit status {rc} (log: {log})",
           "exit_status": rc}
    return row


def measure_once(name: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="costs-") as scratch:
        return measure(name, Path(scratch))


RUN_FIGURES = ("wall_s", "cpu_s", "peak_rss_gib", "peak_tree_rss_gib", "load", "exit_status", "measured_at")


def measure_repeated(name: str, times: int) -> dict[str, Any]:
    """``name`` measured ``times`` times, each after removing its output directory under ``runs/costs`` (so each
    run does the whole work): one row whose figures are the largest of the runs and whose ``runs`` keeps each."""
    output = COMMANDS[name][1]
    runs = []
    for _ in range(times):
        if output and output.startswith(RUNS + "/") and (REPO / output).is_dir():
            shutil.rmtree(REPO / output)
        runs.append(measure_once(name))
        print(json.dumps({k: runs[-1][k] for k in RUN_FIGURES}), flush=True)
    row = dict(runs[-1])
    for key in ("wall_s", "cpu_s", "peak_rss_gib", "peak_tree_rss_gib"):
        values = [r[key] for r in runs if r[key] is not None]
        row[key] = max(values) if values else None
    row["load"] = [runs[0]["load"][0], runs[-1]["load"][-1]]
    row["exit_status"] = next((r["exit_status"] for r in runs if r["exit_status"]), 0)
    row["runs"] = [{k: r[k] for k in RUN_FIGURES} for r in runs]
    return row


def per_episode(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Mean episode wall seconds per benchmark of an eval run directory, with its model and budgets."""
    from unified.eval.fingerprint import run_fingerprint
    from unified.eval.plan import read_plan

    try:
        plan = read_plan(run_dir)
    except Exception:
        return {}
    fp = run_fingerprint(run_dir)
    out = {}
    for b in plan.benchmarks:
        path = run_dir / b.directory / "episodes.jsonl"
        if not path.is_file():
            continue
        walls = [json.loads(line).get("wall_seconds", 0.0) for line in path.read_text().splitlines() if line.strip()]
        if walls:
            out[b.name] = {"seconds": round(sum(walls) / len(walls), 1), "episodes": len(walls),
                           "model": plan.config.model, "max_new_tokens": fp.get("sampling.max_new_tokens"),
                           "max_turns": fp.get("limits.max_turns"), "thinking": fp.get("sampling.thinking")}
    return out


def estimator_section(table: dict[str, Any]) -> str:
    """docs/costs.md's account of the dry run's estimate: the formula, the table's constants and, for every eval row
    that records its settings, the estimate beside the measured wall time."""
    from unified.eval.costs import cost_rows, episode_estimate, row_estimate

    est = table.get("estimator") or {}
    lines = ["## The dry run's time estimate", "",
             "`--dry-run` (and the start of a run) estimates each benchmark's episodes from the `estimator` section of "
             "`unified/eval/costs.json` (`unified.eval.costs.episode_estimate`):", "", "```",
             textwrap.dedent((episode_estimate.__doc__ or "").split("::", 1)[1].split("Raises")[0]).strip("\n"),
             "```", "",
             f"plus {est.get('load_s', '?')} s of loading; episodes are counted one after another. A benchmark, engine or "
             "prompting module the section has no figure for is \"no measurement for this setting\".", "",
             "| constant | value | calibrated on |", "|---|---|---|"]
    notes = est.get("notes") or {}
    for key in ("load_s", "tokens_per_s", "fill", "prompting"):
        lines.append(f"| {key} | `{json.dumps(est.get(key))}` | {notes.get(key, '')} |")
    for name, value in (est.get("benchmarks") or {}).items():
        lines.append(f"| {name} | `{json.dumps(value)}` | {notes.get(name, '')} |")
    lines += ["", "Checked on every eval row that records its settings (tests/test_costs_estimate.py: within 2x, at "
              "least half for a run stopped unfinished):", "", "| row | estimate | measured | ratio |", "|---|---|---|---|"]
    for row in cost_rows(table).values():
        if row.settings:
            seconds = row_estimate(row, table)[0]
            measured = duration(row.wall_s) if row.finished else f"> {duration(row.wall_s)}"
            lines.append(f"| {row.name} | {duration(seconds)} | {measured} | {seconds / row.wall_s:.2f} |")
    return "\n".join(lines) + "\n"


def render(table: dict[str, Any]) -> None:
    (REPO / "docs" / "costs.md").write_text(
        "# Costs: what each command took\n\nThe one place that states a cost; the README, the quickstart and "
        "the demo's banner quote it, the eval's plan line estimates from its calibrated estimator (below).\n"
        "Rewrite it with `python -m measurements.costs --run NAME ...` (`--repeat N`: N runs, min / median / max) "
        "then `--render`.\n\n"
        + render_table(table=table) + "\n\n" + estimator_section(table) + "\nSeconds per episode as measured:\n\n"
        + "| benchmark | s / episode | episodes | model | tokens a call | turns | thinking |\n|---|---|---|---|---|---|---|\n"
        + "".join(f"| {n} | {e['seconds']} | {e['episodes']} | {e['model']} | {e['max_new_tokens']} | {e['max_turns']} "
                  f"| {e['thinking']} |\n" for n, e in (table.get("per_episode") or {}).items()), encoding="utf-8")
    for doc, names in BLOCKS.items():
        path = REPO / doc
        text = path.read_text(encoding="utf-8")
        block = f"{BEGIN}\n{render_table(names, table)}\n{END}"
        text, n = re.subn(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
        if n != 1:
            raise SystemExit(f"{doc}: expected one {BEGIN!r} ... {END!r} block, found {n}")
        path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m measurements.costs",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--run", nargs="+", default=[], metavar="NAME", help="commands to measure (--list)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--render", action="store_true", help="write docs/costs.md and the doc blocks")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="measure each command N times, each from an empty output directory (a rerun would "
                             "resume): one row with every run's figures, the table showing min / median / max")
    args = parser.parse_args(argv)
    if args.list:
        for name, (command, _, heavy) in COMMANDS.items():
            print(f"{name:24s} {'heavy ' if heavy else '      '}{command}")
        return 0
    unknown = [n for n in args.run if n not in COMMANDS]
    if unknown:
        parser.error(f"unknown command(s) {', '.join(unknown)} (--list)")
    table = read_costs()
    table.setdefault("rows", [])
    for name in args.run:
        row = measure_repeated(name, args.repeat) if args.repeat > 1 else measure_once(name)
        print(json.dumps(row), flush=True)
        table["rows"] = [r for r in table["rows"] if r["name"] != name] + [row]
        order = list(COMMANDS)
        table["rows"].sort(key=lambda r: order.index(r["name"]) if r["name"] in order else len(order))
        run_dir = REPO / COMMANDS[name][0].split("--out ")[-1].split()[0] if "--out " in COMMANDS[name][0] else None
        if run_dir is not None and name.startswith("eval_"):
            table.setdefault("per_episode", {}).update(per_episode(run_dir))
        table["machine"] = machine()
        COSTS_FILE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    if args.render:
        render(table)
    return 0


if __name__ == "__main__":
    shutil.which("flock") or print("measurements.costs: flock not found", file=sys.stderr)
    raise SystemExit(main())
