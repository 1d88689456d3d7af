"""``python -m unified.eval``: evaluate a checkpoint as a multi-turn agent on benchmark suites.

Examples::

    python -m unified.eval --suite ood --model embedded --limit 5
    python -m unified.eval --benchmarks bfcl_v4 --set benchmarks.bfcl_v4.categories=multi_turn \\
        --model openai:http://127.0.0.1:8000/v1#Qwen/Qwen3.5-35B-A3B --out runs/sft
    python -m unified.eval --recipe recipes/eval/ood.yaml --set limit=20
    python -m unified.eval --compare runs/sft runs/lwm
    python -m unified.eval --suite ood --out runs/x/shard-1 --shard 1/4     # one of 4 jobs
    python -m unified.eval --merge runs/x/shard-0 runs/x/shard-1 runs/x/shard-2 runs/x/shard-3 --out runs/x
    python -m unified.eval lwm --model embedded --judge embedded --out runs/lwm_eval   # world-model eval
    python -m unified.eval --suite general --model embedded --set general.limit=50   # lm-eval tasks
    python -m unified.eval --suite general,ood --model runs/lwm/final --set general.tasks=gsm8k,ifeval

``lwm`` is a subcommand with its own options (``python -m unified.eval lwm --help``): the
world-model eval on AgentWorldBench records is a single-turn prediction task with a judge, not an
agent suite. Flags override the recipe; ``--set KEY=VALUE`` reaches any key of :class:`EvalConfig`.
Rerunning the same command resumes: finished (task, trial) pairs are not run again. ``--out``
records what defines its results (``identity.json``: model, prompting, sampling, limits, benchmark
settings); a rerun that differs stops with one line naming the difference. Ctrl-C writes the
summary of what finished and exits 130. ``--list`` shows the benchmarks, suites and prompting modules.
Every run writes its plan first (``OUT/plan.json``, :mod:`unified.eval.plan`); ``--dry-run`` prints the
config and that plan (the adapters list their tasks; ``--out`` is only read) and writes nothing.
``--merge`` joins shard directories from their records and plans alone (:mod:`unified.eval.merge`).
"""

from __future__ import annotations

import argparse
import sys

from unified.config import (ArgumentParser, ConfigError, add_recipe_arguments, apply_overrides, dump_yaml, flag_type,
                             from_dict, mark_overrides, read_yaml)
from unified.config.cli import plain_text
from unified.benchmarks.discovery import adapter_paths, check_benchmark_config
from unified.eval.config import EvalConfig
from unified.eval.identity import RESUME_ANYWAY_FLAG, dry_run_line
from unified.eval.preflight import PreflightError, check_names
from unified.eval.merge import ShardError, merge_runs
from unified.eval.plan import plan_lines, plan_run
from unified.eval.shards import shard_type
from unified.eval.rundir import RunDirError
from unified.eval.runner import EvalInterrupted, benchmarks_to_run, engine_for, run_eval, with_benchmark_names
from unified.registry import UnknownNameError

# flag -> config key (flags left at None do not override the recipe)
_FLAG_KEYS = {
    "suite": "suite", "benchmarks": "benchmarks", "model": "model", "backend": "backend", "prompting": "prompting",
    "out": "out", "split": "split", "limit": "limit", "task_ids": "task_ids", "runs": "runs", "max_in_flight": "max_in_flight",
    "scheduling": "scheduling",
    "temperature": "sampling.temperature", "top_p": "sampling.top_p", "max_new_tokens": "sampling.max_new_tokens",
    "thinking": "sampling.thinking", "seed": "sampling.seed", "max_turns": "limits.max_turns",
    "max_steps_per_turn": "limits.max_steps_per_turn", "max_episode_tokens": "limits.max_episode_tokens",
    "max_seconds": "limits.max_seconds", "shard": "shard",
}


PRESETS: dict[str, dict[str, object]] = {
    # a quick look on a laptop: one task per benchmark, one trial, short turns, no <think> block, few turns
    "quick": {"limit": 1, "runs": 1, "max_new_tokens": 128, "thinking": False, "max_turns": 4},
}
"""``--preset NAME``: flag values over the recipe's; ``--set`` and the command's own flags win over them."""


def _flag(flag: str, kind: type = int):
    """The argparse type of a numeric flag: the bounds of the config field it sets (``--limit 0``,
    ``--runs -3`` are usage errors naming the flag and the value)."""
    return flag_type(EvalConfig, _FLAG_KEYS[flag], kind)


def build_parser() -> argparse.ArgumentParser:
    doc = plain_text(__doc__)
    parser = ArgumentParser(prog="python -m unified.eval", description=f"{doc.splitlines()[0]}\n\n{SUBCOMMANDS}",
                            epilog="\n".join(doc.splitlines()[2:]) + "\npython -m unified.eval --list: the benchmarks "
                                   "(suites, what each needs), suites and prompting modules",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="quick: a laptop look (--limit 1 --runs 1 --max-new-tokens 128 --no-thinking "
                             "--max-turns 4); any flag given as well wins; recorded like the flags")
    parser.add_argument("--list", action="store_true",
                        help="list the benchmarks (their suites and what each needs), suites and prompting "
                             "modules, then exit")
    parser.add_argument("--suite", help="ood | in_domain | all | general | any suite an installed adapter "
                        "declares; several comma-separated (general = lm-evaluation-harness tasks, options under "
                        "--set general.KEY=VALUE; `all` = in_domain + ood)")
    parser.add_argument("--benchmarks", nargs="+", help="benchmark names (comma or space separated)")
    parser.add_argument("--model", help="embedded | CHECKPOINT_DIR | FILE.gguf | openai:URL#MODEL | vllm:PATH | gold")
    parser.add_argument("--backend", choices=["auto", "hf", "vllm", "openai"],
                        help="engine of a local checkpoint: hf (in-process), vllm (a vLLM server) or auto (the "
                             "default: vllm on a CPU machine where `make vllm` was run, else hf; "
                             "$UNIFIED_EVAL_BACKEND replaces it)")
    parser.add_argument("--prompting", help="prompting module (act, predict_then_act, ...)")
    parser.add_argument("--out", help="run directory (results, summary); rerun the same command to resume")
    parser.add_argument(RESUME_ANYWAY_FLAG, action="store_true",
                        help="resume --out even though it holds results of another model/prompting/sampling "
                             "(its summary then mixes both)")
    parser.add_argument("--split", help="benchmark-specific split/categories")
    parser.add_argument("--limit", type=_flag("limit"), help="tasks per benchmark")
    parser.add_argument("--task-ids", nargs="+", help="only these task ids (comma or space separated; "
                        "the tasks they depend on come along)")
    parser.add_argument("--runs", type=_flag("runs"), help="rollouts per task (default: the benchmark's protocol)")
    parser.add_argument("--max-in-flight", type=_flag("max_in_flight"),
                        help="episodes generated together (hf batch size)")
    parser.add_argument("--scheduling", choices=["auto", "continuous", "rounds"],
                        help="continuous batching (a request joins the decoding batch when ready; auto: where the "
                             "backend has it) or rounds (requests that arrive together decode as one batch)")
    parser.add_argument("--temperature", type=_flag("temperature", float))
    parser.add_argument("--top-p", type=_flag("top_p", float))
    parser.add_argument("--max-new-tokens", type=_flag("max_new_tokens"), help="per policy call")
    parser.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None,
                        help="open a <think> block in the generation prompt")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--max-turns", type=_flag("max_turns"), help="policy calls per episode")
    parser.add_argument("--max-steps-per-turn", type=_flag("max_steps_per_turn"), help="policy calls per user turn")
    parser.add_argument("--max-episode-tokens", type=_flag("max_episode_tokens"), help="generated tokens per episode")
    parser.add_argument("--max-seconds", type=_flag("max_seconds", float), help="wall time per episode")
    parser.add_argument("--shard", type=shard_type, metavar="I/N",
                        help="run only shard I of N of the (task, trial) pairs (one job of an array; --merge joins them)")
    parser.add_argument("--merge", nargs="+", metavar="SHARD_DIR",
                        help="merge the --out directories of all N shards of one command into --out")
    parser.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"), help="print the delta table of two runs")
    parser.add_argument("--wandb", nargs="?", const="offline", choices=["offline", "online"],
                        help="log the run (config, per-benchmark numbers, episode table) to wandb under OUT/wandb "
                             "once its summary is written; offline unless `--wandb online`")
    add_recipe_arguments(parser)
    return parser


def load_eval_config(args: argparse.Namespace) -> EvalConfig:
    data, lines, source = {}, {}, ""
    if args.recipe:
        data, lines = read_yaml(args.recipe)
        source = str(args.recipe)
    for flag, value in PRESETS.get(getattr(args, "preset", None) or "", {}).items():  # over the recipe, under
        node = data                                                                      # --set and the flags
        *parents, last = _FLAG_KEYS[flag].split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    flags = []
    for flag, key in _FLAG_KEYS.items():
        value = getattr(args, flag, None)
        if value is None:
            continue
        if flag in ("benchmarks", "task_ids"):
            value = [p.strip() for item in value for p in item.split(",") if p.strip()]
        flags.append((key, value))
    # the adapter contract documents per-benchmark config as benchmarks.NAME.KEY
    overrides = [("benchmark_config." + o[len("benchmarks."):]) if o.startswith("benchmarks.") else o
                 for o in args.set]
    apply_overrides(data, overrides)
    mark_overrides(lines, overrides)
    for key, value in flags:
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return from_dict(EvalConfig, data, lines=lines, source=source)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [LWM_COMMAND]:
        return _run_lwm(argv[1:])
    parser = build_parser()
    suite_only = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    suite_only.add_argument("--suite")
    suite = suite_only.parse_known_args(argv)[0].suite
    if suite and LWM_COMMAND in [part.strip() for part in suite.split(",")]:
        if suite.strip() != LWM_COMMAND:
            parser.error(f"--suite {suite}: the world-model eval is a subcommand, not a suite: run "
                         f"`python -m unified.eval {LWM_COMMAND} ...` on its own")
        print(f"note: `--suite {LWM_COMMAND}` is deprecated; use `python -m unified.eval {LWM_COMMAND} ...`",
              file=sys.stderr)
        return _run_lwm(_without_suite(argv))
    args = parser.parse_args(argv)
    if args.list:
        from unified.eval.preflight import listing

        print(listing())
        return 0
    if args.compare:
        from unified.eval.report import compare

        try:
            print(compare(*args.compare))
        except (ConfigError, FileNotFoundError) as exc:  # not a run directory, or a summary.json that is not one
            parser.exit(2, f"{parser.prog}: error: --compare: {exc}\n")
        return 0
    if args.merge:
        return _merge(parser, args)
    try:
        cfg = load_eval_config(args)
        check_names(cfg)
    except (ConfigError, KeyError, PreflightError) as exc:
        parser.error(str(exc))
    if args.dry_run:
        return _dry_run(parser, cfg)
    try:
        summary = run_eval(cfg, resume_anyway=args.resume_anyway)
    except EvalInterrupted as exc:  # Ctrl-C: the summary of what finished is on disk
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 130
    except (UnknownNameError, ConfigError) as exc:  # a misspelt name ("did you mean"), options that cannot run
        parser.error(str(exc))
    except RunDirError as exc:  # --out unwritable, or in use by another run (named): one line, no traceback
        parser.exit(2, f"{parser.prog}: error: --out {cfg.out}: {exc}\n")
    from unified.eval.report import render_markdown

    print(render_markdown(summary))
    if args.wandb:
        from unified.eval.wandb_log import log_run

        print(f"wandb ({args.wandb}): {log_run(cfg.out, mode=args.wandb)}")
    return 0


def _dry_run(parser: argparse.ArgumentParser, cfg: EvalConfig) -> int:
    """``--dry-run``: the resolved config and the run plan (:func:`unified.eval.plan.plan_run`: the adapters
    list their tasks, ``--out`` is read), printed; nothing is written, not even ``plan.json``."""
    try:
        cfg = with_benchmark_names(cfg)
        paths = adapter_paths(cfg.benchmarks)
        check_benchmark_config(cfg.benchmark_config, paths)
        names, _ = benchmarks_to_run(cfg)
        choice = engine_for(cfg, names)
        plan = plan_run(cfg, names, engine=choice, repair=False)
    except (ConfigError, UnknownNameError) as exc:
        parser.error(str(exc))
    print(dump_yaml(cfg))
    names += [part.label() for part in plan.parts]
    print(f"# would evaluate: {', '.join(dict.fromkeys(names))}")
    if choice.line:
        print(f"# {choice.line}")
    print("\n".join(plan_lines(plan)))
    print(dry_run_line(cfg.out, plan.config, [b.name for b in plan.benchmarks],
                       renamed={path: name for name, path in paths.items()}))
    return 0


def _merge_trusted(args: argparse.Namespace) -> list[str]:
    """The ``module:Factory`` adapters this ``--merge`` command line names itself (``--benchmarks``)."""
    given = getattr(args, "benchmarks", None) or []
    names = [n for item in ([given] if isinstance(given, str) else given) for n in str(item).split(",")]
    return [n.strip() for n in names if ":" in n]


def _merge(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--merge SHARD_DIR... --out OUT`` (:func:`unified.eval.merge.merge_runs`)."""
    if not args.out:
        parser.error("--merge needs --out (the merged run directory)")
    try:
        summary = merge_runs(args.merge, args.out, trusted=frozenset(_merge_trusted(args)))
    except (ShardError, ConfigError, RunDirError) as exc:  # RunDirError: a shard still running, or --out in use
        parser.exit(2, f"{parser.prog}: error: --merge: {exc}\n")
    from unified.eval.report import render_markdown

    print(render_markdown(summary))
    return 0


LWM_COMMAND = "lwm"
"""``python -m unified.eval lwm ...``: the world-model eval (:mod:`unified.lwm.evaluation`)."""

SUBCOMMANDS = (f"subcommand (its own options; give it first):\n"
               f"  python -m unified.eval {LWM_COMMAND} --model SPEC --judge SPEC --out DIR\n"
               f"        the world-model eval: AgentWorldBench records, one predicted observation each, scored by a "
               f"judge\n        (python -m unified.eval {LWM_COMMAND} --help)")
"""The subcommands ``--help`` names before the options."""


def _without_suite(argv: list[str]) -> list[str]:
    """``argv`` without its ``--suite X`` / ``--suite=X`` option (the deprecated ``--suite lwm`` spelling)."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--suite":
            skip = True
        elif not item.startswith("--suite="):
            out.append(item)
    return out


def _run_lwm(argv: list[str]) -> int:
    from unified.lwm.evaluation import main as lwm_main

    return int(lwm_main(argv, prog=f"python -m unified.eval {LWM_COMMAND}") or 0)
