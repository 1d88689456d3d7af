"""``python -m unified.warmup``: GSPO world-model warmup from a recipe.

    python -m unified.warmup --recipe recipes/warmup/embedded_cpu.yaml
    python -m unified.warmup --recipe recipes/warmup/qwen35_35b_a3b.yaml --dry-run
    python -m unified.warmup --recipe R --model DIR --data data/lwm --output-dir runs/x --set train.max_steps=20
    python -m unified.warmup --recipe R --eval-before-after      # held-out reward before/after training

Rerunning the same command after a crash resumes from the last complete checkpoint
(``resume: auto``). The output dir records the recipe it trains (``identity.json``); a rerun
with another recipe stops with one line naming the differing keys. Settings that would fail
after the weights load (a misspelt model spec, a rubric reward without a judge, missing data)
stop the command at once, and ``--dry-run`` lists them after the plan. The trained weights land in ``<output_dir>/final``, a Hugging Face
directory that ``python -m unified.eval --model <output_dir>/final`` loads unchanged.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from unified.config import ArgumentParser, ConfigError, add_recipe_arguments, dump_yaml
from unified.registry import UnknownNameError
from unified.warmup.agentic_checks import IGNORED_LINE, ignored_settings
from unified.warmup.plan import describe as describe_plan


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m unified.warmup", description=__doc__.splitlines()[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe_arguments(parser)
    parser.add_argument("--model", help="shortcut for --set model.name_or_path=SPEC")
    parser.add_argument("--data", action="append", help="shortcut for --set data.train=[PATH] (repeatable)")
    parser.add_argument("--output-dir", help="shortcut for --set output_dir=DIR")
    parser.add_argument("--eval-before-after", action="store_true",
                        help="measure the mean reward on the held-out split before and after training "
                             "(data.heldout_size or data.heldout) and write <output_dir>/before_after.json")
    parser.add_argument("--heldout-samples", type=int, default=2,
                        help="completions per held-out prompt for --eval-before-after (default 2)")
    parser.add_argument("--heldout-temperature", type=float, default=None,
                        help="sampling temperature of the --eval-before-after scoring (default: the recipe's; "
                             "0 = greedy, one completion per prompt)")
    parser.add_argument("--print-command", action="append", choices=["trainer", "vllm", "rollout-gate"],
                        help="print the shell command of one role of the launch plan (empty if the layout has "
                             "none; rollout-gate: the key gate up to its --, which a server command follows) and "
                             "exit; repeatable: one line per role, in order; used by slurm/lwm_warmup.sh")
    parser.add_argument("--plan", action="store_true",
                        help="print the memory/time plan of the recipe's layout (unified/warmup/plan.py) and exit: "
                             "0 it fits, 2 it does not")
    parser.add_argument("--resume-anyway", action="store_true",
                        help="continue the output dir's checkpoint even though it was trained with another recipe")
    parser.add_argument("--log-level", default="WARNING")
    return parser


def _overrides(args) -> list[str]:
    sets = list(args.set)
    if args.model:
        sets.append(f"model.name_or_path={args.model}")
    if args.data:
        sets.append("data.train=[" + ", ".join(json.dumps(d) for d in args.data) + "]")
    if args.output_dir:
        sets.append(f"output_dir={args.output_dir}")
    return sets


def kernels_line(cfg) -> str:
    """``--dry-run``'s line of the kernels training would select on this machine, and why."""
    import torch

    from unified.kernels import select_kernels
    from unified.warmup.trainer import training_device, use_bf16

    device = training_device()
    dtype = torch.bfloat16 if use_bf16(cfg, device) else torch.float32
    choice = select_kernels(device, dtype, attention=cfg.model.attn_implementation,
                            experts=cfg.model.experts_implementation)
    return (f"# kernels on this machine ({device.type}, {str(dtype).removeprefix('torch.')}): "
            f"attention={choice.attention} "
            f"experts={choice.experts} linear_attention={choice.linear_attention} ({choice.reason})")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper(), logging.WARNING),
                        format="%(levelname)s %(name)s: %(message)s")
    from unified.warmup.config import describe, is_agentic, load_warmup_config

    overrides = _overrides(args)
    try:
        cfg = load_warmup_config(args.recipe, overrides)
    except (ConfigError, UnknownNameError, ValueError) as exc:  # ValueError: a section's own checks
        print(f"unified.warmup: {exc}", file=sys.stderr)
        return 2
    from unified.warmup.identity import WarmupIdentityMismatch, check_output_dir, record_output_dir
    from unified.warmup.preflight import problems

    found = problems(cfg)
    try:
        accepted = check_output_dir(cfg, resume_anyway=args.resume_anyway)
    except WarmupIdentityMismatch as exc:
        found.append(str(exc))
        accepted = []
    if args.plan:
        print(describe_plan(cfg))
        for line in found:
            print(f"unified.warmup: {line}", file=sys.stderr)
        return 2 if found else 0
    if found and not args.dry_run:
        for line in found:
            print(f"unified.warmup: {line}", file=sys.stderr)
        return 2
    if args.print_command:
        from unified.warmup.launch import LaunchStep, launch_plan, rollout_gate_argv, step_for_role

        steps = launch_plan(cfg, args.recipe, overrides, resume_anyway=args.resume_anyway)
        steps.append(LaunchStep("rollout-gate", "node 0", rollout_gate_argv(cfg)))
        lines = [step.shell() if step else "" for step in (step_for_role(steps, r) for r in args.print_command)]
        if any("\n" in line for line in lines):  # the script reads one line per role
            print("unified.warmup: a launch command contains a line break (in a path or a --set value)",
                  file=sys.stderr)
            return 2
        print("\n".join(lines))
        return 0
    if args.dry_run:
        from unified.warmup.launch import format_plan, launch_plan, vllm_rollouts_blocker

        print("# resolved recipe" + (f" ({args.recipe})" if args.recipe else ""))
        print(dump_yaml(cfg), end="")
        print("# objective: " + json.dumps(describe(cfg)))
        if is_agentic(cfg):
            for setting in ignored_settings(cfg):
                print("# " + IGNORED_LINE.format(setting))
        print(f"# launch: {cfg.launch.nodes} node(s) x {cfg.launch.gpus_per_node} GPU(s), "
              f"distributed={cfg.launch.distributed}, generation={cfg.generation.backend}")
        print(format_plan(launch_plan(cfg, args.recipe, overrides)))
        print(kernels_line(cfg))
        print(describe_plan(cfg))
        blocker = vllm_rollouts_blocker(cfg)
        if blocker:
            print(f"# not on this machine: {blocker}")
        for line in found:
            print(f"unified.warmup: {line}", file=sys.stderr)
        return 2 if found else 0
    from unified.warmup.preflight import judge_problems

    dead = judge_problems(cfg)  # one real request per judge endpoint, before anything is written or loaded
    if dead:
        for line in dead:
            print(f"unified.warmup: {line}", file=sys.stderr)
        return 2
    record_output_dir(cfg, accepted)

    from unified.warmup.preempt import PREEMPTED_EXIT, Preempted

    if is_agentic(cfg):  # the rollouts are agent episodes of the benchmark's environment
        from unified.warmup.agentic import run_agentic

        try:
            report = run_agentic(cfg)
        except Preempted as stop:  # SIGUSR1 / preempt.request: checkpoint-N saved; a rerun resumes at N + 1
            print(f"unified.warmup: {stop}", file=sys.stderr, flush=True)
            return PREEMPTED_EXIT
        if report.get("stopped"):  # the fail-fast monitor (zero-variance groups, unscored episodes): checkpoint saved
            from unified.warmup.failfast import STOP_EXIT_STATUS, stop_message

            print(stop_message(report["stopped"]), file=sys.stderr, flush=True)
            return STOP_EXIT_STATUS
        print(json.dumps({k: report[k] for k in ("benchmark", "before", "after", "difference", "already_finished")
                          if k in report}, indent=2))
        return 0
    from unified.warmup.trainer import run_warmup

    try:
        if args.eval_before_after:
            from unified.warmup.benchmark import run_before_after

            report = run_before_after(cfg, samples_per_prompt=args.heldout_samples,
                                      temperature=args.heldout_temperature)
            print(json.dumps(report, indent=2))
            return 0
        result = run_warmup(cfg)
    except ConfigError as exc:  # settings that only the loaded data can check (e.g. the generation batch)
        print(f"unified.warmup: {exc}", file=sys.stderr)
        return 2
    except Preempted as stop:  # SIGUSR1 / preempt.request: checkpoint saved, not finished (slurm requeues)
        print(f"unified.warmup: {stop}", file=sys.stderr, flush=True)
        return PREEMPTED_EXIT
    if result.already_finished:
        return 0
    if result.stopped:
        from unified.warmup.failfast import STOP_EXIT_STATUS, stop_message

        print(stop_message(result.stopped), file=sys.stderr, flush=True)
        return STOP_EXIT_STATUS
    from unified.warmup.guard import final_weights_note

    print(f"unified.warmup: {result.global_step} steps, {result.seconds_per_step:.2f}s/step; "
          f"checkpoint: {result.final_dir}; {final_weights_note(result.collapse, result.global_step)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
