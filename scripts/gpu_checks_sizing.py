"""The memory plan (unified/warmup/sizing.py) against a measured GSPO-style step of a small MoE.

    python3 scripts/gpu_checks_sizing.py --out $OUT            # CUDA: peak allocated vs the plan, < 2 min
    python3 scripts/gpu_checks_sizing.py --device cpu          # CPU variant (CI: tests/test_warmup_sizing.py)

On CUDA, for two random models built here (a Qwen3-MoE, full attention only; a Qwen3.5-MoE hybrid, 3
Gated DeltaNet : 1 full attention, with a shared expert), one process trains two steps the way the
warmup does: fp32 master weights, bf16 autocast, gradient checkpointing, the router's load-balancing
loss, log-probs of the completion positions only (``logits_to_keep``), the GSPO sequence-ratio loss
clipped at [1 - 3e-4, 1 + 4e-4] on a random advantage, AdamW. ``torch.cuda.max_memory_allocated``
over both steps is compared with the plan's total for the same dims and tokens, less the runtime
component (the CUDA context is not allocator memory). A row passes when measured / estimated is in
[0.67, 1.5]; the exit status is 1 when a row fails, 0 otherwise.

On a CPU (fp32, no checkpointing) the same step runs under ``torch.autograd.graph.saved_tensors_hooks``:
the bytes autograd saves for the backward (distinct storages, parameters excluded) are compared with
the plan's "saved activations" component, and the parameter/gradient/AdamW bytes after the step with
its "model states".

Needs torch and transformers only (plus this checkout). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOLERANCE = (0.67, 1.5)
"""measured / estimated must fall in this range (the plan's formulas are per-tensor approximations)."""


def _configs(device: str) -> dict[str, dict]:
    """Per model: the tiny_moe_config arguments and the tokens of one micro-batch row."""
    if device == "cpu":
        common = dict(vocab_size=512, hidden_size=64, num_layers=4, num_experts=8, top_k=2)
        return {"qwen3_moe": {"arch": "qwen3_moe", "kw": common, "prompt": 192, "completion": 64},
                "qwen3_5_moe": {"arch": "qwen3_5_moe", "kw": common, "prompt": 192, "completion": 64}}
    big = dict(vocab_size=32768, hidden_size=1024, num_layers=8, num_experts=32, top_k=4,
               num_attention_heads=8, num_key_value_heads=2, head_dim=128, moe_intermediate_size=512)
    hybrid = dict(big, shared_expert_intermediate_size=512, linear_num_key_heads=8, linear_num_value_heads=16,
                  linear_key_head_dim=64, linear_value_head_dim=64,
                  layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
                  + ["full_attention"])
    return {"qwen3_moe": {"arch": "qwen3_moe", "kw": big, "prompt": 6144, "completion": 2048},
            "qwen3_5_moe": {"arch": "qwen3_5_moe", "kw": hybrid, "prompt": 6144, "completion": 2048}}


def _gspo_step(model, ids, completion: int, optimizer, autocast) -> float:
    """One GSPO-style update: completion log-probs, sequence ratio, clipped surrogate + aux loss."""
    import torch

    with autocast:
        out = model(input_ids=ids, logits_to_keep=completion + 1, output_router_logits=True)
        logits = out.logits[:, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, -completion:, None]).squeeze(-1)
        ratio = torch.exp(logp.mean() - logp.detach().mean())
        advantage = 1.0
        loss = -torch.minimum(ratio * advantage, ratio.clamp(1 - 3e-4, 1 + 4e-4) * advantage)
        if getattr(out, "aux_loss", None) is not None:
            loss = loss + 0.01 * out.aux_loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def _linear_kernel() -> str:
    """``fla`` when flash-linear-attention imports (transformers then uses it), else ``torch``."""
    try:
        import fla  # noqa: F401
    except ImportError:
        return "torch"
    return "fla"


def _estimate(model, prompt: int, completion: int, *, gpu: bool, checkpointing: bool):
    from unified.warmup.sizing import GPUS, Layout, Workload, trainer_memory
    from unified.warmup.sizing_model import dims_from_config

    dims = dims_from_config(model.config.to_dict(), name=model.config.model_type)
    layout = Layout(trainer_processes=1, gpu=GPUS["h200"] if gpu else None, sharded=False)
    work = Workload(prompt_tokens=prompt, completion_tokens=completion, gradient_checkpointing=checkpointing,
                    aux_loss=True, bf16=gpu, linear_kernel=_linear_kernel())
    return dims, trainer_memory(dims, layout, work)


def measure_cuda(name: str, spec: dict) -> dict:
    import torch

    from unified.models.tiny import tiny_moe_model

    model = tiny_moe_model(spec["arch"], experts_implementation="eager", **spec["kw"]).cuda()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    tokens = spec["prompt"] + spec["completion"]
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(2):
        _gspo_step(model, ids, spec["completion"], optimizer, torch.autocast("cuda", dtype=torch.bfloat16))
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated()
    dims, est = _estimate(model, spec["prompt"], spec["completion"], gpu=True, checkpointing=True)
    estimated = est.total - est.components["runtime (CUDA/NCCL or Python)"]
    del model, optimizer
    torch.cuda.empty_cache()
    ratio = measured / estimated
    return {"model": name, "params": dims.total_params(), "tokens": tokens, "seconds": round(time.perf_counter() - start, 1),
            "measured_gib": round(measured / 2**30, 3), "estimated_gib": round(estimated / 2**30, 3),
            "ratio": round(ratio, 3), "components_gib": {k: round(v / 2**30, 3) for k, v in est.components.items()},
            "passed": TOLERANCE[0] <= ratio <= TOLERANCE[1]}


def measure_cpu(name: str, spec: dict) -> dict:
    """Saved-for-backward bytes and state bytes of one fp32 step on a CPU, against the plan."""
    import torch

    from unified.models.tiny import tiny_moe_model

    model = tiny_moe_model(spec["arch"], experts_implementation="eager", **spec["kw"])
    model.config.use_cache = False
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    tokens = spec["prompt"] + spec["completion"]
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, tokens))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _gspo_step(model, ids, spec["completion"], optimizer, torch.autocast("cpu", enabled=False))
    states = sum(p.numel() * p.element_size() for p in model.parameters()) * 2 + sum(
        t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)
        and t.dim() > 0)  # weights + gradients (allocated again next step) + AdamW's two moments
    dims, est = _estimate(model, spec["prompt"], spec["completion"], gpu=False, checkpointing=False)
    saved = sum(seen.values())
    act_est = est.components["saved activations (all trainable layers)"] + \
        est.components["logits (fused LM head tile)"] + est.components.get("router logits (aux loss)", 0)
    rows = {"model": name, "params": dims.total_params(), "tokens": tokens,
            "saved_bytes": saved, "estimated_saved_bytes": act_est, "saved_ratio": round(saved / act_est, 3),
            "state_bytes": states, "estimated_state_bytes": est.components["model states"],
            "state_ratio": round(states / est.components["model states"], 4)}
    rows["passed"] = TOLERANCE[0] <= rows["saved_ratio"] <= TOLERANCE[1] and abs(rows["state_ratio"] - 1) < 0.01
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    parser.add_argument("--out", type=Path, default=None, help="also write the result to OUT/sizing.json")
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        return 0
    measure = measure_cuda if device == "cuda" else measure_cpu
    rows = []
    for name, spec in _configs(device).items():
        try:
            rows.append(measure(name, spec))
        except (ImportError, AttributeError, TypeError) as exc:  # a transformers without this model class
            rows.append({"model": name, "passed": False, "error": f"{type(exc).__name__}: {exc}"})
    import transformers

    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
              "transformers": transformers.__version__, "tolerance": TOLERANCE, "rows": rows,
              "passed": all(r["passed"] for r in rows)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sizing.json").write_text(text + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
