"""The learning-signal benchmark: mean reward on held-out samples before vs after N warmup steps.

``python -m unified.warmup --recipe R --eval-before-after`` (or :func:`run_before_after`):

1. split ``data.heldout_size`` trajectories off the training data (or read ``data.heldout``);
2. sample ``samples_per_prompt`` completions per held-out prompt from the SFT checkpoint (the
   recipe's temperature/top-p/length, a fixed seed) and score them with the recipe's reward
   functions, weighted as in training: ``R = sum_k w_k r_k`` per completion (the training-only
   ``training_only`` reward entries are left out: the score is the same whatever the shaping);
3. train ``train.max_steps`` GSPO steps on the rest;
4. reload ``<output_dir>/final`` (the checkpoint the eval would get) and score it the same way.

It writes ``<output_dir>/before_after.json``: both means, per-reward-function means, N, wall
time per step and peak memory, and the paired comparison over held-out prompts: with
``b_j``, ``a_j`` the mean reward of prompt ``j`` before and after, ``d_j = a_j - b_j``,
``mean(d)`` and its standard error ``sd(d) / sqrt(P)`` over the ``P`` prompts, how many
prompts went up, down or stayed, and how many completions are repetition loops before and after
(:func:`unified.warmup.degenerate.find_loop`). Both passes use the same seed and batches, so with sampling
the draws are coupled (common random numbers) and with ``temperature=0`` (greedy) the
difference is due to the weights alone.

The benchmark resumes like the warmup: the "before" scores are written as soon as they are
measured, and a rerun with the same output dir and held-out set reuses them and resumes the
training from its last checkpoint (raise ``train.max_steps`` to continue a finished run).
This is a measurement to run and report, not a unit test.
"""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path
from typing import Any, Sequence

import torch

from unified.models import load_checkpoint
from unified.store import write_json_atomic
from unified.warmup.callbacks import METRICS_FILE, peak_memory_gib, read_metrics
from unified.warmup.config import WarmupConfig
from unified.warmup.data import load_rewards, load_splits
from unified.warmup.degenerate import loop_count
from unified.warmup.heldout import heldout_reward, reward_name
from unified.warmup.model_card import REPORT_FILE, reward_names, write_model_card
from unified.warmup.trainer import load_policy, run_warmup, training_device

def paired_difference(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """Paired comparison of per-prompt rewards: mean of ``d_j = a_j - b_j``, its standard error, signs."""
    if len(before) != len(after):
        raise ValueError(f"paired_difference: {len(before)} before vs {len(after)} after values")
    d = [a - b for a, b in zip(after, before)]
    n = len(d)
    mean = sum(d) / n if n else float("nan")
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else float("nan")
    return {"prompts": n, "mean_diff": mean, "sd_diff": sd, "se_diff": sd / math.sqrt(n) if n > 1 else float("nan"),
            "up": sum(x > 1e-9 for x in d), "down": sum(x < -1e-9 for x in d), "same": sum(abs(x) <= 1e-9 for x in d)}


def _step_times(output_dir: Path) -> list[float]:
    """Wall time of every optimizer step the run logged (across resumed processes)."""
    path = output_dir / METRICS_FILE
    if not path.is_file():
        return []
    seen: dict[int, float] = {}
    for record in read_metrics(path):
        if "step_time" in record and record.get("step") is not None:
            seen[int(record["step"])] = float(record["step_time"])  # a step redone after a crash: the last one
    return [seen[k] for k in sorted(seen)]


RENAMED_SETTINGS = {"enable_thinking": "thinking"}
"""Keys of a stored ``settings`` record that were renamed (old -> new); the values mean the same."""


def _renamed_settings(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """``record`` with the old names of :data:`RENAMED_SETTINGS` in its ``settings`` read as the new ones."""
    settings = record.get("settings")
    if not isinstance(settings, dict):
        return record
    old = [k for k in RENAMED_SETTINGS if k in settings]
    if old:
        print(f"{path}: settings {', '.join(old)} read as {', '.join(RENAMED_SETTINGS[k] for k in old)} "
              "(renamed)", flush=True)
        settings = {RENAMED_SETTINGS.get(k, k): v for k, v in settings.items()}
    return {**record, "settings": settings}


def run_before_after(cfg: WarmupConfig, *, samples_per_prompt: int = 2, temperature: float | None = None,
                     policy=None) -> dict[str, Any]:
    """Held-out reward of the SFT checkpoint, GSPO warmup, held-out reward of ``final/``.

    ``temperature`` overrides the recipe's sampling temperature for the held-out scoring only
    (0 = greedy, then one completion per prompt is enough). ``policy``: a
    :class:`~unified.warmup.trainer.TrainablePolicy` already in memory (trained in place), instead of
    loading ``model.name_or_path`` again.
    """
    out = Path(cfg.output_dir)
    path = out / REPORT_FILE
    previous: dict[str, Any] = {}
    if path.is_file():
        previous = _renamed_settings(json.loads(path.read_text()), path)
    elif cfg.resume == "auto" and (out / "final").exists():
        raise ValueError(f"{cfg.output_dir} already holds a finished run without a before/after record; "
                         "use a fresh output_dir for the benchmark")
    device = training_device()
    policy = policy if policy is not None else load_policy(cfg, device)
    train, heldout, validation = load_splits(cfg, policy.tokenizer)
    if heldout is None or len(heldout) == 0:
        raise ValueError("--eval-before-after needs held-out data: set data.heldout_size or data.heldout")
    funcs, weights = load_rewards(cfg, training=False)  # the score: the recipe's rewards, no shaping term
    train_funcs, train_weights = load_rewards(cfg)
    gen = cfg.generation
    temperature = gen.temperature if temperature is None else temperature
    if temperature <= 0:
        samples_per_prompt = 1  # greedy: every sample is the same
    # rows generated together: the training's generation batch (its memory is already budgeted), not the
    # loss micro-batch, which a memory-lean recipe sets to 1. Greedy scoring does not depend on the seed,
    # so runs that differ only in train.seed share (and can reuse) the "before" measurement.
    score_kwargs = dict(samples_per_prompt=samples_per_prompt, max_new_tokens=gen.max_completion_length,
                        temperature=temperature, top_p=gen.top_p, seed=0 if temperature <= 0 else cfg.train.seed + 1,
                        thinking=gen.thinking,
                        batch_size=max(cfg.train.per_device_train_batch_size * cfg.train.gradient_accumulation_steps, 1))
    threads = {"cpu_threads": gen.cpu_threads}  # how fast, not what is generated: not part of the settings
    settings = {**score_kwargs, "heldout": [str(r) for r in heldout["sample_id"]],
                "rewards": [reward_name(f) for f in funcs], "weights": list(weights)}
    if previous.get("settings") == settings and "before" in previous:
        before = previous["before"]
        print(f"before (from {path}): mean reward {before['mean_reward']:.4f}", flush=True)
    else:
        if previous:
            raise ValueError(f"{path} was measured with other held-out settings; use a fresh output_dir")
        before = heldout_reward(policy.model, policy.tokenizer, heldout, funcs, weights, **score_kwargs, **threads)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"status": "training", "settings": settings, "before": before})
    print(f"before: mean reward {before['mean_reward']:.4f} on {before['completions']} held-out completions", flush=True)
    policy.model.train()
    result = run_warmup(cfg, train_dataset=train, reward_funcs=train_funcs, reward_weights=train_weights,
                        model=policy.model, tokenizer=policy.tokenizer, probe_rewards=(funcs, weights),
                        validation_dataset=validation)
    del policy
    gc.collect()
    trained = load_checkpoint(result.final_dir, device=device, dtype=torch.float32)
    after = heldout_reward(trained.model, trained.tokenizer, heldout, funcs, weights, **score_kwargs, **threads)
    paired = paired_difference(before["per_prompt"], after["per_prompt"])
    loops = {"before": loop_count(before["completions_text"]), "after": loop_count(after["completions_text"])}
    print(f"after {result.global_step} steps: mean reward {after['mean_reward']:.4f} (paired difference "
          f"{paired['mean_diff']:+.4f} +- {paired['se_diff']:.4f} SE over {paired['prompts']} prompts; "
          f"{paired['up']} up, {paired['down']} down)", flush=True)
    print(f"repetition loops in the held-out completions: {loops['before']} of {before['completions']} before, "
          f"{loops['after']} of {after['completions']} after", flush=True)
    if result.collapse:
        print(f"collapse guard: {json.dumps(result.collapse)}", flush=True)
    step_times = _step_times(out)
    report = {
        "status": "done", "settings": settings,
        "steps": result.global_step, "before": before, "after": after,
        "delta": after["mean_reward"] - before["mean_reward"], "paired": paired, "loops": loops,
        "collapse": result.collapse,
        "seconds_per_step": result.seconds_per_step, "train_seconds": result.train_seconds,
        "step_times": step_times,
        "mean_step_seconds": sum(step_times) / len(step_times) if step_times else result.seconds_per_step,
        "peak_memory": peak_memory_gib(), "kernels": result.kernels, "final_dir": result.final_dir,
        "heldout_size": len(heldout), "train_size": len(train),
        "validation_size": len(validation) if validation is not None else 0,
    }
    write_json_atomic(path, report)

    write_model_card(cfg, result.final_dir, steps=result.global_step, train_samples=len(train),
                     rewards=list(zip(reward_names(train_funcs), train_weights)),
                     seconds_per_step=result.seconds_per_step, resumed_from=result.resumed_from, before_after=report)
    return report
