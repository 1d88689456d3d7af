"""One scorer for eval and RL (EpisodeResult.reward, the ``benchmark`` reward entry) and agentic GSPO on an
adapter's environment (unified.rewards.environment, unified.warmup.agentic), with fixture adapters written
for these tests in the adapter format (tests/fixture_eval_bench.py) and a tiny random MoE."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fixture_eval_bench import FixtureAdapter
from unified.agent.replay import GoldReplayer
from unified.benchmarks import reward_of
from unified.benchmarks.contract import SCORING_FAILED_AFTER_AGENT
from unified.eval.config import EvalConfig
from unified.eval.reader import read_run
from unified.models.tiny import tiny_moe_model
from unified.eval.runner import run_eval
from unified.rewards.entries import applied_entries, benchmark_entries, entries_not_applied
from unified.rewards.environment import BenchmarkEnvironment, EpisodeReward
from unified.types import EpisodeResult
from unified.warmup.__main__ import main as warmup_main
from unified.warmup.agentic import load_trainable, run_agentic
from unified.warmup.agentic_checks import ignored_settings, unapplied_settings
from unified.warmup.agentic_loss import group_advantages, gspo_sequence_loss, masked_token_logprobs
from unified.warmup.config import describe, is_agentic, load_warmup_config

RECIPE = "recipes/warmup/embedded_cpu.yaml"
ROOT = Path(__file__).resolve().parents[1]


class GradedFixture(FixtureAdapter):
    """echo_N scores (N + 1) / 10 when the agent echoed N (graded, so equal rewards cannot hide a mix-up);
    crash_N's environment raises on opening; task ``echo_2``'s scorer raises."""

    name = "fixture_graded"

    def __init__(self, **config) -> None:
        super().__init__(n=5, crash=1, **config)

    def tasks(self, split=None, limit=None):
        tasks = super().tasks(split, limit)
        return tasks[-1:] + tasks[:-1]  # crash_0 first: a training task

    def open(self, task, *, run=None):
        if task.id.startswith("crash"):  # whatever the policy does: the environment cannot start
            raise RuntimeError("the fixture environment failed to start")
        return super().open(task, run=run)

    def score(self, task, episode, env):
        if task.id == "echo_2":
            raise RuntimeError("the fixture scorer failed")
        result = super().score(task, episode, env)
        result.score *= (task.payload["n"] + 1) / 10
        return result


class TokenScoredFixture(FixtureAdapter):
    """Scores the share of even token ids in the policy's first turn (a random tiny model gets varied rewards)."""

    name = "fixture_token_scored"

    def score(self, task, episode, env):
        ids = episode.steps[0].completion_token_ids if episode.steps else []
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial,
                             score=sum(1 for i in ids if i % 2 == 0) / max(1, len(ids)))


def test_reward_of_a_result():
    ok = EpisodeResult(benchmark="b", task_id="t", trial=0, score=0.75, details={"sub": 0.5, "note": "x", "flag": True})
    assert reward_of(ok) == ok.reward == 0.75 and ok.reward_breakdown == {"score": 0.75, "sub": 0.5}
    assert EpisodeResult(benchmark="b", task_id="t", trial=0, score=0.0, skipped="no key").reward is None
    assert EpisodeResult(benchmark="b", task_id="t", trial=0, score=0.0, error="Traceback: env died").reward is None
    failed = EpisodeResult(benchmark="b", task_id="t", trial=0, score=0.0,
                           details={"status": SCORING_FAILED_AFTER_AGENT, "grader_error": "boom"})
    assert failed.reward == 0.0 and failed.reward_breakdown == {"score": 0.0}
    assert EpisodeReward()([1, 2], ["a", "b"], episode_reward=[1.0, None]) == [1.0, None]
    with pytest.raises(ValueError, match="agentic rollout"):
        EpisodeReward()([1], ["a"])


def test_benchmark_entry_names_the_adapter_and_checks_its_settings(capsys):
    sets = ["rewards.benchmark.weight=1", "rewards.benchmark.adapter=bfcl_v4"]
    cfg = load_warmup_config(ROOT / RECIPE, sets)
    assert is_agentic(cfg) and "bfcl_v4" in describe(cfg)["rollouts"]
    argv = ["--recipe", str(ROOT / RECIPE), *[a for s in sets for a in ("--set", s)], "--dry-run"]
    assert warmup_main(argv) == 0
    assert "agent episodes (unified.warmup.agentic) of benchmark bfcl_v4" in capsys.readouterr().out
    assert warmup_main([*argv[:-1], "--set", "rewards.benchmark.settings.categoriez=simple", "--dry-run"]) == 2
    assert "unknown key 'categoriez'" in capsys.readouterr().err
    assert warmup_main([*argv[:-1], "--set", "rewards.benchmark.adapter=bfcl_v5", "--dry-run"]) == 2
    assert "unknown benchmark 'bfcl_v5'" in capsys.readouterr().err
    assert not is_agentic(load_warmup_config(ROOT / RECIPE, []))
    # the default recipe's judge-scored rewards do not apply to episodes: their missing judge is not asked for
    assert warmup_main([a for s in sets for a in ("--set", s)] + ["--dry-run"]) == 0
    out = capsys.readouterr()
    assert '"rewards_not_applied_to_episodes": ["rubric", "rule"]' in out.out and "judge" not in out.err


def test_one_rule_decides_which_entries_a_run_scores_with():
    """applied_entries is what the preflight asks judges for and what describe() names as not applied."""
    single = load_warmup_config(ROOT / RECIPE, ["rewards.benchmark.weight=0", "rewards.benchmark.adapter=bfcl_v4"])
    names = [e.name for e in applied_entries(single.rewards)]
    assert names == [e.name for e in single.rewards if e.weight > 0] and "benchmark" not in names  # weight 0: off
    assert entries_not_applied(single.rewards) == []
    agentic = load_warmup_config(ROOT / RECIPE, ["rewards.benchmark.weight=1", "rewards.benchmark.adapter=bfcl_v4"])
    assert [e.name for e in applied_entries(agentic.rewards)] == ["benchmark"]
    not_applied = entries_not_applied(agentic.rewards)
    assert not_applied == describe(agentic)["rewards_not_applied_to_episodes"] == names  # every other entry named


def test_settings_the_agentic_trainer_would_not_apply_are_refused_or_named(capsys):
    """A KL beta, bf16, routing replay or a multi-node launch on an agentic recipe would look used and not be:
    refused with the key; the single-turn recipe's data/batching/monitor settings are named, not refused."""
    sets = ["rewards.benchmark.weight=1", "rewards.benchmark.adapter=bfcl_v4"]
    moe = load_warmup_config(ROOT / "recipes/warmup/qwen35_35b_a3b.yaml", sets)
    refused = [line.split("=")[0] for line in unapplied_settings(moe)]
    assert refused == ["launch.nodes", "launch.gpus_per_node", "launch.distributed", "moe.routing_replay",
                       "moe.require_rollout_routes", "parity_probe.sequences", "parity_probe.max_mean_abs_logp_diff"]
    for extra, key in (("gspo.beta=0.04", "gspo.beta"), ("model.precision=bf16", "model.precision"),
                       ("generation.top_k=20", "generation.top_k"), ("train.lr_scheduler_type=cosine",
                                                                   "train.lr_scheduler_type")):
        lines = unapplied_settings(load_warmup_config(ROOT / "recipes/warmup/agentic_cpu.yaml", [extra]))
        assert [line.split("=")[0] for line in lines] == [key] and "leave it at its default" in lines[0]
        argv = ["--recipe", str(ROOT / "recipes/warmup/agentic_cpu.yaml"), "--set", extra, "--dry-run"]
        assert warmup_main(argv) == 2 and f"unified.warmup: {key}=" in capsys.readouterr().err
    single_turn = load_warmup_config(ROOT / RECIPE, sets)
    assert unapplied_settings(single_turn) == [] and "gspo.steps_per_generation=32" in ignored_settings(single_turn)
    assert unapplied_settings(load_warmup_config(ROOT / RECIPE, ["gspo.beta=0.04"])) == []  # not agentic: all apply
    argv = ["--recipe", str(ROOT / RECIPE), *[a for s in sets for a in ("--set", s)], "--dry-run"]
    assert warmup_main(argv) == 0
    assert "# not applied by the agentic trainer (single-turn data, batching or monitors): data.heldout_size=24" in (
        capsys.readouterr().out)


def test_gold_policy_reward_equals_its_eval_score(tmp_path):
    """The reward of a rollout is the number the eval records for the same task, errors included."""
    env = BenchmarkEnvironment(GradedFixture())
    rollouts = env.rollouts(GoldReplayer(), env.train_tasks)
    run_eval(EvalConfig(benchmarks=["test_agentic:GradedFixture"], model="gold", out=str(tmp_path / "eval")))
    rows = {r.task_id: r for bench in read_run(tmp_path / "eval").benchmarks.values() for r in bench.results}
    assert set(rows) == {t.id for t in env.train_tasks}
    rewards = {r.task.id: r.reward for r in rollouts}
    for task_id, row in rows.items():
        assert rewards[task_id] == row.reward, task_id
    assert rewards["echo_4"] == pytest.approx(0.5) and rewards["echo_0"] == pytest.approx(0.1)
    assert rewards["echo_2"] == 0.0 and rows["echo_2"].details["status"] == SCORING_FAILED_AFTER_AGENT  # acted
    assert rewards["crash_0"] is None and rows["crash_0"].error  # the environment crashed: no reward


def test_masked_tokens_get_no_gradient():
    model = tiny_moe_model("qwen3_moe", seed=0, vocab_size=64)
    prompt, response = [5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15]
    mask = torch.tensor([1, 1, 0, 0, 0, 1, 1])  # three tokens of a tool observation in the middle
    new = masked_token_logprobs(model, prompt, response)
    new.retain_grad()
    old = new.detach() + torch.linspace(-0.2, 0.2, len(response))
    loss, _ = gspo_sequence_loss(new, old, mask, 1.5, epsilon=10.0, epsilon_high=10.0)
    loss.backward()
    assert torch.all(new.grad[mask == 0] == 0) and torch.all(new.grad[mask == 1] != 0)
    changed_old = old.clone()
    changed_old[mask == 0] += 5.0  # the sampler's numbers at masked positions do not enter the loss either
    again, _ = gspo_sequence_loss(new.detach(), changed_old, mask, 1.5, epsilon=10.0, epsilon_high=10.0)
    assert float(again) == pytest.approx(float(loss.detach()))
    assert group_advantages([1.0, 0.0, None, 0.5, 0.5], ["a", "a", "a", "b", "b"])[2] is None


def test_agentic_run_trains_and_contains_a_raising_scorer(tmp_path, tiny_checkpoint):
    """A step over a raising scorer and a crashing environment goes on; the eval runs before and after."""
    sets = [f"output_dir={tmp_path / 'run'}", f"model.name_or_path={tiny_checkpoint}", "logging.wandb=false",
            "rewards=[]", "rewards.benchmark.weight=1", "rewards.benchmark.adapter=test_agentic:GradedFixture",
            "rewards.benchmark.heldout_size=2", "train.max_steps=1", "gspo.num_generations=2",
            "generation.max_completion_length=6", "agentic.tasks_per_step=4", "agentic.save_final=false",
            "monitor.max_zero_variance_share=null"]  # its groups are flat (a random policy echoes nothing): not stopped
    report = run_agentic(load_warmup_config(None, sets))
    assert report["heldout_tasks"] == ["echo_3", "echo_4"]  # the last two, never trained on
    assert report["train_tasks"] == ["crash_0", "echo_0", "echo_1", "echo_2"]
    step = report["steps"][0]
    assert step["episodes"] == 8 and step["scoring_failed"] == 2 and step["no_reward"] == 2  # echo_2, crash_0 x 2
    assert len(step["errors"]) == 2 and all(e.startswith("crash_0/") for e in step["errors"])
    assert report["before"]["n"] == report["after"]["n"] == 2 and report["difference"]["n"] == 2
    assert (tmp_path / "run" / "eval_before" / "run.json").exists() and (tmp_path / "run" / "metrics.jsonl").exists()

    sets[5] = "rewards.benchmark.adapter=test_agentic:TokenScoredFixture"
    sets += [f"output_dir={tmp_path / 'len'}", "agentic.eval_before_after=false", "train.learning_rate=1e-2"]
    cfg = load_warmup_config(None, sets)
    loaded = load_trainable(cfg)
    start = [p.detach().clone() for p in loaded.model.parameters()]
    report = run_agentic(cfg, loaded=loaded)
    assert report["steps"][0]["samples"] > 0  # varied rewards: nonzero advantages, trajectories in the loss
    assert any(not torch.equal(a, p) for a, p in zip(start, loaded.model.parameters()))  # and an update


def test_one_step_moves_probability_towards_the_better_episodes(tmp_path, tiny_checkpoint):
    """The update's direction, not just that one happened: over the step's own episodes,
    sum_i A_i (log pi_after(y_i) - log pi_before(y_i)) > 0, the policy-improvement sign a flipped loss or
    advantage would turn negative (first order at a small learning rate; policy tokens only)."""
    from unified.warmup.agentic import make_sampler, train_step

    sets = [f"output_dir={tmp_path}", f"model.name_or_path={tiny_checkpoint}", "logging.wandb=false", "rewards=[]",
            "rewards.benchmark.weight=1", "rewards.benchmark.adapter=test_agentic:TokenScoredFixture",
            "rewards.benchmark.heldout_size=1", "gspo.num_generations=4", "generation.max_completion_length=8",
            "train.learning_rate=1e-3", "train.max_grad_norm=1e6"]
    cfg = load_warmup_config(None, sets)
    loaded = load_trainable(cfg)
    env = BenchmarkEnvironment.from_entry(benchmark_entries(cfg.rewards)[0])
    torch.manual_seed(0)
    sampler = make_sampler(cfg, loaded)
    try:
        rollouts = env.rollouts(sampler.policy, env.train_tasks[:2], 4, max_in_flight=4)
    finally:
        sampler.close()
    advantages = group_advantages([r.reward for r in rollouts], [r.task.id for r in rollouts])

    def sequence_logps() -> list[float]:
        out = []
        with torch.no_grad():
            for rollout in rollouts:
                (sample,) = rollout.samples()
                logps = masked_token_logprobs(loaded.model, sample.prompt_ids, sample.response_ids)
                out.append(float((logps * torch.tensor(sample.response_mask, dtype=logps.dtype)).sum()))
        return out

    before = sequence_logps()
    optimizer = torch.optim.SGD([p for p in loaded.model.parameters() if p.requires_grad], lr=1e-3)
    stats = train_step(loaded.model, optimizer, rollouts, cfg, step=1)
    after = sequence_logps()
    assert stats.samples == len(rollouts) and any(a for a in advantages)
    improvement = sum(a * (y - x) for a, x, y in zip(advantages, before, after))
    assert improvement > 0, (advantages, before, after)
