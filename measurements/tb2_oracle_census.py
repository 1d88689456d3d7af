"""Oracle pass rate of Terminal-Bench task folders on podman without a registry, sorted by cause.

    python -m measurements.tb2_oracle_census ROOT OUT_DIR [--seed 0] [--count 12] [--exclude TASK=REASON ...]
    python -m measurements.tb2_oracle_census ROOT OUT_DIR --tasks ID,ID,...   # these, not a sample

Every task under ROOT is classified without running anything: ``unsupported`` (the adapter
skips it, or ``--exclude`` names why) or ``cannot rebuild the base`` (a ``FROM`` that is not
Debian/Ubuntu). Of the rest, ``--count`` tasks drawn with ``random.Random(seed).sample`` over
the sorted ids (or the ``--tasks`` named) are built (``python -m unified.execution.images build``) and run with the gold
policy (``python -m unified.eval --model gold``, ``build=always``, podman), one run each, every
step under ``flock /tmp/unified-heavy.lock``. Causes: ``pass`` (reward 1), ``tampered`` (the oracle
changed the verifier's toolchain, e.g. ``apt-get install``: scored 0 whatever the verifier said), ``solution fail``
(the verifier ran, reward 0), ``infrastructure`` (the image build or the verifier could not
fetch what it needs), ``not finished`` (over :data:`RUN_LIMIT_S`), ``other error``. OUT_DIR gets ``census.jsonl`` (a line a task) and
``census.md`` (the table). ``--batch`` builds every task in one locked step and runs them in one locked gold run (the lock is
waited for twice, not twice a task). Needs ``$CONTAINERS_CONF`` where podman's start probe asks for it.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from evaluators.terminal_bench.tasks import load_tasks
from unified.execution.images import CannotRebuild, base_recipe, from_images
from unified.execution.images.engines import UV_IMAGE
from unified.execution.infra import infrastructure_evidence
from unified.store import append_jsonl, read_jsonl, write_text_atomic

LOCK = ["flock", "/tmp/unified-heavy.lock", "nice", "-n", "10"]
RUN_LIMIT_S = 600
"""A gold run's wall-time cap here (the shared machine's rule for one locked command); over it: ``not finished``."""


def classify_static(task, excluded: dict[str, str]) -> tuple[str, str] | None:
    if task.id in excluded:
        return "unsupported", excluded[task.id]
    if task.skip_reason:
        return "unsupported", task.skip_reason.splitlines()[0]
    if not task.build_context:
        return "unsupported", "no environment/Dockerfile (prebuilt image only)"
    try:
        for ref in from_images(Path(task.build_context) / "Dockerfile"):
            if not UV_IMAGE.fullmatch(ref):
                base_recipe(ref)
    except CannotRebuild as exc:
        return "cannot rebuild the base", str(exc).split(": ", 1)[0]
    return None


def _containers() -> list[str]:
    proc = subprocess.run(["podman", "ps", "-a", "--filter", "label=unified.session", "--format", "{{.Names}}"],
                          capture_output=True, text=True)
    return proc.stdout.split()


def run_one(task_id: str, root: Path, out: Path, limit_s: int = RUN_LIMIT_S) -> dict:
    start = time.monotonic()
    build = subprocess.run([*LOCK, "timeout", "900", sys.executable, "-m", "unified.execution.images", "build", str(root / task_id),
                            "--jsonl", str(out / "builds.jsonl")], capture_output=True, text=True)
    line = build.stdout.strip().splitlines()[-1] if build.stdout.strip() else build.stderr.strip()[-300:]
    if build.returncode != 0:
        evidence = infrastructure_evidence(build.stdout + build.stderr)
        cause = "infrastructure" if evidence else "other error"
        return {"task": task_id, "cause": cause, "why": "image build failed: " + (evidence[0] if evidence else line),
                "seconds": round(time.monotonic() - start)}
    run_dir = out / "runs" / task_id
    before = set(_containers())
    ran = subprocess.run(_eval_argv([task_id], root, run_dir, limit_s), capture_output=True, text=True)
    if ran.returncode == 124:  # the killed run could not remove its container
        for name in set(_containers()) - before:
            subprocess.run(["podman", "rm", "-f", name], capture_output=True)
        return {"task": task_id, "cause": "not finished", "why": f"over the census's {limit_s} s cap",
                "seconds": round(time.monotonic() - start)}
    return {"task": task_id, "seconds": round(time.monotonic() - start), **summarize(run_dir)}


def _eval_argv(task_ids: list[str], root: Path, run_dir: Path, limit_s: int) -> list[str]:
    return [*LOCK, "timeout", str(limit_s), sys.executable, "-m", "unified.eval", "--benchmarks", "terminal_bench_2",
            "--model", "gold", "--runs", "1", "--task-ids", ",".join(task_ids), "--out", str(run_dir),
            "--set", f"benchmarks.terminal_bench_2.root={root}", "--set", "benchmarks.terminal_bench_2.backend=podman",
            "--set", "benchmarks.terminal_bench_2.build=always",
            # the gold replay of solve.sh goes through the tool-calling agent's shell: what is measured is the
            # verifier, and Terminus-2 (the default agent) would need harbor's own interpreter besides
            "--set", "benchmarks.terminal_bench_2.agent=tool_calling"]


def run_batch(task_ids: list[str], root: Path, out: Path, limit_s: int = RUN_LIMIT_S) -> dict[str, dict]:
    """Every task built in one locked step, then one locked gold run of all that built (``--batch``: on a busy
    machine the lock is waited for twice, not twice a task); a rerun resumes the run's records."""
    start = time.monotonic()
    builds = out / "builds.jsonl"
    seen = len(read_jsonl(builds)) if builds.exists() else 0
    subprocess.run([*LOCK, "timeout", str(900 * len(task_ids)), sys.executable, "-m", "unified.execution.images", "build",
                    *[str(root / t) for t in task_ids], "--jsonl", str(builds)], capture_output=True, text=True)
    built = {r["task"]: r for r in read_jsonl(builds)[seen:]} if builds.exists() else {}
    rows: dict[str, dict] = {}
    for task_id in task_ids:
        b = built.get(task_id)
        if b is None or b["status"] != "built":
            reason = b["reason"] if b else "the build step ended before this task (its time limit?)"
            evidence = infrastructure_evidence(reason)
            rows[task_id] = {"task": task_id, "cause": "infrastructure" if evidence else "other error",
                             "why": "image build failed: " + (evidence[0] if evidence else reason.splitlines()[0][:200])}
    runnable = [t for t in task_ids if t not in rows]
    run_dir = out / "runs" / "batch"
    if runnable:
        before = set(_containers())
        ran = subprocess.run(_eval_argv(runnable, root, run_dir, limit_s * len(runnable)), capture_output=True, text=True)
        if ran.returncode == 124:
            for name in set(_containers()) - before:
                subprocess.run(["podman", "rm", "-f", name], capture_output=True)
    for task_id in runnable:
        row = summarize(run_dir, task_id)
        if row["why"] == "no result recorded":
            row = {"cause": "not finished", "why": f"the batch's {limit_s * len(runnable)} s cap ended before it"}
        rows[task_id] = {"task": task_id, **row}
    for row in rows.values():
        row["batch_seconds"] = round(time.monotonic() - start)
    return rows


def summarize(run_dir: Path, task_id: str | None = None) -> dict:
    """``{"cause", "why"}`` of a gold run's recorded result (the decisive evidence line first): ``task_id``'s
    last record, or the run's last."""
    results = read_jsonl(run_dir / "terminal_bench_2" / "results.jsonl") if (run_dir / "terminal_bench_2").is_dir() else []
    results = [r for r in results if task_id is None or r.get("task_id") == task_id]
    if not results:
        return {"cause": "other error", "why": "no result recorded"}
    r = results[-1]
    err = r.get("error")
    verifier = _verifier_kind(r)
    if err:
        lines = err.splitlines()
        decisive = next((ln for ln in lines[1:] if "Failed to download" in ln or "interpreter:" in ln),
                        lines[1] if len(lines) > 1 else "")
        cause = "infrastructure" if err.startswith("infrastructure") else "other error"
        confirmed = " (reproduced without the agent)" if "reproduced without the agent" in err else ""
        return {"cause": cause, "verifier": verifier, "why": f"{lines[0]}{confirmed}: {decisive}"[:300]}
    if r.get("skipped"):
        return {"cause": "unsupported", "why": r["skipped"].splitlines()[0]}
    if r["details"].get("tampered"):
        changed = r["details"]["tampered"].split("scored 0: ", 1)[-1]
        return {"cause": "tampered", "verifier": verifier,
                "why": f"verifier's reward {r['details'].get('reward_claimed')}; changed: {changed}"[:300]}
    if r["score"] >= 1.0:
        return {"cause": "pass", "why": "", "verifier": verifier}
    tail = (r["details"].get("verifier_output") or "")[-200:].replace("\n", " ")
    return {"cause": "solution fail", "verifier": verifier, "why": f"reward {r['details'].get('reward')}; "
            f"{r['details'].get('reward_error') or ''}{tail}"}


def _verifier_kind(result: dict) -> str:
    """``pristine`` when the private verifier ran on the image's own toolchain copy, else what ran instead."""
    details = result.get("details") or {}
    pristine = str(details.get("pristine_toolchain") or "")
    kept = str(details.get("agent_processes") or "").startswith("kept running")
    if kept and pristine and not pristine.startswith("none"):
        return "pristine"
    return "plain (" + (pristine or str(details.get("agent_processes") or "unknown"))[:80] + ")"


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--exclude", action="append", default=[], help="TASK=REASON (unsupported)")
    parser.add_argument("--run-limit", type=int, default=RUN_LIMIT_S, help="seconds a gold run may take")
    parser.add_argument("--tasks", default="", help="ID,ID,...: run these (in this order) instead of a sample")
    parser.add_argument("--batch", action="store_true", help="build all in one locked step, run all in one locked run")
    parser.add_argument("--report-only", action="store_true", help="write the table from what census.jsonl holds")
    args = parser.parse_args()
    excluded = dict(item.split("=", 1) for item in args.exclude)
    tasks, broken = load_tasks(args.root)
    rows = [{"task": name, "cause": "unsupported", "why": err.splitlines()[0]} for name, err in broken]
    runnable = []
    for task in tasks:
        static = classify_static(task, excluded)
        if static:
            rows.append({"task": task.id, "cause": static[0], "why": static[1]})
        else:
            runnable.append(task.id)
    named = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in named if t not in {task.id for task in tasks}]
    if unknown:
        parser.error(f"--tasks: no such task under {args.root}: {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if named:
        sample = [t for t in named if t in runnable]
        how = "named"
    else:
        sample = sorted(random.Random(args.seed).sample(sorted(runnable), min(args.count, len(runnable))))
        how = f"sampled (seed {args.seed})"
    print(f"{len(tasks) + len(broken)} tasks; {len(runnable)} buildable; {how}: {sample}", flush=True)
    done = {r["task"]: r for r in read_jsonl(args.out / "census.jsonl")} if (args.out / "census.jsonl").exists() else {}
    todo = [t for t in sample if t not in done]
    if args.batch and todo and not args.report_only:
        for task_id, row in run_batch(todo, args.root, args.out, args.run_limit).items():
            done[task_id] = row
            append_jsonl(args.out / "census.jsonl", row)
    for task_id in sample:
        if task_id not in done and args.report_only:
            done[task_id] = {"task": task_id, "cause": "sampled, not run", "why": "the session's time ran out"}
        elif task_id not in done:
            done[task_id] = run_one(task_id, args.root, args.out, args.run_limit)
            append_jsonl(args.out / "census.jsonl", done[task_id])
        elif done[task_id]["cause"] not in ("not finished",) and (args.out / "runs" / task_id).is_dir():
            done[task_id].update(summarize(args.out / "runs" / task_id))  # read again from the run's own record
        elif done[task_id]["cause"] not in ("not finished",) and (args.out / "runs" / "batch").is_dir():
            again = summarize(args.out / "runs" / "batch", task_id)
            if again["why"] != "no result recorded":
                done[task_id].update(again)
        print(json.dumps(done[task_id]), flush=True)
    rows += [done[t] for t in sample]
    rows += [{"task": t, "cause": "not sampled", "why": ""} for t in runnable if t not in sample]
    if named:
        rows = [r for r in rows if r["task"] in named]
    counts = Counter(r["cause"] for r in rows)
    ran = sum(done[t]["cause"] != "sampled, not run" for t in sample)
    lines = [f"{len(rows)} tasks, {len(runnable)} buildable, {len(sample)} {how}, {ran} run", "",
             "| cause | tasks |", "|---|---:|", *[f"| {c} | {n} |" for c, n in counts.most_common()], "",
             "| task | cause | verifier | why | s |", "|---|---|---|---|---:|"]
    grouped = ("not sampled", "cannot rebuild the base")
    lines += [f"| {r['task']} | {r['cause']} | {r.get('verifier', '')} | {r['why'].replace('|', '/')[:160]} | {r.get('seconds', r.get('batch_seconds', ''))} |"
              for r in sorted(rows, key=lambda r: (r["cause"], r["task"])) if r["cause"] not in grouped]
    bases = Counter(r["why"] for r in rows if r["cause"] == "cannot rebuild the base")
    lines += ["", "| cannot rebuild the base | tasks |", "|---|---:|", *[f"| {b} | {n} |" for b, n in bases.most_common()]]
    write_text_atomic(args.out / "census.md", "\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
