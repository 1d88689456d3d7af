"""The held-out reward: mean weighted reward of sampled completions on a held-out set, the measurement
behind the before/after benchmark (:mod:`unified.warmup.benchmark`) and the collapse guard's probe
(:mod:`unified.warmup.guard`), below both of them."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch
from einops import reduce

from unified.warmup.gspo_trainer import torch_threads

def _noop(*args, **kwargs) -> None:
    return None


def reward_name(func: Callable) -> str:
    return getattr(func, "__name__", None) or type(func).__name__


@torch.no_grad()
def heldout_reward(model, tokenizer, dataset, reward_funcs: Sequence[Callable], weights: Sequence[float] | None = None,
                   *, samples_per_prompt: int = 2, max_new_tokens: int = 128, temperature: float = 1.0,
                   top_p: float = 1.0, batch_size: int = 8, seed: int = 0, thinking: bool = False,
                   cpu_threads: int | None = None) -> dict[str, Any]:
    """Mean weighted reward of sampled completions on ``dataset`` (TRL reward-function protocol).

    ``cpu_threads``: torch threads while generating on a CPU (``generation.cpu_threads``)."""
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
                                                   enable_thinking=thinking) for r in batch]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            with torch_threads(cpu_threads, device):
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
        per_func[reward_name(func)] = float(torch.nanmean(vals)) if len(vals) else float("nan")
        total += w * torch.nan_to_num(vals, nan=0.0)
    # completions are grouped prompt by prompt: (P * S,) -> (P,), the mean over each prompt's S samples
    per_prompt = reduce(total, "(prompt sample) -> prompt", "mean", sample=samples_per_prompt) if len(rows) else total
    return {
        "mean_reward": float(total.mean()) if len(rows) else float("nan"),
        "per_prompt": [round(float(v), 6) for v in per_prompt],
        "sample_ids": [str(dataset[i].get("sample_id", i)) for i in range(len(dataset))],
        "completions_text": completions,
        "completion_ids": completion_ids,
        "std_reward": float(total.std()) if len(rows) > 1 else 0.0,
        "per_function": per_func,
        "prompts": len(dataset),
        "completions": len(rows),
        "mean_completion_tokens": sum(map(len, completion_ids)) / max(len(completion_ids), 1),
        "generation_seconds": round(gen_seconds, 2),
    }
