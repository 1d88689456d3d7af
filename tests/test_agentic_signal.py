"""Agentic GSPO takes updates or says why not (issue 50, item 2): the fail-fast monitor stops a run whose groups
have no reward variance (checkpoint, exit 3, the groups named); pi_old is the trainer's own log-probs with the
sampler's gap corrected by token-level truncated IS; each episode weighs once in the loss, however many samples a
rewriting chat template splits it into. A tiny random MoE and fixture adapters in the adapter format."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch

from fixture_eval_bench import FixtureAdapter
from unified.rewards.entries import benchmark_entries
from unified.rewards.environment import BenchmarkEnvironment
from unified.types import EpisodeResult
from unified.warmup.__main__ import main as warmup_main
from unified.warmup.agentic import load_trainable, make_sampler, train_step
from unified.warmup.agentic_loss import group_advantages, masked_token_logprobs
from unified.warmup.config import load_warmup_config
from unified.warmup.failfast import STOP_EXIT_STATUS


class FlatFixture(FixtureAdapter):
    """Every episode scores 0.25, whatever the policy did: every group has zero reward variance."""

    name = "fixture_flat"

    def score(self, task, episode, env):
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=0.25)


class EvenShareFixture(FixtureAdapter):
    """Scores the share of even token ids of the first policy call (varied rewards from a random model); the
    environment asks trial t for t further user turns, so trial t's episode makes t + 1 policy calls."""

    name = "fixture_even_share"

    def open(self, task, *, run=None):
        env = super().open(task, run=run)

        def next_user_turn(episode):
            asked = sum(1 for m in episode.messages if m.role == "user") - 1
            return "Say it again." if asked < episode.trial else None

        env.next_user_turn = next_user_turn
        return env

    def score(self, task, episode, env):
        ids = episode.steps[0].completion_token_ids if episode.steps else []
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial,
                             score=sum(1 for i in ids if i % 2 == 0) / max(1, len(ids)))


def base_settings(out: Path, checkpoint: Path, adapter: str) -> list[str]:
    return [f"output_dir={out}", f"model.name_or_path={checkpoint}", "logging.wandb=false", "rewards=[]",
            "rewards.benchmark.weight=1", f"rewards.benchmark.adapter=test_agentic_signal:{adapter}",
            "rewards.benchmark.heldout_size=1", "rewards.benchmark.limits.max_turns=1", "gspo.num_generations=2",
            "generation.max_completion_length=6", "agentic.tasks_per_step=1", "agentic.max_in_flight=2",
            "agentic.save_final=false", "agentic.eval_before_after=false", "resume=never"]


@pytest.mark.parametrize("steps", [1, 3])
def test_a_zero_variance_agentic_run_stops_with_a_checkpoint_and_names_the_groups(tmp_path, tiny_checkpoint, capsys,
                                                                                 steps):
    """Every group flat (dynamic sampling finds no other): the monitor stops at step 2 (patience 2), or a 1-step
    run that trained nothing ends the same way; never exit 0."""
    out = tmp_path / "run"
    sets = base_settings(out, tiny_checkpoint, "FlatFixture") + [f"train.max_steps={steps}",
                                                                 "agentic.resample_rounds=1"]
    status = warmup_main([a for s in sets for a in ("--set", s)])
    err = capsys.readouterr().err
    assert status == STOP_EXIT_STATUS, err
    stop_at = min(steps, 2)
    assert (out / f"checkpoint-{stop_at}" / "trainer_state.json").is_file()
    assert "zero-variance groups (task ids) step 1: echo_0, echo_1" in err  # the first task and the resampled one
    assert "agentic step 1/" in err and "0 samples in the loss" in err  # the per-step line at the default level
    report = json.loads((out / "agentic_report.json").read_text())
    assert report["stopped"]["step"] == stop_at and len(report["steps"]) == stop_at
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["zero_variance_share"] for r in rows] == [1.0] * stop_at and all(r["samples"] == 0 for r in rows)
    assert rows[0]["groups_drawn"] == 2


def rollouts_of(cfg, loaded, tasks: int):
    env = BenchmarkEnvironment.from_entry(benchmark_entries(cfg.rewards)[0])
    torch.manual_seed(0)
    sampler = make_sampler(cfg, loaded)
    try:
        return env.rollouts(sampler.policy, env.train_tasks[:tasks], cfg.gspo.num_generations, max_in_flight=4)
    finally:
        sampler.close()


def shifted(rollouts, by: float):
    out = copy.deepcopy(rollouts)
    for rollout in out:
        for step in rollout.episode.steps:
            step.completion_logprobs = [lp + by for lp in step.completion_logprobs]
    return out


@pytest.mark.parametrize("iterations", [1, 2])
def test_pi_old_is_the_trainers_and_the_sampler_gap_only_moves_the_capped_is_weight(tmp_path, tiny_checkpoint,
                                                                                    iterations):
    """The sampler's log-probs lowered by 2 or by 4 nats a token: with pi_old the sampler's, the ratio would be
    e^2 or e^4 (clipped, losses apart); with pi_old the trainer's, s = 1 and both gaps give the same capped IS
    weight (2), so the same loss, no clipping on the first update."""
    sets = base_settings(tmp_path, tiny_checkpoint, "EvenShareFixture") + [
        "gspo.num_generations=4", f"gspo.num_iterations={iterations}", "train.learning_rate=1e-3"]
    cfg = load_warmup_config(None, sets)
    loaded = load_trainable(cfg)
    rollouts = rollouts_of(cfg, loaded, 2)
    start = copy.deepcopy(loaded.model.state_dict())
    results = []
    for by in (-2.0, -4.0):
        loaded.model.load_state_dict(start)
        optimizer = torch.optim.SGD([p for p in loaded.model.parameters() if p.requires_grad], lr=1e-3)
        results.append(train_step(loaded.model, optimizer, shifted(rollouts, by), cfg, step=1))
    a, b = results
    assert a.samples > 0 and a.samples == b.samples
    assert a.loss == pytest.approx(b.loss, rel=1e-5, abs=1e-7) and a.loss != 0.0
    assert a.is_weight_mean == pytest.approx(2.0) and b.is_weight_mean == pytest.approx(2.0)
    assert a.is_capped_share == 1.0 and a.sampler_abs_logp_diff == pytest.approx(2.0, abs=1e-3)
    if iterations == 1:
        assert a.clip_fraction == 0.0 and b.clip_fraction == 0.0


def test_each_episode_weighs_once_when_a_rewriting_template_splits_it(tmp_path, tiny_checkpoint):
    """A chat template that rewrites the start of every prompt (a message count): an episode of k policy calls is
    k samples; the loss is -(1/N) sum over episodes of A_i x (their samples' mean IS weight), not a mean over
    samples (which would weigh trial t's episode t + 1 times)."""
    checkpoint = tmp_path / "rewriting"
    shutil.copytree(tiny_checkpoint, checkpoint)
    template = checkpoint / "chat_template.jinja"
    template.write_text("{{- '[' ~ (messages | length) ~ ' messages]\\n' -}}" + template.read_text())
    sets = base_settings(tmp_path / "run", checkpoint, "EvenShareFixture") + [
        "gspo.num_generations=4", "rewards.benchmark.limits.max_turns=5", "train.learning_rate=1e-3"]
    cfg = load_warmup_config(None, sets)
    loaded = load_trainable(cfg)
    rollouts = rollouts_of(cfg, loaded, 2)
    counts = [len(r.samples()) for r in rollouts]
    assert counts == [r.trial + 1 for r in rollouts], counts  # the template split each call into its own sample
    with pytest.raises(ValueError, match="rewrote"):
        rollouts[-1].episode.token_trajectory()
    advantages = group_advantages([r.reward for r in rollouts], [r.task.id for r in rollouts])
    in_loss = [(r, a) for r, a in zip(rollouts, advantages) if a]
    expected = 0.0
    with torch.no_grad():
        for rollout, advantage in in_loss:
            weights = []
            for sample in rollout.samples():
                trainer = masked_token_logprobs(loaded.model, sample.prompt_ids, sample.response_ids)
                gap = trainer - torch.tensor(sample.response_logprobs, dtype=trainer.dtype)
                weights.append(float(torch.exp(gap).clamp(max=2.0).mean()))
            expected -= advantage * sum(weights) / len(weights) / len(in_loss)
    per_sample = -sum(a * len(r.samples()) for r, a in in_loss) / sum(len(r.samples()) for r, _ in in_loss)
    assert abs(per_sample - expected) > 0.05  # the two weightings differ on these episodes
    optimizer = torch.optim.SGD([p for p in loaded.model.parameters() if p.requires_grad], lr=1e-3)
    stats = train_step(loaded.model, optimizer, rollouts, cfg, step=1)
    assert stats.loss == pytest.approx(expected, abs=1e-5)
    assert stats.episodes_in_loss == len(in_loss) and stats.samples == sum(len(r.samples()) for r, _ in in_loss)
