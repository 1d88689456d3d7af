"""Agentic multi-turn GSPO on a benchmark's environment: the eval's episodes are the RL samples.

``python -m unified.warmup --recipe recipes/warmup/agentic_cpu.yaml`` (a recipe whose ``rewards`` hold a
``benchmark`` entry, :class:`unified.rewards.entries.BenchmarkEntry`). One step:

1. rollouts: ``gspo.num_generations`` episodes of each of ``agentic.tasks_per_step`` training tasks,
   through the eval's agent loop on the adapter's own environment
   (:class:`unified.rewards.environment.BenchmarkEnvironment`), sampled by the checkpoint's engine
   (the ``hf`` backend, which reports each generated token's log-probability);
2. rewards: each episode's :attr:`unified.types.EpisodeResult.reward` (the adapter's ``score``; None for
   skipped and crashed episodes, 0 when scoring failed after the agent acted), advantages within
   each task's group; a group whose rewards are all equal is replaced by the next training tasks, up to
   ``agentic.resample_rounds`` extra rounds (dynamic sampling, :func:`draw_groups`);
3. update: ``gspo.num_iterations`` optimizer steps over the episodes' token trajectories with GSPO's
   sequence-level clipped ratio against the trainer's own log-probs at the step's start, the sampler's
   gap corrected by token-level truncated IS, each episode weighted once, tool observations and user
   turns masked out (:mod:`unified.warmup.agentic_loss`);
4. the fail-fast monitor (:mod:`unified.warmup.failfast`: ``monitor.max_zero_variance_share``,
   ``max_dropped_share``, ``patience_batches``; one step = one generation batch) and a run that put no
   sample in the loss by ``train.max_steps`` save ``checkpoint-N`` and stop (``report["stopped"]``; the
   CLI exits 3 naming the zero-variance groups).

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
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from unified.benchmarks.contract import SCORING_FAILED_AFTER_AGENT, RunContext, Task
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
from unified.types import TokenTrajectory
from unified.warmup.agentic_backends import rollout_sampler
from unified.warmup.agentic_checks import IGNORED_LINE, ignored_settings, refuse_agentic_problems
from unified.warmup.agentic_checkpoint import (AgenticState, keep_metrics_up_to, load_checkpoint_into, resume_point, save_checkpoint,
                                               seed_all, set_rng_state)
from unified.warmup.agentic_loss import (group_advantages, gspo_sequence_loss, masked_token_logprobs,
                                         truncated_is_weights, zero_variance)
from unified.warmup.callbacks import peak_memory_gib
from unified.warmup.config import WarmupConfig
from unified.warmup.failfast import FailFastMonitor
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
    """Token trajectories the loss was taken over (samples in the loss)."""
    episodes_in_loss: int = 0
    """Episodes those samples came from: N of the loss (each weighs 1/N, whatever its number of samples)."""
    loss: float = 0.0
    clip_fraction: float = 0.0
    groups_drawn: int = 0
    """Task groups rolled out this step, the resampled ones included (``agentic.resample_rounds``)."""
    zero_variance_groups: list[str] = field(default_factory=list)
    """Task ids of the groups drawn whose rewards were all equal (no gradient), in draw order."""
    zero_variance_share: float = 0.0
    """``len(zero_variance_groups) / groups_drawn`` (the fail-fast monitor's ``rewards/zero_variance_share``)."""
    dropped_share: float = 0.0
    """Share of the episodes drawn without a reward (``rewards/dropped_share``)."""
    is_weight_mean: float | None = None
    """Mean over the loss's policy tokens of the sampler correction w_t (after its cap; 1 = no gap)."""
    is_capped_share: float | None = None
    """Share of those tokens whose weight the cap (``gspo.vllm_importance_sampling_clip_max``) cut."""
    sampler_abs_logp_diff: float | None = None
    """Mean |log pi_trainer - log pi_sampler| over those tokens (nats)."""
    peak_rss_gib: float = 0.0
    """The process's peak resident set size so far."""
    seconds: float = 0.0
    """The step's wall time: rollouts (resampled ones included) and update."""


def the_entry(cfg: WarmupConfig) -> BenchmarkEntry:
    """The recipe's one benchmark entry (several environments in one run are not supported yet)."""
    entries = benchmark_entries(cfg.rewards)
    if len(entries) != 1:
        raise ValueError(f"rewards: agentic training takes exactly one benchmark entry of weight > 0, got {len(entries)}")
    return entries[0]


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def loss_work(rollouts: list[Rollout]) -> list[tuple[TokenTrajectory, float, float]]:
    """``(sample, advantage, weight)`` of every sample in the loss: advantages within each task group, and an
    episode's k samples (a chat template that rewrote a turn) weighing 1/k each, so every episode weighs one."""
    advantages = group_advantages([r.reward for r in rollouts], [r.task.id for r in rollouts])
    work = []
    for rollout, advantage in zip(rollouts, advantages):
        if advantage is None or advantage == 0.0:
            continue
        samples = rollout.samples()
        work += [(sample, advantage, 1.0 / len(samples)) for sample in samples]
    return work


def train_step(model, optimizer, rollouts: list[Rollout], cfg: WarmupConfig, step: int) -> StepStats:
    """Advantages per task group, then ``gspo.num_iterations`` updates over the rollouts' trajectories.
    An episode without a reward, without a trajectory or in a group of equal rewards adds nothing.

    pi_old is the trainer's own log-probability at the start of the step (computed here under no_grad; with one
    iteration it is the first forward's, detached), and the sampler's reported log-probs only enter the
    token-level truncated IS weight (:func:`unified.warmup.agentic_loss.truncated_is_weights`)."""
    started = time.monotonic()
    rewards = [r.reward for r in rollouts]
    work = loss_work(rollouts)
    episodes = sum(w for _, _, w in work)
    valid = [x for x in rewards if x is not None]
    stats = StepStats(step=step, episodes=len(rollouts), reward_mean=sum(valid) / len(valid) if valid else None,
                      no_reward=len(rewards) - len(valid), samples=len(work), episodes_in_loss=round(episodes),
                      errors=[f"{r.task.id}/{r.trial}: {first_line(r.result.error)}" for r in rollouts if r.result.error],
                      scoring_failed=sum(r.result.details.get("status") == SCORING_FAILED_AFTER_AGENT for r in rollouts))
    g, temperature = cfg.gspo, cfg.generation.temperature
    clipped = total = 0
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    olds: list[torch.Tensor | None] = [None] * len(work)
    if g.num_iterations > 1:  # pi_old: the weights as the step starts, before its first update
        with torch.no_grad():
            olds = [masked_token_logprobs(model, s.prompt_ids, s.response_ids, temperature=temperature)
                    for s, _, _ in work]
    weights: list[torch.Tensor | None] = [None] * len(work)
    sums = [0.0, 0.0, 0.0, 0]  # IS weight, capped tokens, |logp gap|, policy tokens
    for iteration in range(g.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for k, (sample, advantage, weight) in enumerate(work):
            new = masked_token_logprobs(model, sample.prompt_ids, sample.response_ids, temperature=temperature)
            mask = torch.tensor(sample.response_mask)
            if iteration == 0:
                old = olds[k] if olds[k] is not None else new.detach()
                sampler = torch.tensor(sample.response_logprobs) if sample.response_logprobs is not None else None
                weights[k] = truncated_is_weights(old, sampler, mask, clip_max=g.vllm_importance_sampling_clip_max,
                                                  clip_min=g.vllm_importance_sampling_clip_min)
                if sampler is not None:
                    _add_is_sums(sums, old, sampler, mask, weights[k], g.vllm_importance_sampling_clip_max)
            loss, was_clipped = gspo_sequence_loss(new, olds[k], mask, advantage, epsilon=g.epsilon,
                                                   epsilon_high=g.epsilon_high, token_weights=weights[k])
            (loss * weight / episodes).backward()
            loss_sum += float(loss.detach()) * weight / episodes
            clipped, total = clipped + was_clipped, total + 1
        if work:
            torch.nn.utils.clip_grad_norm_(params, cfg.train.max_grad_norm)
            optimizer.step()
        stats.loss = loss_sum
    model.eval()
    if sums[3]:
        stats.is_weight_mean, stats.is_capped_share, stats.sampler_abs_logp_diff = (
            sums[0] / sums[3], sums[1] / sums[3], sums[2] / sums[3])
    stats.clip_fraction = clipped / total if total else 0.0
    stats.seconds = time.monotonic() - started
    return stats


def _add_is_sums(sums: list, old: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
                 cap: float | None) -> None:
    """Add one sample's policy tokens to the step's IS sums (weight, capped count, |gap|, tokens)."""
    on = mask.bool()
    gap = (old.detach() - sampler.to(old))[on]
    sums[0] += float(weights[on].sum())
    sums[1] += float((torch.exp(gap.clamp(max=80.0)) > cap).sum()) if cap is not None else 0.0
    sums[2] += float(gap.abs().sum())
    sums[3] += int(on.sum())


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


def draw_groups(env: BenchmarkEnvironment, policy, cfg: WarmupConfig, cursor: int
                ) -> tuple[list[Rollout], list[Task], list[str]]:
    """The step's rollouts, the tasks drawn (from ``cursor`` on, cycling) and the ids of the drawn groups whose
    rewards were all equal. Dynamic sampling: while fewer than ``agentic.tasks_per_step`` groups have reward
    variance, the next tasks are rolled out in place of the flat ones, for at most ``agentic.resample_rounds``
    extra rounds and never the same task twice in a step."""
    want, pool = cfg.agentic.tasks_per_step, env.train_tasks
    rollouts: list[Rollout] = []
    tasks: list[Task] = []
    flat: list[str] = []
    for round_ in range(cfg.agentic.resample_rounds + 1):
        n = min(want - (len(tasks) - len(flat)), len(pool) - len(tasks))
        if n <= 0:
            break
        batch = [pool[(cursor + len(tasks) + k) % len(pool)] for k in range(n)]
        got = env.rollouts(policy, batch, cfg.gspo.num_generations, max_in_flight=cfg.agentic.max_in_flight,
                           model_name=cfg.model.name_or_path)
        rollouts += got
        tasks += batch
        flat += [t.id for t in batch if zero_variance([r.reward for r in got if r.task.id == t.id])]
        if round_ < cfg.agentic.resample_rounds and len(tasks) - len(flat) < want and flat:
            log.info("agentic: %d of %d groups had equal rewards; drawing more tasks", len(flat), len(tasks))
    return rollouts, tasks, flat


def agentic_monitor(cfg: WarmupConfig) -> FailFastMonitor:
    """The single-turn fail-fast monitor's watches over the agentic steps (one step = one generation batch)."""
    m = cfg.monitor
    return FailFastMonitor(max_dropped_share=m.max_dropped_share, max_zero_variance_share=m.max_zero_variance_share,
                           patience=m.patience_batches)


def flat_groups_line(steps: list[dict[str, Any]]) -> str:
    """The zero-variance groups of each step so far, for the stop message."""
    parts = [f"step {s['step']}: {', '.join(s.get('zero_variance_groups') or []) or 'none'}" for s in steps]
    return "zero-variance groups (task ids) " + "; ".join(parts)


def step_line(stats: StepStats, max_steps: int) -> str:
    """The per-step line (stderr, whatever the log level)."""
    reward = "none" if stats.reward_mean is None else f"{stats.reward_mean:.3f}"
    weight = "" if stats.is_weight_mean is None else f", IS weight {stats.is_weight_mean:.4f}"
    return (f"unified.warmup: agentic step {stats.step}/{max_steps}: reward {reward} over {stats.episodes} episodes "
            f"({stats.no_reward} without), {stats.samples} samples in the loss from {stats.episodes_in_loss} episodes, "
            f"zero-variance groups {len(stats.zero_variance_groups)}/{stats.groups_drawn}, loss {stats.loss:.4g}"
            f"{weight}, clip {stats.clip_fraction:.2f}, {stats.seconds:.0f} s, peak RSS {stats.peak_rss_gib:.2f} GiB")


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
    monitor = agentic_monitor(cfg)
    stopped: dict[str, Any] | None = None
    try:
        for step in range(state.global_step + 1, cfg.train.max_steps + 1):
            loaded.model.eval()
            sampler.sync_weights(loaded.model, step)
            began = time.monotonic()
            cursor = sum(len(used) for used in state.tasks_used)  # tasks drawn so far (resampled ones included)
            rollouts, tasks, flat = draw_groups(env, sampler.policy, cfg, cursor)
            stats = train_step(loaded.model, optimizer, rollouts, cfg, step)
            stats.seconds = time.monotonic() - began  # rollouts and update
            stats.groups_drawn, stats.zero_variance_groups = len(tasks), flat
            stats.zero_variance_share = len(flat) / len(tasks) if tasks else 0.0
            stats.dropped_share = stats.no_reward / stats.episodes if stats.episodes else 0.0
            stats.peak_rss_gib = round(peak_memory_gib()["memory/peak_rss_gib"], 3)
            append_jsonl(out / "metrics.jsonl", to_dict(stats))
            print(step_line(stats, cfg.train.max_steps), file=sys.stderr, flush=True)
            state.global_step = step
            state.steps.append(to_dict(stats))
            state.tasks_used.append([t.id for t in tasks])
            monitor.observe({"rewards/dropped_share": stats.dropped_share,
                             "rewards/zero_variance_share": stats.zero_variance_share})
            if monitor.reason is None and step == cfg.train.max_steps and cfg.monitor.max_zero_variance_share is not None \
                    and not any(s["samples"] for s in state.steps):
                monitor.reason = (f"no step of {step} put a sample in the loss (every group drawn had equal rewards "
                                  "or none): the run would end having trained nothing")
            stop = preempt_requested(preempt)
            if monitor.reason or stop or step % cfg.train.save_steps == 0 or step == cfg.train.max_steps:
                saved = save_checkpoint(out, loaded, optimizer, state, keep=cfg.train.save_total_limit)
                if monitor.reason:
                    stopped = {"step": step, "reason": f"{monitor.reason}; {flat_groups_line(state.steps)}",
                               "checkpoint": str(saved)}
                    break
                if stop and step < cfg.train.max_steps:
                    raise Preempted(step, saved)
    finally:
        preempt.uninstall()
        sampler.close()
    report["steps"] = state.steps
    report["tasks_used"] = state.tasks_used
    if stopped is not None:  # the fail-fast monitor: checkpoint saved, nothing more is measured
        report["stopped"] = stopped
        write_json_atomic(out / "agentic_report.json", report)
        return report
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
