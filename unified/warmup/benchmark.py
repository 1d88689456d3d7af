"""The learning-signal benchmark: mean reward on held-out samples before vs after N warmup steps.

``python -m unified.warmup --recipe R --eval-before-after`` (or :func:`run_before_after`):

1. split ``data.heldout_size`` trajectories off the training data (or read ``data.heldout``);
2. sample ``samples_per_prompt`` completions per held-out prompt from the SFT checkpoint (the
   recipe's temperature/top-p/length, a fixed seed) and score them with the recipe's reward
   functions, weighted as in training: ``R = sum_k w_k r_k`` per completion;
3. train ``train.max_steps`` GSPO steps on the rest;
4. reload ``<output_dir>/final`` (the checkpoint the eval would get) and score it the same way.

It writes ``<output_dir>/before_after.json``: both means, per-reward-function means, N, wall
time per step and peak memory. This is a measurement to run and report, not a unit test.
"""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from unified.warmup.callbacks import peak_memory_gib
from unified.warmup.config import WarmupConfig

REPORT_FILE = "before_after.json"


def _noop(*args, **kwargs) -> None:
    return None


def _reward_name(func: Callable) -> str:
    return getattr(func, "__name__", None) or type(func).__name__


@torch.no_grad()
def heldout_reward(model, tokenizer, dataset, reward_funcs: Sequence[Callable], weights: Sequence[float] | None = None,
                   *, samples_per_prompt: int = 2, max_new_tokens: int = 128, temperature: float = 1.0,
                   top_p: float = 1.0, batch_size: int = 8, seed: int = 0, enable_thinking: bool = False
                   ) -> dict[str, Any]:
    """Mean weighted reward of sampled completions on ``dataset`` (TRL reward-function protocol)."""
    weights = list(weights) if weights is not None else [1.0] * len(reward_funcs)
    model.eval()
    device = next(model.parameters()).device
    rows = [dataset[i] for i in range(len(dataset)) for _ in range(samples_per_prompt)]
    torch.manual_seed(seed)
    completions: list[str] = []
    completion_ids: list[list[int]] = []
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    start = time.time()
    try:
        for lo in range(0, len(rows), batch_size):
            batch = rows[lo:lo + batch_size]
            texts = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True,
                                                   enable_thinking=enable_thinking) for r in batch]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=temperature > 0,
                                 temperature=temperature if temperature > 0 else None, top_p=top_p,
                                 pad_token_id=tokenizer.pad_token_id)
            for seq in out[:, enc["input_ids"].shape[1]:]:
                ids = seq.tolist()
                eos = tokenizer.eos_token_id
                if eos in ids:
                    ids = ids[:ids.index(eos) + 1]
                completion_ids.append(ids)
                completions.append(tokenizer.decode(ids, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = old_side
    gen_seconds = time.time() - start
    prompts = [r["prompt"] for r in rows]
    chat_completions = [[{"role": "assistant", "content": c}] for c in completions]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"} if rows else {}
    per_func: dict[str, float] = {}
    total = torch.zeros(len(rows), dtype=torch.float64)
    for func, w in zip(reward_funcs, weights, strict=True):
        values = func(prompts=prompts, completions=chat_completions, completion_ids=completion_ids,
                      trainer_state=None, log_extra=_noop, log_metric=_noop, **columns)
        vals = torch.tensor([float("nan") if v is None else float(v) for v in values], dtype=torch.float64)
        per_func[_reward_name(func)] = float(torch.nanmean(vals)) if len(vals) else float("nan")
        total += w * torch.nan_to_num(vals, nan=0.0)
    return {
        "mean_reward": float(total.mean()) if len(rows) else float("nan"),
        "std_reward": float(total.std()) if len(rows) > 1 else 0.0,
        "per_function": per_func,
        "prompts": len(dataset),
        "completions": len(rows),
        "mean_completion_tokens": sum(map(len, completion_ids)) / max(len(completion_ids), 1),
        "generation_seconds": round(gen_seconds, 2),
    }


def run_before_after(cfg: WarmupConfig, *, samples_per_prompt: int = 2) -> dict[str, Any]:
    """Held-out reward of the SFT checkpoint, GSPO warmup, held-out reward of ``final/``."""
    from unified.models import load_checkpoint
    from unified.warmup.data import load_rewards, load_splits
    from unified.warmup.trainer import load_policy, run_warmup, training_device

    if cfg.resume == "auto" and (Path(cfg.output_dir) / "final").exists():
        raise ValueError(f"{cfg.output_dir} already holds a finished run; use a fresh output_dir for the benchmark")
    device = training_device()
    policy = load_policy(cfg, device)
    train, heldout = load_splits(cfg, policy.tokenizer)
    if heldout is None or len(heldout) == 0:
        raise ValueError("--eval-before-after needs held-out data: set data.heldout_size or data.heldout")
    funcs, weights = load_rewards(cfg)
    gen = cfg.generation
    score_kwargs = dict(samples_per_prompt=samples_per_prompt, max_new_tokens=gen.max_completion_length,
                        temperature=gen.temperature, top_p=gen.top_p, seed=cfg.train.seed + 1,
                        enable_thinking=gen.enable_thinking,
                        batch_size=max(cfg.train.per_device_train_batch_size, 1))
    before = heldout_reward(policy.model, policy.tokenizer, heldout, funcs, weights, **score_kwargs)
    print(f"before: mean reward {before['mean_reward']:.4f} on {before['completions']} held-out completions", flush=True)
    policy.model.train()
    result = run_warmup(cfg, train_dataset=train, reward_funcs=funcs, reward_weights=weights, model=policy.model,
                        tokenizer=policy.tokenizer)
    del policy
    gc.collect()
    trained = load_checkpoint(result.final_dir, device=device, dtype=torch.float32)
    after = heldout_reward(trained.model, trained.tokenizer, heldout, funcs, weights, **score_kwargs)
    print(f"after {result.global_step} steps: mean reward {after['mean_reward']:.4f}", flush=True)
    report = {
        "steps": result.global_step, "before": before, "after": after,
        "delta": after["mean_reward"] - before["mean_reward"],
        "seconds_per_step": result.seconds_per_step, "train_seconds": result.train_seconds,
        "peak_memory": peak_memory_gib(), "kernels": result.kernels, "final_dir": result.final_dir,
        "heldout_size": len(heldout), "train_size": len(train),
    }
    path = Path(cfg.output_dir) / REPORT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    os.replace(tmp, path)
    return report
