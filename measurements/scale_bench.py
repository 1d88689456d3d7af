"""Warmup step cost at a chosen MoE shape: seconds per GSPO step and peak memory, per kernel.

``python -m measurements.scale_bench --arch qwen3_5_moe --hidden 1024 --layers 8 --experts 64 --top-k 8``

Builds a *random* MoE checkpoint of the requested shape (:func:`unified.models.tiny.save_tiny_checkpoint`
with the sizes as config overrides, the small local tokenizer), then runs the real warmup command,
``python -m unified.warmup --recipe R --model CKPT ...``, once per experts implementation in a
fresh process (so each peak-memory figure is that run's own), and reads back what the run wrote:

- ``run.json``: kernels actually used, ``seconds_per_step`` over the whole run, peak RSS and peak
  CUDA allocation (``torch.cuda.max_memory_allocated``);
- ``metrics.jsonl``: the wall time at each logged step, from which the *steady* step time is the
  median of the step-to-step intervals after the first step (the first one pays for CUDA context
  set-up, kernel autotuning and allocator growth).

A step is one GSPO optimiser step: ``generation`` of ``gspo.num_generations`` completions for each
prompt of the step (hf backend, the same model), the reward, and the sequence-level clipped
policy-gradient loss with its backward over the MoE (router aux loss on). Random weights make the
rewards meaningless; only the cost is measured. Writes ``<out>/scale_bench.json`` and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from unified.store import write_json_atomic

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = REPO / "recipes" / "warmup" / "embedded_cpu.yaml"
DEFAULT_DATA = REPO / "data" / "lwm"


@dataclass
class ScaleBenchRow:
    """One experts implementation's figures."""

    experts_implementation: str
    returncode: int
    steps: int = 0
    seconds_per_step: float | None = None
    """Whole run / steps (first step included)."""
    steady_seconds_per_step: float | None = None
    """Median step-to-step interval after the first step (None with fewer than 3 logged steps)."""
    peak_cuda_gib: float | None = None
    peak_rss_gib: float | None = None
    kernels: dict | None = None
    error_tail: str = ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m measurements.scale_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="qwen3_5_moe", choices=["qwen3_moe", "qwen3_5_moe"])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--moe-intermediate", type=int, default=512)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--experts-impl", nargs="+", default=["grouped_mm", "eager"])
    parser.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=Path("runs/scale_bench"))
    parser.add_argument("--timeout-s", type=int, default=900, help="per warmup run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="extra recipe overrides for every run (e.g. gspo.num_generations=8)")
    return parser


def shape_overrides(args: argparse.Namespace) -> dict:
    """Config fields for the random checkpoint (attention heads sized like a real model, not the tiny default)."""
    shape = dict(hidden_size=args.hidden, num_layers=args.layers, num_experts=args.experts, top_k=args.top_k,
                 num_attention_heads=args.heads, num_key_value_heads=max(1, args.heads // 4), head_dim=args.head_dim,
                 moe_intermediate_size=args.moe_intermediate, max_position_embeddings=8192)
    if args.arch == "qwen3_moe":
        shape["intermediate_size"] = 4 * args.hidden
    else:
        shape.update(shared_expert_intermediate_size=args.moe_intermediate, linear_key_head_dim=args.head_dim,
                     linear_value_head_dim=args.head_dim, linear_num_key_heads=max(1, args.heads // 2),
                     linear_num_value_heads=args.heads)
    return shape


def steady_step_seconds(metrics_path: Path) -> float | None:
    """Median interval between consecutive logged steps, the first step excluded."""
    if not metrics_path.is_file():
        return None
    from unified.warmup.callbacks import read_metrics

    times = {}
    for record in read_metrics(metrics_path):
        if "loss" in record:
            times[record["step"]] = record["time_s"]
    steps = sorted(times)
    gaps = [(times[b] - times[a]) / (b - a) for a, b in zip(steps[1:], steps[2:])]
    return round(statistics.median(gaps), 3) if gaps else None


def run_one(args: argparse.Namespace, checkpoint: Path, impl: str) -> ScaleBenchRow:
    out = args.out / f"run-{impl}"
    cmd = [sys.executable, "-m", "unified.warmup", "--recipe", str(args.recipe), "--model", str(checkpoint),
           "--data", str(args.data), "--output-dir", str(out)]
    for item in (f"model.experts_implementation={impl}", f"train.max_steps={args.steps}", "train.save_steps=100000",
                 "train.logging_steps=1", "logging.wandb=false", "data.heldout_size=0", "resume=never",
                 "monitor.max_zero_variance_share=null",  # only the cost counts: a reward without variance must not stop it
                 *args.set):
        cmd += ["--set", item]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, cwd=REPO,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    row = ScaleBenchRow(experts_implementation=impl, returncode=done.returncode)
    run_file = out / "run.json"
    if done.returncode != 0 or not run_file.is_file():
        row.error_tail = (done.stdout + done.stderr)[-2000:]
        return row
    run = json.loads(run_file.read_text())
    memory = run.get("peak_memory", {})
    row.steps = run.get("global_step", 0)
    row.seconds_per_step = run.get("seconds_per_step")
    row.steady_seconds_per_step = steady_step_seconds(out / "metrics.jsonl")
    row.peak_cuda_gib = memory.get("memory/peak_cuda_gib")
    row.peak_rss_gib = memory.get("memory/peak_rss_gib")
    row.kernels = run.get("kernels")
    return row


def markdown(rows: list[ScaleBenchRow]) -> str:
    def fmt(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    lines = ["| experts | rc | steps | s/step (all) | s/step (steady) | peak CUDA GiB | peak RSS GiB | attention |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.experts_implementation} | {r.returncode} | {r.steps} | {fmt(r.seconds_per_step)} | "
                     f"{fmt(r.steady_seconds_per_step)} | {fmt(r.peak_cuda_gib)} | {fmt(r.peak_rss_gib)} | "
                     f"{(r.kernels or {}).get('attention', '-')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from unified.models.tiny import save_tiny_checkpoint

    args.out.mkdir(parents=True, exist_ok=True)
    shape = shape_overrides(args)
    t0 = time.perf_counter()
    checkpoint = save_tiny_checkpoint(args.out / "checkpoint", args.arch, seed=0, **shape)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(checkpoint)
    n_params = sum(f.stat().st_size for f in checkpoint.glob("*.safetensors")) // 4  # saved in fp32
    print(f"scale_bench: random {args.arch} checkpoint, ~{n_params / 1e6:.0f}M parameters "
          f"({time.perf_counter() - t0:.0f}s to build)", flush=True)
    rows = []
    for impl in args.experts_impl:
        row = run_one(args, checkpoint, impl)
        rows.append(row)
        print(json.dumps(asdict(row)), flush=True)
    report = {"arch": args.arch, "shape": shape, "parameters": n_params, "model_type": config.model_type,
              "overrides": args.set, "rows": [asdict(r) for r in rows]}
    write_json_atomic(args.out / "scale_bench.json", report)
    print(markdown(rows))
    return 0 if all(r.returncode == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
