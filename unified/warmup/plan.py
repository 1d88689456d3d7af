"""The memory and time plan of a warmup recipe on its layout, before anything launches.

    python -m unified.warmup --recipe recipes/warmup/qwen35_35b_a3b.yaml --plan          # the table
    python -m unified.warmup.plan --recipe recipes/warmup/qwen35_35b_a3b.yaml --nodes 8 --gpu h200

:func:`build_plan` turns a :class:`~unified.warmup.config.WarmupConfig` into the estimates of
:mod:`unified.warmup.sizing` (its docstring has every formula and assumption); :func:`format_plan`
prints them as a table; :func:`plan_problems` gives the preflight's refusal lines (trainer memory over
the usable device memory, a colocated vLLM that cannot hold the weights, a generation batch longer than
the collective timeout), each with its numbers. The model's dimensions come from a named preset
(``Qwen/Qwen3.5-35B-A3B``), else the checkpoint's ``config.json`` (a directory, the embedded model's
cache, a hub id already in the local cache); a model whose config is not on this machine gets no plan
(a note says so) and is not refused.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from unified.config import ConfigError, add_recipe_arguments
from unified.models.embedded import embedded_checkpoint_dir
from unified.warmup.config import SHARDED_DISTRIBUTED, WarmupConfig, load_warmup_config
from unified.warmup.sizing import (
    GIB,
    GPUS,
    USABLE_FRACTION,
    Layout,
    MemoryEstimate,
    ASSUMPTION_RANGES,
    DECODE_BW_EFFICIENCY,
    DECODE_STEP_OVERHEAD_S,
    PREFILL_MFU,
    RolloutEstimate,
    RoutesTransfer,
    TimeEstimate,
    Workload,
    generation_time,
    generation_time_range,
    routes_transfer,
    rollout_capacity,
    trainer_memory,
)
from unified.warmup.sizing_model import ModelDims, dims_from_checkpoint, preset_for


@dataclass
class Plan:
    """The estimates of one recipe x layout."""

    dims: ModelDims
    layout: Layout
    work: Workload
    memory: MemoryEstimate
    rollout: RolloutEstimate | None
    time: TimeEstimate | None
    memory_max_share: float = 1.0
    """``launch.memory_max_share``: the share of usable memory the plan may fill."""
    timeout_margin: float = 1.0
    """``launch.collective_timeout_margin``: the timeout must be this multiple of the batch's time + routes."""
    time_range: tuple[TimeEstimate, TimeEstimate] | None = None
    """The batch at the pessimistic and optimistic ends of sizing.ASSUMPTION_RANGES."""
    routes: RoutesTransfer | None = None
    """R3's routes of one generation batch over the server's JSON (server-mode routing replay)."""

    @property
    def batch_s(self) -> float:
        """One generation batch as the other ranks wait for it: generation + rank 0's routes decode."""
        return (self.time.total_s if self.time else 0.0) + (self.routes.seconds if self.routes else 0.0)

    @property
    def timeout_needed_s(self) -> float:
        return self.timeout_margin * self.batch_s


def model_dims(name_or_path: str) -> tuple[ModelDims | None, str]:
    """(dims, where they came from) of a model spec; ``(None, why)`` when its config is not here."""
    preset = preset_for(name_or_path)
    if preset is not None:
        return preset, f"preset {preset.name} (published dimensions)"
    path = Path(name_or_path)
    if name_or_path == "embedded":
        path = embedded_checkpoint_dir()
    elif not path.is_dir() and name_or_path.count("/") == 1:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name_or_path, "config.json")
            if isinstance(cached, str):
                path = Path(cached).parent
        except ImportError:
            pass
        except ValueError as exc:  # HFValidationError: not a valid hub id (the preflight names the path too)
            return None, f"{name_or_path!r} is not a checkpoint directory or a valid hub id ({str(exc).splitlines()[0]})"
    if (path / "config.json").is_file():
        try:
            return dims_from_checkpoint(path), f"{path}/config.json"
        except ValueError as exc:
            return None, str(exc)
    return None, f"no config.json for {name_or_path!r} on this machine"


def layout_of(cfg: WarmupConfig, *, nodes: int | None = None, gpu: str | None = None,
              context_parallel: int = 1) -> Layout:
    """The recipe's layout (``launch.*``, ``generation.*``), with what-if overrides."""
    launch = cfg.launch
    nodes = nodes or launch.nodes
    gpus = launch.gpus_per_node
    spec = GPUS[gpu or launch.gpu] if gpus > 0 else None
    trainer_nodes = nodes - 1 if nodes > 1 else 1
    processes = trainer_nodes * gpus if gpus else launch.cpu_processes
    backend = cfg.generation.backend
    if gpus == 0 or backend == "hf":
        rollout, tp, util = "none", 1, 0.0
    elif nodes > 1:
        rollout, tp, util = "server", gpus, 0.9
    else:
        rollout, tp, util = "colocate", cfg.generation.vllm_tensor_parallel_size, \
            cfg.generation.vllm_gpu_memory_utilization
    sharded = launch.distributed in SHARDED_DISTRIBUTED and processes > 1
    return Layout(trainer_processes=processes, gpu=spec, sharded=sharded,
                  ddp=launch.distributed == "ddp" and processes > 1, context_parallel=context_parallel,
                  rollout=rollout, rollout_tp=tp, rollout_gpu_memory_utilization=util)


def workload_of(cfg: WarmupConfig, layout: Layout, *, prompt_tokens: int | None = None) -> Workload:
    """One micro-batch row and one generation batch of ``cfg`` at its caps."""
    prompt = prompt_tokens or cfg.data.max_prompt_tokens or 4096
    micro = cfg.train.per_device_train_batch_size
    per_generation = cfg.gspo.steps_per_generation or cfg.train.gradient_accumulation_steps  # TRL's default
    return Workload(
        prompt_tokens=prompt, completion_tokens=cfg.generation.max_completion_length, micro_batch=micro,
        generation_batch=per_generation * micro * layout.trainer_processes,
        group_size=cfg.gspo.num_generations, gradient_checkpointing=cfg.model.gradient_checkpointing,
        trainable_layers=cfg.model.trainable_layers, aux_loss=cfg.model.router_aux_loss_coef != 0,
        routes_tokens=(per_generation * micro * (prompt + cfg.generation.max_completion_length)
                       if getattr(getattr(cfg, "moe", None), "routing_replay", "off") != "off" else 0),
        bf16=cfg.model.precision in ("auto", "bf16") if layout.gpu else cfg.model.precision == "bf16")


def build_plan(cfg: WarmupConfig, dims: ModelDims, *, nodes: int | None = None, gpu: str | None = None,
               context_parallel: int = 1, prompt_tokens: int | None = None) -> Plan:
    layout = layout_of(cfg, nodes=nodes, gpu=gpu, context_parallel=context_parallel)
    work = workload_of(cfg, layout, prompt_tokens=prompt_tokens)
    memory = trainer_memory(dims, layout, work)
    rollout = rollout_capacity(dims, layout, work)
    served = rollout is not None and rollout.sequences > 0 and layout.rollout == "server"
    timeout = cfg.train.collective_timeout_s
    time = generation_time(dims, layout, work, rollout, timeout) if served else None
    time_range = generation_time_range(dims, layout, work, rollout, timeout) if served else None
    routes = routes_transfer(dims, work) if served and work.routes_tokens and dims.is_moe else None
    return Plan(dims, layout, work, memory, rollout, time, memory_max_share=cfg.launch.memory_max_share,
                timeout_margin=cfg.launch.collective_timeout_margin, time_range=time_range, routes=routes)


def largest_prompt_that_fits(cfg: WarmupConfig, dims: ModelDims, *, step: int = 1024, **what_if) -> int:
    """The largest multiple of ``step`` prompt tokens whose plan fits (memory and time); 0 if none."""
    def ok(prompt: int) -> bool:
        plan = build_plan(cfg, dims, prompt_tokens=prompt, **what_if)
        return not plan_problems_of(plan)

    lo, hi = 0, max(step, (cfg.data.max_prompt_tokens or 4096) // step * step)
    if ok(hi):
        return hi
    while hi - lo > step:
        mid = (lo + hi) // 2 // step * step
        lo, hi = (mid, hi) if mid and ok(mid) else (lo, mid)
    return lo if lo and ok(lo) else 0


def _gib(n: float) -> str:
    return f"{n / GIB:.1f}"


def plan_problems_of(plan: Plan) -> list[str]:
    """Refusal lines of a plan (empty when it fits)."""
    out: list[str] = []
    m, where = plan.memory, _where(plan)
    if not m.fits:
        top = sorted(m.components.items(), key=lambda kv: -kv[1])[:4]
        out.append(f"memory plan: {_gib(m.total)} GiB per trainer GPU > {_gib(m.usable_bytes)} GiB usable "
                   f"({USABLE_FRACTION:.0%} of {plan.layout.gpu.name}) on {where}: "
                   + ", ".join(f"{k} {_gib(v)}" for k, v in top)
                   + "; fewer tokens (data.max_prompt_tokens), more nodes, or a larger GPU (launch.gpu)")
    elif m.usable_bytes is not None and m.total > plan.memory_max_share * m.usable_bytes:
        out.append(f"memory plan: {_gib(m.total)} GiB per trainer GPU is {m.total / m.usable_bytes:.0%} of the "
                   f"{_gib(m.usable_bytes)} GiB usable on {where}, above launch.memory_max_share="
                   f"{plan.memory_max_share:g} (the plan's error; docs/warmup_plan.md): fewer tokens "
                   "(data.max_prompt_tokens), more nodes, or --set launch.memory_max_share=1.0 to run anyway")
    r = plan.rollout
    if r is not None and plan.layout.rollout == "colocate" and r.weights_bytes + 3 * GIB > r.budget_bytes:
        out.append(f"memory plan: colocated vLLM needs {_gib(r.weights_bytes)} GiB of bf16 weights per GPU "
                   f"(TP {plan.layout.rollout_tp}) in a budget of {_gib(r.budget_bytes)} GiB "
                   f"(generation.vllm_gpu_memory_utilization={plan.layout.rollout_gpu_memory_utilization:g} x "
                   f"{plan.layout.gpu.memory_gib:g} GiB): use several nodes (a vLLM server node) for this model")
    elif r is not None and r.sequences == 0:
        out.append(f"memory plan: the rollout engine's KV pool ({_gib(r.kv_pool_bytes)} GiB per GPU) holds no "
                   f"sequence of {r.sequence_tokens} tokens")
    t = plan.time
    if t is not None and not t.fits:
        out.append(f"time plan: one generation batch ({plan.work.generation_batch} completions of up to "
                   f"{plan.work.prompt_tokens}+{plan.work.completion_tokens} tokens) takes ~{t.total_s:,.0f} s "
                   f"(prefill {t.prefill_s:,.0f} s, decode {t.decode_s:,.0f} s, {t.concurrent} at once) > "
                   f"train.collective_timeout_s={t.timeout_s:g}: the other ranks' collective would time out")
    elif t is not None and t.timeout_s < plan.timeout_needed_s:
        routes = f" + routes {plan.routes.seconds:,.0f} s" if plan.routes else ""
        out.append(f"time plan: train.collective_timeout_s={t.timeout_s:g} is under launch.collective_timeout_margin="
                   f"{plan.timeout_margin:g} x one generation batch (~{t.total_s:,.0f} s{routes} = "
                   f"{plan.batch_s:,.0f} s, worst case at the caps): --set train.collective_timeout_s="
                   f"{math.ceil(plan.timeout_needed_s / 60) * 60} (or fewer prompt tokens)")
    return out


def _span(name: str) -> str:
    lo, hi = ASSUMPTION_RANGES[name]
    return f"[{lo:g}-{hi:g}]"


def _where(plan: Plan) -> str:
    lay = plan.layout
    gpu = lay.gpu.name if lay.gpu else "CPU"
    cp = f", context parallel {lay.context_parallel}" if lay.context_parallel > 1 else ""
    shard = "sharded" if lay.sharded else ("DDP" if lay.ddp else "one process")
    return f"{lay.trainer_processes} trainer process(es) on {gpu} ({shard}{cp})"


def plan_problems(cfg: WarmupConfig) -> list[str]:
    """The preflight's lines for ``cfg``'s own layout (none when its model's config is not here)."""
    dims, _ = model_dims(cfg.model.name_or_path)
    if dims is None:
        return []
    return plan_problems_of(build_plan(cfg, dims))


def format_plan(plan: Plan, source: str = "") -> str:
    """The plan as ``#``-prefixed lines: memory by component, KV capacity, generation time, assumptions."""
    d, w, lay, m = plan.dims, plan.work, plan.layout, plan.memory
    lines = [f"# memory/time plan ({d.name}{'; ' + source if source else ''}): {d.total_params() / 1e9:.2f}B "
             f"parameters ({d.active_params() / 1e9:.2f}B active a token), {_where(plan)}",
             f"#   micro-batch {w.micro_batch} x ({w.prompt_tokens} prompt + {w.completion_tokens} completion) "
             f"tokens, gradient checkpointing {'on' if w.gradient_checkpointing else 'off'}, "
             f"{'bf16' if w.bf16 else 'fp32'} activations, aux loss {'on' if w.aux_loss else 'off'}",
             "#   | trainer memory per process | GiB |", "#   |---|---|"]
    lines += [f"#   | {k} | {_gib(v)} |" for k, v in m.components.items()]
    if m.device_bytes is None:
        lines.append(f"#   | **total** | **{_gib(m.total)}** (host memory, not checked) |")
    else:
        share = m.total / m.usable_bytes
        verdict = "DOES NOT FIT" if not m.fits else (
            f"fits, {share:.0%}" if share <= plan.memory_max_share else
            f"{share:.0%} > launch.memory_max_share {plan.memory_max_share:g}")
        lines.append(f"#   | **total** | **{_gib(m.total)}** of {_gib(m.usable_bytes)} usable ({verdict}) |")
    r = plan.rollout
    if r is not None:
        lines.append(f"#   rollout ({lay.rollout}, TP {lay.rollout_tp}, gpu_memory_utilization "
                     f"{lay.rollout_gpu_memory_utilization:g}): weights {_gib(r.weights_bytes)} GiB/GPU, KV pool "
                     f"{_gib(r.kv_pool_bytes)} GiB/GPU, {r.kv_bytes_per_token * lay.rollout_tp / 1024:.0f} KiB/token "
                     f"over the TP group, state {r.state_bytes_per_sequence * lay.rollout_tp / 2**20:.1f} MiB/"
                     f"sequence: {r.sequences} sequences of {r.sequence_tokens} tokens at once")
    t = plan.time
    if t is not None:
        lines.append(f"#   generation batch ({w.generation_batch} completions, worst case): prefill "
                     f"{t.prefill_s:,.0f} s ({t.prefill_shared_s:,.0f} s with prefix sharing), decode "
                     f"{t.decode_s:,.0f} s ({t.steps:,} steps, {t.concurrent} at once) = {t.total_s:,.0f} s vs "
                     f"collective timeout {t.timeout_s:,.0f} s ({'fits' if t.fits else 'EXCEEDS'})")
        if plan.time_range is not None:
            lo, hi = plan.time_range
            lines.append(f"#   time assumptions (not measured on a GPU yet): PREFILL_MFU {PREFILL_MFU:g} "
                         f"{_span('PREFILL_MFU')}, DECODE_BW_EFFICIENCY {DECODE_BW_EFFICIENCY:g} "
                         f"{_span('DECODE_BW_EFFICIENCY')}, DECODE_STEP_OVERHEAD_S {DECODE_STEP_OVERHEAD_S:g} "
                         f"{_span('DECODE_STEP_OVERHEAD_S')}: the batch {hi.total_s:,.0f}-{lo.total_s:,.0f} s")
        rt = plan.routes
        if rt is not None:
            once = routes_transfer(plan.dims, w, prompt_once=True)
            lines.append(f"#   routes (R3, base64 .npy in the server's JSON, decoded on trainer rank 0): "
                         f"{rt.json_bytes / 1e9:,.2f} GB, ~{rt.seconds:,.0f} s a generation batch ({rt.tokens:,} "
                         f"route rows); prompt routes once a group (routed_experts_prompt_start, not wired): "
                         f"{once.json_bytes / 1e9:,.2f} GB, ~{once.seconds:,.0f} s")
        lines.append(f"#   collective timeout needed: {plan.timeout_margin:g} x {plan.batch_s:,.0f} s = "
                     f"{plan.timeout_needed_s:,.0f} s (train.collective_timeout_s {t.timeout_s:,.0f}: "
                     f"{'ok' if t.timeout_s >= plan.timeout_needed_s else 'TOO SHORT'})")
    lines.append("#   assumptions: unified/warmup/sizing.py (ZeRO 16 B/trainable parameter, checkpointed inputs, "
                 f"one layer recomputed, {USABLE_FRACTION:.0%} of device memory usable, prefill MFU and decode "
                 "bandwidth efficiency as stated there)")
    return "\n".join(lines)


def describe(cfg: WarmupConfig, **what_if) -> str:
    """The table for ``cfg`` (or a note why there is none)."""
    dims, source = model_dims(cfg.model.name_or_path)
    if dims is None:
        return f"# memory/time plan: none ({source})"
    return format_plan(build_plan(cfg, dims, **what_if), source)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m unified.warmup.plan", description=__doc__.splitlines()[0])
    add_recipe_arguments(parser)
    parser.add_argument("--nodes", type=int, nargs="*", default=[], help="what-if node counts (default: the recipe's)")
    parser.add_argument("--gpu", nargs="*", default=[], choices=sorted(GPUS), help="what-if GPU models")
    parser.add_argument("--context-parallel", type=int, default=1, help="what-if context-parallel degree")
    parser.add_argument("--fit-prompt", action="store_true", help="also print the largest prompt that fits")
    args = parser.parse_args(argv)
    try:
        cfg = load_warmup_config(args.recipe, list(args.set))
    except (ConfigError, ValueError) as exc:
        print(f"unified.warmup.plan: {exc}", file=sys.stderr)
        return 2
    dims, source = model_dims(cfg.model.name_or_path)
    if dims is None:
        print(f"unified.warmup.plan: {source}", file=sys.stderr)
        return 2
    status = 0
    for nodes in args.nodes or [None]:
        for gpu in args.gpu or [None]:
            what_if = {"nodes": nodes, "gpu": gpu, "context_parallel": args.context_parallel}
            plan = build_plan(cfg, dims, **what_if)
            print(format_plan(plan, source))
            for line in plan_problems_of(plan):
                print(f"#   refused: {line}")
                status = 2
            if args.fit_prompt:
                fit = largest_prompt_that_fits(cfg, dims, **what_if)
                print(f"#   largest data.max_prompt_tokens that fits (multiple of 1024): {fit}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())

