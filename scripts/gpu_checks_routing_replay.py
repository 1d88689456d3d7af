"""Routing replay on a GPU: a tiny random Qwen3.5-MoE (transformers' ``Qwen3_5MoeForCausalLM``) in bf16 on CUDA.

    python3 scripts/gpu_checks_routing_replay.py [--device cuda] [--dtype bf16] [--out DIR]

Needs only torch and transformers (no TRL, no vLLM): it loads ``unified/models/routing_replay.py`` by path,
so the ``unified`` package's other dependencies are not imported. The "rollout engine" is transformers'
``generate`` (prefill + KV-cache decoding, sampled at temperature 1), the "trainer" one full forward over
prompt + completion, both in ``--dtype`` on ``--device``. Checks (exit status 1 when one fails):

1. ``identity``: the trainer's own routes recorded and replayed give bitwise-equal log-probs (or, where the
   kernels are not deterministic, within the run-to-run difference of the same forward, reported);
2. ``forced``: routes recorded from a rollout with perturbed routers, replayed in the trainer, are the
   experts the trainer's forward uses (re-recorded under replay: equal wherever a route was given);
3. ``agreement``: the share of (token, layer) top-k sets equal between rollout and trainer, in (0, 1]
   for the same weights and below 1 for the perturbed rollout;
4. ``gradient``: under replay every router's weight gets a non-zero, finite gradient;
5. ``mismatch_kl``: the k3 estimate of KL(rollout || trainer) per completion token, with and without
   replay (reported; both finite and >= 0 required).

Prints one JSON object; ``--out DIR`` also writes it to ``DIR/routing_replay.json``. The CPU variant
(``--device cpu --dtype fp32``) is what tests/test_gpu_checks_routing_replay.py runs in CI.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}


def load_routing_replay():
    """``unified/models/routing_replay.py`` as a standalone module (torch only)."""
    path = ROOT / "unified" / "models" / "routing_replay.py"
    spec = importlib.util.spec_from_file_location("routing_replay_standalone", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def tiny_model(arch: str, dtype: torch.dtype, device: str, *, seed: int = 0):
    """A tiny random MoE: Qwen3.5-MoE text stack (3 gated-DeltaNet : 1 full attention, routed + shared
    experts) or, where transformers lacks that class, the embedded model's Mixtral class."""
    import transformers

    if arch == "qwen3_5_moe":
        config = transformers.Qwen3_5MoeTextConfig(
            vocab_size=512, hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=64,
            shared_expert_intermediate_size=64, num_experts=16, num_experts_per_tok=4, max_position_embeddings=1024,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            eos_token_id=None, pad_token_id=0)
    else:
        config = transformers.MixtralConfig(
            vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=16, num_experts_per_tok=4, max_position_embeddings=1024,
            router_jitter_noise=0.0, pad_token_id=0, eos_token_id=None, bos_token_id=None)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.to(device=device, dtype=dtype).eval()


def pick_arch() -> tuple[str, str]:
    import transformers

    if hasattr(transformers, "Qwen3_5MoeForCausalLM") and hasattr(transformers, "Qwen3_5MoeTextConfig"):
        return "qwen3_5_moe", "Qwen3_5MoeForCausalLM"
    return "mixtral", f"MixtralForCausalLM (transformers {transformers.__version__} has no Qwen3_5MoeForCausalLM)"


def perturb_routers(model, rr, scale: float, seed: int = 1):
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for router in rr.moe_routers(other):
            noise = torch.randn(router.weight.shape, generator=gen) * scale * router.weight.float().std().item()
            router.weight.add_(noise.to(router.weight.device, router.weight.dtype))
    return other


def rollout(engine, rr, prompts: torch.Tensor, new_tokens: int, seed: int):
    """Sampled generation with the engine's routes and log-probs recorded: (ids (B, P+n), routes
    (B, P+n, L, k), rollout log-probs (B, n))."""
    recorder, logps = rr.RoutingReplay(engine), rr.RolloutLogpRecorder(engine, 1.0)
    torch.manual_seed(seed)
    try:
        with torch.no_grad(), recorder.recording():
            out = engine.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                                  temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                                  min_new_tokens=new_tokens, pad_token_id=0)
    finally:
        recorder.remove()
        logps.remove()
    p = prompts.shape[1]
    completions = out[:, p:]
    per_sample = rr.routes_from_generation(recorder.recorded_routes(), [p] * len(prompts),
                                           [new_tokens] * len(prompts), prompt_width=recorder.recorded_prefill_width())
    routes = torch.stack(per_sample)
    return out, routes, logps.padded([new_tokens] * len(prompts), completions[:, -1].tolist())


def completion_logps(model, ids: torch.Tensor, n: int) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, -n - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, -n:, None]).squeeze(-1)


def run(device: str, dtype_name: str, *, batch: int, prompt_len: int, new_tokens: int, scale: float) -> dict:
    rr = load_routing_replay()
    dtype = DTYPES[dtype_name]
    arch, arch_note = pick_arch()
    t0 = time.time()
    trainer = tiny_model(arch, dtype, device)
    layout = rr.RouteLayout.of(trainer)
    prompts = torch.randint(1, 512, (batch, prompt_len), generator=torch.Generator().manual_seed(5)).to(device)
    checks: dict[str, dict] = {}

    # 1. identity: the trainer's own routes replayed
    replay = rr.RoutingReplay(trainer)
    ids = torch.cat([prompts, torch.randint(1, 512, (batch, new_tokens), generator=torch.Generator().manual_seed(6)
                                            ).to(device)], dim=1)
    with torch.no_grad():
        with replay.recording():
            live = completion_logps(trainer, ids, new_tokens)
        own = replay.recorded_routes()
        noise = float((completion_logps(trainer, ids, new_tokens) - live).abs().max())  # run-to-run, no replay
        with replay.replaying(own):
            again = completion_logps(trainer, ids, new_tokens)
    diff = float((live - again).abs().max())
    # bitwise where the kernels are deterministic; else within the run-to-run noise of the same forward
    # (CUDA's atomic index_add in eager experts sums in a varying order)
    checks["identity"] = {"passed": diff == 0.0 or diff <= 4 * noise, "max_abs_diff": diff,
                          "run_to_run_max_abs_diff": noise, "agreement": replay.agreement.share}
    replay.agreement.reset()

    # 2-5 against two rollout engines: the same weights, and perturbed routers
    for name, engine in (("same_weights", trainer), ("perturbed_router", perturb_routers(trainer, rr, scale))):
        seqs, routes, rollout_logps = rollout(engine, rr, prompts, new_tokens, seed=7)
        with torch.no_grad():
            live = completion_logps(trainer, seqs, new_tokens)
            with replay.replaying(routes):
                replayed = completion_logps(trainer, seqs, new_tokens)
            agreement = replay.agreement.share
            replay.agreement.reset()
            used = rr.RoutingReplay(trainer)  # which experts the replayed forward used
            with replay.replaying(routes), used.recording():
                trainer(input_ids=seqs)
            used.remove()
        chosen = used.recorded_routes()
        known = (routes >= 0).all(-1)
        follows = bool(rr.same_sets(chosen[known].reshape(-1, layout.top_k),
                                    routes[known].reshape(-1, layout.top_k)).all())
        mask = torch.ones_like(live)
        kl_replay = rr.mismatch_kl(replayed, rollout_logps.to(device), mask)
        kl_live = rr.mismatch_kl(live, rollout_logps.to(device), mask)
        ok_agreement = 0 < agreement <= 1 and (agreement < 1 if name == "perturbed_router" else True)
        checks[f"forced_{name}"] = {"passed": follows, "positions": int(known.sum())}
        checks[f"agreement_{name}"] = {"passed": bool(ok_agreement), "router_agreement": agreement}
        checks[f"mismatch_kl_{name}"] = {
            "passed": all(math.isfinite(k) and k >= 0 for k in (kl_replay, kl_live)),
            "kl_with_replay": kl_replay, "kl_without_replay": kl_live,
            "mean_abs_dlogp_with_replay": float((replayed - rollout_logps.to(device)).abs().mean()),
            "mean_abs_dlogp_without_replay": float((live - rollout_logps.to(device)).abs().mean())}
        if name == "perturbed_router":
            trainer.train()
            trainer.zero_grad(set_to_none=True)
            with replay.replaying(routes):
                completion_logps(trainer, seqs, new_tokens).sum().backward()
            grads = [r.weight.grad for r in rr.moe_routers(trainer)]
            checks["gradient"] = {"passed": all(g is not None and bool(torch.isfinite(g).all()) and g.abs().sum() > 0
                                                for g in grads),
                                  "router_grad_norms": [float(g.float().norm()) if g is not None else None for g in grads]}
            trainer.eval()
    return {
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else device,
        "dtype": dtype_name, "model": arch_note if arch == "mixtral" else arch_note, "arch": arch,
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "routes": {"layers": layout.layers, "top_k": layout.top_k, "num_experts": layout.num_experts,
                   "dtype": str(layout.dtype), "bytes_per_token": layout.bytes_per_token},
        "batch": batch, "prompt_tokens": prompt_len, "completion_tokens": new_tokens,
        "checks": checks, "passed": all(c["passed"] for c in checks.values()),
        "seconds": round(time.time() - t0, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--perturb-scale", type=float, default=0.5,
                        help="router noise of the perturbed rollout, in units of the router weights' std")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(json.dumps({"passed": None, "skipped": "no CUDA device"}))
        return 0
    result = run(args.device, args.dtype, batch=args.batch, prompt_len=args.prompt_tokens,
                 new_tokens=args.new_tokens, scale=args.perturb_scale)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "routing_replay.json").write_text(text + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
