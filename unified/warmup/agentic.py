"""Agentic multi-turn GSPO on a benchmark's environment: the eval's episodes are the RL samples.

``python -m unified.warmup --recipe recipes/warmup/agentic_cpu.yaml`` (a recipe whose ``rewards`` hold a
``benchmark`` entry, :class:`unified.rewards.entries.BenchmarkEntry`). One step:

1. rollouts: ``gspo.num_generations`` episodes of each of ``agentic.tasks_per_step`` training tasks,
   through the eval's agent loop on the adapter's own environment
   (:class:`unified.rewards.environment.BenchmarkEnvironment`), sampled by the checkpoint's engine
   (the ``hf`` backend, which reports each generated token's log-probability);
2. rewards: each episode's :attr:`unified.types.EpisodeResult.reward` (the adapter's ``score``; None for
   skipped and crashed episodes, 0 when scoring failed after the agent acted), advantages within
   each task's group;
3. update: ``gspo.num_iterations`` optimizer steps over the episodes' token trajectories with GSPO's
   sequence-level clipped ratio, tool observations and user turns masked out
   (:mod:`unified.warmup.agentic_loss`).

With ``agentic.eval_before_after`` the eval's own runner (:func:`unified.eval.runner.run_eval`) scores
the held-out tasks (``heldout_size`` of the entry: never trained on) greedily before and after
training into ``<output_dir>/eval_before`` and ``<output_dir>/eval_after``, the same run records
as ``python -m unified.eval``; ``<output_dir>/agentic_report.json`` gives both scores with their SE
and the paired difference. ``<output_dir>/metrics.jsonl`` holds one line a step.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from unified.benchmarks.contract import SCORING_FAILED_AFTER_AGENT, RunContext
from unified.config import to_dict
from unified.eval.config import EvalConfig
from unified.eval.reader import read_run
from unified.eval.runner import run_eval
from unified.inference.base import SamplingConfig
from unified.inference.hf import HFPolicy
from unified.kernels import select_kernels
from unified.models import load_checkpoint
from unified.rewards.entries import BenchmarkEntry, benchmark_entries
from unified.rewards.environment import BenchmarkEnvironment, Rollout
from unified.store import append_jsonl, write_json_atomic
from unified.warmup.agentic_backends import rollout_sampler
from unified.warmup.agentic_checks import IGNORED_LINE, ignored_settings, refuse_agentic_problems
from unified.warmup.agentic_checkpoint import (AgenticState, keep_metrics_up_to, load_checkpoint_into, resume_point, save_checkpoint,
                                               seed_all, set_rng_state)
from unified.warmup.agentic_loss import group_advantages, gspo_sequence_loss, masked_token_logprobs
from unified.warmup.config import WarmupConfig
from unified.warmup.preempt import Preempted, PreemptionCallback
from unified.warmup.trainer import freeze_lower_layers, training_device

log = logging.getLogger(__name__)


@dataclass
class StepStats:
    """What one agentic step did (a line of ``metrics.jsonl``)."""

    step: int
    episodes: int
    reward_mean: float | None
    """Mean reward over the episodes with a reward."""
    no_reward: int
    """Episodes left out (skipped or crashed: reward None)."""
    errors: list[str] = field(default_factory=list)
    """``task_id/trial: first line of the error`` of every episode that errored (contained)."""
    scoring_failed: int = 0
    """Episodes whose scorer raised after the agent acted (reward 0, ``details["status"]``)."""
    samples: int = 0
    """Token trajectories the loss was taken over."""
    loss: float = 0.0
    clip_fraction: float = 0.0
    seconds: float = 0.0


def the_entry(cfg: WarmupConfig) -> BenchmarkEntry:
    """The recipe's one benchmark entry (several environments in one run are not supported yet)."""
    entries = benchmark_entries(cfg.rewards)
    if len(entries) != 1:
        raise ValueError(f"rewards: agentic training takes exactly one benchmark entry of weight > 0, got {len(entries)}")
    return entries[0]


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def train_step(model, optimizer, rollouts: list[Rollout], cfg: WarmupConfig, step: int) -> StepStats:
    """Advantages per task group, then ``gspo.num_iterations`` updates over the rollouts' trajectories.
    An episode without a reward, without a trajectory or in a group of equal rewards adds nothing."""
    started = time.monotonic()
    rewards = [r.reward for r in rollouts]
    advantages = group_advantages(rewards, [r.task.id for r in rollouts])
    work = [(s, a) for r, a in zip(rollouts, advantages) if a is not None and a != 0.0 for s in r.samples()]
    valid = [x for x in rewards if x is not None]
    stats = StepStats(step=step, episodes=len(rollouts), reward_mean=sum(valid) / len(valid) if valid else None,
                      no_reward=len(rewards) - len(valid), samples=len(work),
                      errors=[f"{r.task.id}/{r.trial}: {first_line(r.result.error)}" for r in rollouts if r.result.error],
                      scoring_failed=sum(r.result.details.get("status") == SCORING_FAILED_AFTER_AGENT for r in rollouts))
    clipped = total = 0
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    for _ in range(cfg.gspo.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for sample, advantage in work:
            new = masked_token_logprobs(model, sample.prompt_ids, sample.response_ids,
                                        temperature=cfg.generation.temperature)
            old = torch.tensor(sample.response_logprobs) if sample.response_logprobs is not None else None
            loss, was_clipped = gspo_sequence_loss(new, old, torch.tensor(sample.response_mask), advantage,
                                                   epsilon=cfg.gspo.epsilon, epsilon_high=cfg.gspo.epsilon_high)
            (loss / len(work)).backward()
            loss_sum += float(loss.detach()) / len(work)
            clipped, total = clipped + was_clipped, total + 1
        if work:
            torch.nn.utils.clip_grad_norm_(params, cfg.train.max_grad_norm)
            optimizer.step()
        stats.loss = loss_sum
    model.eval()
    stats.clip_fraction = clipped / total if total else 0.0
    stats.seconds = time.monotonic() - started
    return stats


def eval_config(cfg: WarmupConfig, entry: BenchmarkEntry, env: BenchmarkEnvironment, out: Path) -> EvalConfig:
    """The eval of the held-out tasks, as ``python -m unified.eval`` would run it (greedy)."""
    return EvalConfig(benchmarks=[entry.adapter], model=cfg.model.name_or_path, backend="hf", prompting=entry.prompting,
                      out=str(out), split=entry.split, task_ids=[t.id for t in env.heldout_tasks], runs=1,
                      max_in_flight=cfg.agentic.max_in_flight, limits=entry.limits,
                      sampling=SamplingConfig(temperature=0.0, max_new_tokens=cfg.generation.max_completion_length,
                                              thinking=cfg.generation.thinking),
                      benchmark_config={entry.adapter: dict(entry.settings)} if entry.settings else {})


def scores_with_se(run_dir: Path) -> dict[str, Any]:
    """Per-task scores of a run directory's results (a crashed episode counts 0, as in the eval; skipped
    ones are left out), their mean and standard error ``sd / sqrt(n)``."""
    by_task: dict[str, list[float]] = {}
    for bench in read_run(run_dir).benchmarks.values():
        for result in bench.results:
            if result.skipped is None:
                by_task.setdefault(result.task_id, []).append(float(result.score or 0.0))
    per_task = {k: sum(v) / len(v) for k, v in sorted(by_task.items())}
    return {"n": len(per_task), **mean_se(list(per_task.values())), "per_task": per_task}


def mean_se(values: list[float]) -> dict[str, float | None]:
    n = len(values)
    if not n:
        return {"mean": None, "se": None}
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "se": sd / math.sqrt(n)}


def held_out_eval(cfg: WarmupConfig, entry: BenchmarkEntry, env: BenchmarkEnvironment, loaded, name: str,
                  steps_done: int = 0) -> dict[str, Any]:
    """The eval's own runner on the held-out tasks with the weights as they are now (the episodes' ``model``
    says how many agentic steps the in-memory weights had; run.json records the backend as ``given``)."""
    ecfg = eval_config(cfg, entry, env, Path(cfg.output_dir) / name)
    label = cfg.model.name_or_path + (f" after {steps_done} agentic GSPO steps" if steps_done else "")
    policy = HFPolicy(label, ecfg.sampling, loaded=loaded, max_batch_size=cfg.agentic.max_in_flight,
                      prefix_cache_mb=0)
    loaded.model.eval()
    run_eval(ecfg, policy=policy, resume_anyway=True)
    return scores_with_se(Path(ecfg.out))


def paired_difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    common = sorted(set(before["per_task"]) & set(after["per_task"]))
    return {"n": len(common), **mean_se([after["per_task"][k] - before["per_task"][k] for k in common])}


def load_trainable(cfg: WarmupConfig):
    """The checkpoint in fp32 on the training device, its lower layers frozen as the recipe says."""
    device = training_device()
    kernels = select_kernels(device, torch.float32, attention=cfg.model.attn_implementation,
                             experts=cfg.model.experts_implementation)
    loaded = load_checkpoint(cfg.model.name_or_path, device=device, dtype=torch.float32,
                             attn_implementation=kernels.attention, experts_implementation=kernels.experts,
                             trust_remote_code=cfg.model.trust_remote_code)
    if cfg.model.trainable_layers is not None:
        freeze_lower_layers(loaded.model, cfg.model.trainable_layers)
    return loaded


def set_aside_stale_eval_after(out: Path) -> None:
    """An ``eval_after`` of an earlier, shorter run of this output dir (``train.max_steps`` raised since) scored
    other weights: it moves to ``eval_after_step<N>`` (N: the steps it scored) instead of being resumed."""
    previous = out / "agentic_report.json"
    if (out / "eval_after").exists() and previous.exists():
        steps = len(json.loads(previous.read_text()).get("steps") or [])
        (out / "eval_after").rename(out / f"eval_after_step{steps}")


def make_sampler(cfg: WarmupConfig, loaded):
    """The episodes' policy on ``generation.backend`` (:mod:`unified.warmup.agentic_backends`)."""
    return rollout_sampler(cfg, loaded)


def preempt_requested(preempt: PreemptionCallback) -> bool:
    """SIGUSR1 arrived or ``<output_dir>/preempt.request`` appeared (one process: no all-reduce)."""
    return preempt.signalled or preempt.request.exists()


def run_agentic(cfg: WarmupConfig, *, loaded=None) -> dict[str, Any]:
    """Train ``cfg.train.max_steps`` agentic GSPO steps; returns (and writes) the report.

    Every ``train.save_steps`` steps, at the last step and on a pre-emption warning (SIGUSR1 or
    ``preempt.request``, as the single-turn warmup: :mod:`unified.warmup.preempt`) it saves
    ``checkpoint-N`` (:mod:`unified.warmup.agentic_checkpoint`); ``resume: auto`` continues from the last
    complete one at step N + 1 (weights, optimizer, RNG, metrics, task cursor, the eval before). A
    pre-emption raises :class:`unified.warmup.preempt.Preempted` after the save."""
    entry = the_entry(cfg)
    refuse_agentic_problems(cfg)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.train.seed)
    env = BenchmarkEnvironment.from_entry(entry, run=RunContext(work_dir=out / "rollouts", runs=cfg.gspo.num_generations))
    resume = resume_point(cfg)
    loaded = loaded if loaded is not None else load_trainable(cfg)
    report: dict[str, Any] = {"benchmark": entry.adapter, "settings": entry.settings, "recipe": to_dict(cfg),
                              "settings_not_applied": ignored_settings(cfg),
                              "train_tasks": [t.id for t in env.train_tasks],
                              "heldout_tasks": [t.id for t in env.heldout_tasks]}
    for setting in report["settings_not_applied"]:
        log.warning(IGNORED_LINE.format(setting))
    params = [p for p in loaded.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.train.learning_rate, weight_decay=cfg.train.weight_decay)
    state = AgenticState()
    if resume is not None:
        state = load_checkpoint_into(resume, loaded, optimizer)
        report["resumed_from"] = str(resume)
        print(f"unified.warmup: resuming the agentic run from {resume} (step {state.global_step + 1} next)", flush=True)
    keep_metrics_up_to(out / "metrics.jsonl", state.global_step)
    if state.global_step >= cfg.train.max_steps and (out / "agentic_report.json").exists():
        return {**json.loads((out / "agentic_report.json").read_text()), "already_finished": True}
    if cfg.agentic.eval_before_after and env.heldout_tasks:
        if state.before is None:
            state.before = held_out_eval(cfg, entry, env, loaded, "eval_before")
        report["before"] = state.before
    sampler = make_sampler(cfg, loaded)
    if state.rng is not None:  # the generators as they were after step N, whatever loading and the eval drew
        set_rng_state(state.rng)
    else:
        seed_all(cfg.train.seed)
    preempt = PreemptionCallback(out).install()
    try:
        for step in range(state.global_step + 1, cfg.train.max_steps + 1):
            start = (step - 1) * cfg.agentic.tasks_per_step
            tasks = [env.train_tasks[(start + k) % len(env.train_tasks)] for k in range(cfg.agentic.tasks_per_step)]
            loaded.model.eval()
            sampler.sync_weights(loaded.model, step)
            rollouts = env.rollouts(sampler.policy, tasks, cfg.gspo.num_generations,
                                    max_in_flight=cfg.agentic.max_in_flight, model_name=cfg.model.name_or_path)
            stats = train_step(loaded.model, optimizer, rollouts, cfg, step)
            append_jsonl(out / "metrics.jsonl", to_dict(stats))
            log.info("agentic step %d: reward %s over %d episodes (%d without), %d samples, loss %.4f", step,
                     stats.reward_mean, stats.episodes, stats.no_reward, stats.samples, stats.loss)
            state.global_step = step
            state.steps.append(to_dict(stats))
            state.tasks_used.append([t.id for t in tasks])
            stop = preempt_requested(preempt)
            if stop or step % cfg.train.save_steps == 0 or step == cfg.train.max_steps:
                saved = save_checkpoint(out, loaded, optimizer, state, keep=cfg.train.save_total_limit)
                if stop and step < cfg.train.max_steps:
                    raise Preempted(step, saved)
    finally:
        preempt.uninstall()
        sampler.close()
    report["steps"] = state.steps
    report["tasks_used"] = state.tasks_used
    if cfg.agentic.save_final:
        final = out / "final"
        loaded.model.save_pretrained(final)
        loaded.tokenizer.save_pretrained(final)
        report["final"] = str(final)
    if cfg.agentic.eval_before_after and env.heldout_tasks:
        set_aside_stale_eval_after(out)
        report["after"] = held_out_eval(cfg, entry, env, loaded, "eval_after", steps_done=len(state.steps))
        report["difference"] = paired_difference(report["before"], report["after"])
    write_json_atomic(out / "agentic_report.json", report)
    return report


__all__ = ["StepStats", "eval_config", "held_out_eval", "paired_difference", "make_sampler", "run_agentic", "scores_with_se",
           "train_step"]
