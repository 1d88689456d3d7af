"""Benchmark: episodes/s of the ``hf`` backend with many episodes in flight vs one at a time.

``python -m measurements.bench_batching --tasks 8`` runs the same real BFCL v4 episodes
(round-robin over categories, so multi-turn ones are included) twice through
:class:`unified.agent.loop.AgentLoop` with one in-process :class:`unified.inference.hf.HFPolicy`:
once with ``--max-in-flight`` episodes in flight (default: all N; ``--scheduling`` continuous
batching, the default where the model supports it, or rounds) and
once one episode at a time (``max_in_flight=1``), with the same greedy settings and the same
prefix-cache setting (the cache is emptied before each mode so both start cold). It prints, per
mode, episodes/s, generated tokens/s, the split of generation time into per-row prefill and
batched decode (from :class:`unified.models.generation.GenerationStats`), the prompt tokens the
prefix cache served, and then the ratio batched / sequential; ``--json`` writes the figures.

Greedy decoding with the same weights should give the same completions in both modes; the
number of episodes whose completions differ is reported (float round-off between a batch of B
and a batch of 1 can flip a near-tie), since different completions mean different work.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ModeResult:
    """Figures of one mode (``batched`` or ``sequential``)."""

    mode: str
    max_in_flight: int
    episodes: int
    seconds: float
    episodes_per_s: float
    policy_calls: int
    completion_tokens: int
    prompt_tokens: int
    reused_prompt_tokens: int
    tokens_per_s: float
    """Generated tokens per wall-clock second."""
    prefill_seconds: float
    decode_seconds: float
    other_seconds: float
    """Wall time outside generation: environments, parsing, scoring, rendering prompts."""
    errors: int
    mean_rows_per_decode_step: float = 0.0
    """Occupancy of the decoding batch (continuous batching only; 0 with rounds)."""
    completions: dict[str, list[list[int]]] = field(default_factory=dict, repr=False)


def _run_mode(adapter, policy, tasks, mode: str, max_in_flight: int, limits, scheduling: str,
              work_dir: Path) -> ModeResult:
    from unified.agent.loop import AgentLoop, Job
    from unified.benchmarks.contract import RunContext

    policy.prefix_cache.clear()
    policy.reset_stats()
    completions: dict[str, list[list[int]]] = {}
    errors = 0

    def on_result(result, episode) -> None:
        nonlocal errors
        errors += int(result.error is not None)
        completions[f"{result.task_id}#{result.trial}"] = [s.completion_token_ids for s in episode.steps]

    loop = AgentLoop(adapter, policy, limits=limits, max_in_flight=max_in_flight, on_result=on_result,
                     scheduling=scheduling, run=RunContext(work_dir=work_dir))
    started = time.perf_counter()
    loop.run([Job(t) for t in tasks])
    seconds = time.perf_counter() - started
    s = policy.stats
    return ModeResult(
        mode=mode, max_in_flight=max_in_flight, episodes=len(completions), seconds=seconds,
        episodes_per_s=len(completions) / seconds, policy_calls=s.calls, completion_tokens=s.completion_tokens,
        prompt_tokens=s.prompt_tokens, reused_prompt_tokens=s.reused_prompt_tokens,
        tokens_per_s=s.completion_tokens / seconds, prefill_seconds=s.prefill_seconds,
        decode_seconds=s.decode_seconds, other_seconds=seconds - s.prefill_seconds - s.decode_seconds,
        errors=errors, mean_rows_per_decode_step=s.mean_rows_per_step, completions=completions)


def _line(r: ModeResult) -> str:
    return (f"{r.mode:>10} (max_in_flight={r.max_in_flight}): {r.episodes} episodes in {r.seconds:.1f}s = "
            f"{r.episodes_per_s:.4f} episodes/s, {r.tokens_per_s:.2f} generated tokens/s "
            f"({r.completion_tokens} tokens, {r.policy_calls} generate calls or admissions); prefill {r.prefill_seconds:.1f}s, "
            f"decode {r.decode_seconds:.1f}s, other {r.other_seconds:.1f}s; prompt tokens {r.prompt_tokens}, "
            f"from prefix cache {r.reused_prompt_tokens}; rows per decode step {r.mean_rows_per_decode_step:.2f}; "
            f"errors {r.errors}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m measurements.bench_batching", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--model", default="embedded", help="checkpoint spec loaded in-process (hf backend)")
    parser.add_argument("--tasks", type=int, default=8, help="N: BFCL v4 tasks (round-robin over categories)")
    parser.add_argument("--categories", default=None, help="bfcl categories/collections (default: all, round-robin)")
    parser.add_argument("--max-in-flight", type=int, default=None, help="episodes in flight in the batched mode "
                        "(default: all tasks)")
    parser.add_argument("--scheduling", default="auto", choices=["auto", "continuous", "rounds"],
                        help="how the batched mode shares the model (see unified.agent.loop.SCHEDULING)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="per policy call")
    parser.add_argument("--max-turns", type=int, default=4, help="policy calls per episode")
    parser.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--prefix-cache-mb", type=float, default=1024.0, help="KV prefix-cache budget (0 = off)")
    parser.add_argument("--modes", default="batched,sequential", help="which modes to run, in order")
    parser.add_argument("--experts", default=None, help="experts implementation (grouped_mm, batched_mm, eager)")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="unified-bench-batching-") as work_dir:  # removed on the way out
        return _bench(args, Path(work_dir))


def _bench(args: argparse.Namespace, work_dir: Path) -> int:
    """Run the modes of ``args`` on BFCL v4 tasks whose environments keep their files in ``work_dir``."""
    import torch

    from unified.benchmarks.contract import AgentLimits
    from unified.benchmarks.discovery import load_adapter
    from unified.models import load_checkpoint
    from unified.inference.base import SamplingConfig
    from unified.inference.hf import HFPolicy

    config = {"categories": args.categories} if args.categories else {}
    adapter = load_adapter("bfcl_v4", **config)
    tasks = adapter.tasks(None, args.tasks)
    print(f"{len(tasks)} BFCL v4 tasks: {', '.join(t.id for t in tasks)}", file=sys.stderr, flush=True)
    loaded = load_checkpoint(args.model, **({"experts_implementation": args.experts} if args.experts else {}))
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens, thinking=args.thinking)
    in_flight = max(1, args.max_in_flight or len(tasks))
    policy = HFPolicy(args.model, sampling, loaded=loaded, max_batch_size=in_flight,
                      prefix_cache_mb=args.prefix_cache_mb)
    limits = AgentLimits(max_turns=args.max_turns)
    from unified.models.generation import SamplingParams, batched_generate

    batched_generate(loaded.model, loaded.tokenizer, ["warm up", "warm up the threads"], SamplingParams(max_new_tokens=2))
    for task in tasks:  # first-use imports of bfcl's environment classes stay out of the timings
        if str(task.payload.get("category", "")).startswith("memory"):
            continue  # memory environments keep state between episodes
        env = adapter.open(task)
        env.__enter__()
        env.__exit__(None, None, None)
    results: dict[str, ModeResult] = {}
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        if mode not in ("batched", "sequential"):
            raise SystemExit(f"--modes: unknown mode {mode!r} (batched, sequential)")
        results[mode] = _run_mode(adapter, policy, tasks, mode, in_flight if mode == "batched" else 1, limits,
                                  args.scheduling, work_dir)
        print(_line(results[mode]), flush=True)
    report: dict[str, Any] = {
        "model": args.model, "tasks": [t.id for t in tasks], "max_new_tokens": args.max_new_tokens,
        "max_turns": args.max_turns, "thinking": args.thinking, "prefix_cache_mb": args.prefix_cache_mb,
        "max_in_flight": in_flight, "scheduling": args.scheduling,
        "experts": loaded.kernels.experts, "attention": loaded.kernels.attention, "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(), "modes": {k: {kk: vv for kk, vv in asdict(v).items() if kk != "completions"}
                                                   for k, v in results.items()},
    }
    if {"batched", "sequential"} <= results.keys():
        b, s = results["batched"], results["sequential"]
        same = sum(b.completions.get(k) == v for k, v in s.completions.items())
        report["speedup_episodes_per_s"] = b.episodes_per_s / s.episodes_per_s
        report["speedup_tokens_per_s"] = b.tokens_per_s / s.tokens_per_s
        report["episodes_with_identical_completions"] = same
        print(f"batched / sequential: {report['speedup_episodes_per_s']:.2f}x episodes/s, "
              f"{report['speedup_tokens_per_s']:.2f}x tokens/s; identical completions in {same}/{len(s.completions)} "
              f"episodes; load average {report['load_average'][0]:.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    policy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
