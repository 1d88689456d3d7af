"""Replay the collapse guard's rollback on a finished ``--eval-before-after`` run that only logged it.

    python scripts/warmup_guard_replay.py RUN_DIR [--rise 0.15] [--rollout-share X]

A run made with ``monitor.on_collapse=log``, ``monitor.probe_size=P`` and ``train.save_steps=1``
holds every step's weights and the guard's per-step figures in ``metrics.jsonl``. The guard reads
the weights without changing them and leaves the RNG alone, so the run is, step for step, the
run that ``on_collapse=rollback`` would have made up to its first collapsed step k; the rollback
run then writes the weights of step k-1 to ``final/``. This program finds k for the given
thresholds, scores ``checkpoint-(k-1)`` (the start when k = 1: difference 0 on every prompt) on
the run's held-out split with the run's "before" settings, and prints both paired differences:
the run as it went (no guard) and with the rollback. A measurement program, not library API.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def first_collapse(records: list[dict], rise: float | None, rollout_share: float | None) -> int | None:
    for r in sorted((r for r in records if "reward" in r), key=lambda r: r["step"]):
        if rise is not None and r.get("probe/loop_rise") is not None and r["probe/loop_rise"] >= rise - 1e-9:
            return int(r["step"])
        if rollout_share is not None and (r.get("degenerate/loop_share") or 0.0) >= rollout_share:
            return int(r["step"])
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--rise", type=float, default=None, help="monitor.max_probe_loop_rise")
    parser.add_argument("--rollout-share", type=float, default=None, help="monitor.max_rollout_loop_share")
    parser.add_argument("--step", type=int, default=None,
                        help="score checkpoint-STEP instead (as if the guard had kept it): a run's held-out curve")
    args = parser.parse_args(argv)

    from unified.warmup.benchmark import REPORT_FILE, heldout_reward, paired_difference
    from unified.warmup.callbacks import METRICS_FILE, read_metrics
    from unified.warmup.config import load_warmup_config
    from unified.warmup.degenerate import loop_count

    run = Path(args.run_dir)
    report = json.loads((run / REPORT_FILE).read_text())
    k = first_collapse(read_metrics(run / METRICS_FILE), args.rise, args.rollout_share)
    if args.step is not None:
        k = args.step + 1
    out = {"run": str(run), "collapsed_at": k, "unguarded": report["paired"],
           "unguarded_loops": report.get("loops")}
    before = report["before"]["per_prompt"]
    if k is None:
        out.update(kept_step=report["steps"], guarded=report["paired"], guarded_loops=report.get("loops"))
    elif k == 1:
        out.update(kept_step=0, guarded=paired_difference(before, before),
                   guarded_loops={"before": loop_count(report["before"]["completions_text"]),
                                  "after": loop_count(report["before"]["completions_text"])})
    else:
        import torch

        from unified.models import load_checkpoint
        from unified.warmup.data import load_rewards, load_splits

        cfg = load_warmup_config(run / "recipe.resolved.yaml")
        loaded = load_checkpoint(str(run / f"checkpoint-{k - 1}"), dtype=torch.float32)
        heldout = load_splits(cfg, loaded.tokenizer).heldout
        assert [str(s) for s in heldout["sample_id"]] == report["settings"]["heldout"], "another held-out split"
        funcs, weights = load_rewards(cfg, training=False)
        s = report["settings"]
        after = heldout_reward(loaded.model, loaded.tokenizer, heldout, funcs, weights,
                               samples_per_prompt=s["samples_per_prompt"], max_new_tokens=s["max_new_tokens"],
                               temperature=s["temperature"], top_p=s["top_p"], seed=s["seed"],
                               thinking=s.get("thinking", s.get("enable_thinking", False)), batch_size=s["batch_size"],
                               cpu_threads=cfg.generation.cpu_threads)
        out.update(kept_step=k - 1, guarded=paired_difference(before, after["per_prompt"]),
                   guarded_loops={"before": loop_count(report["before"]["completions_text"]),
                                  "after": loop_count(after["completions_text"])},
                   guarded_after=after)
    name = "guard_replay.json" if args.step is None else f"heldout_step{args.step}.json"
    (run / name).write_text(json.dumps(out, indent=2))
    g, u = out["guarded"], out["unguarded"]
    print(f"{run.name}: unguarded {u['mean_diff']:+.2f} +- {u['se_diff']:.2f} ({u['up']} up, {u['down']} down); "
          f"collapse at step {k}; guarded (weights of step {out['kept_step']}) {g['mean_diff']:+.2f} +- "
          f"{g['se_diff']:.2f} ({g['up']} up, {g['down']} down); loops after {out['guarded_loops']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
