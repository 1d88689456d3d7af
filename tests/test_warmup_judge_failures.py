"""A failed or unparseable judge call gives its sample no gradient, and a hanging judge cannot outlast
the collective timeout.

The judge is a fixture judge (``FixtureJudge``-style, no model behind it) that answers chosen requests
with an exception (a timeout) or with text that is not a score block; the rest get a score that
depends on the prediction, so that a group's valid samples differ. The trainer is the real one on a
tiny random MoE; its generation batch goes through TRL's reward and advantage code.
"""

from __future__ import annotations

import pytest
import torch
from _warmup_support import build_tiny_trainer, completion_length_reward

from unified.config import ConfigError
from unified.inference.judge import Judge
from unified.rewards import CRITERIA, RubricReward
from unified.rewards.functions import JudgeSettings, judge_worst_case_s
from unified.warmup.config import load_warmup_config


class ScriptedJudge(Judge):
    """Answers request i with a timeout (i in ``fail``), junk (i in ``junk``) or a score from the length
    of the prediction (1-5, the same for every criterion)."""

    def __init__(self, fail=(), junk=()):
        super().__init__(model=None, name="scripted-judge", cache=None)
        self.fail, self.junk = set(fail), set(junk)

    def answer(self, requests):
        out = []
        for i, messages in enumerate(requests):
            if i in self.fail:
                out.append(TimeoutError("judge timed out after 120 s"))
            elif i in self.junk:
                out.append("The prediction looks fine to me.")
            else:
                score = 1 + len(messages[-1]["content"]) % 5
                out.append("<scores>\n" + "\n".join(f"{c}: {score}" for c in CRITERIA) + "\n</scores>")
        return out


def test_rubric_returns_none_for_failed_and_unparseable_calls():
    reward = RubricReward(ScriptedJudge(fail=[0], junk=[2]))
    metrics = {}
    values = reward(["p"] * 3, ["a", "bb", "ccc"], reference=["x"] * 3, domain="terminal",
                    log_metric=metrics.__setitem__)
    assert values[0] is None and values[2] is None and isinstance(values[1], float) and 5 <= values[1] <= 25
    assert metrics["rubric/parsed"] == pytest.approx(1 / 3)
    breakdowns = reward.breakdowns(["p"] * 3, ["a", "bb", "ccc"], reference=["x"] * 3, domain="terminal")
    assert "judge failed: TimeoutError" in breakdowns[0].detail and "unparseable" in breakdowns[2].detail
    assert breakdowns[0].total == 0.0 and not breakdowns[0].parsed  # what evaluation code reads is unchanged


def test_failed_judge_samples_get_no_advantage_and_do_not_move_the_baseline(tmp_path):
    """Two groups of 4: sample 0 of group 0 times out, sample 2 is unparseable, every sample of group 1
    fails. Their advantages are exactly 0, group 0's two valid samples are normalised between themselves
    (advantages +-1/(1 + 1e-4 / std)), and rewards/dropped_share counts 6 of 8."""
    judge = ScriptedJudge(fail=[0, 4, 5, 6], junk=[2, 7])
    trainer = build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0", "gspo.num_generations=4",
                                 "train.per_device_train_batch_size=8", "generation.max_completion_length=6",
                                 reward_funcs=[RubricReward(judge), completion_length_reward])
    rows = [trainer.train_dataset[i // 4] for i in range(8)]
    batch = trainer._generate_and_score_completions(rows)
    adv = batch["advantages"]
    assert adv[[0, 2, 4, 5, 6, 7]].tolist() == [0.0] * 6
    valid = adv[[1, 3]]
    assert float(valid.sum()) == pytest.approx(0.0, abs=1e-5)  # the baseline is the mean of the valid two
    texts = [trainer.processing_class.decode(ids[m.bool()], skip_special_tokens=True)
             for ids, m in zip(batch["completion_ids"], batch["completion_mask"])]
    if texts[1] != texts[3]:
        assert float(valid.abs().min()) > 0.5  # two values normalised by their own std: +-0.707 (nanstd, n-1)
    assert trainer._metrics["train"]["rewards/dropped_share"][-1] == pytest.approx(6 / 8)


def test_without_failures_nothing_is_dropped(tmp_path):
    trainer = build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0", "generation.max_completion_length=6",
                                 reward_funcs=[RubricReward(ScriptedJudge()), completion_length_reward])
    trainer._generate_and_score_completions([trainer.train_dataset[i // 2] for i in range(4)])
    assert trainer._metrics["train"]["rewards/dropped_share"][-1] == 0.0


def test_judge_worst_case_formula():
    settings = JudgeSettings(judge_timeout_s=120.0, judge_max_retries=2, judge_max_concurrency=64)
    assert judge_worst_case_s(settings, 32) == pytest.approx(3 * 120 + 1.25 * (1 + 2))
    assert judge_worst_case_s(settings, 65) == pytest.approx(2 * (3 * 120 + 1.25 * 3))  # two waves
    old = JudgeSettings(judge_timeout_s=300.0, judge_max_retries=4, judge_max_concurrency=64)
    assert judge_worst_case_s(old, 32) == pytest.approx(5 * 300 + 1.25 * (1 + 2 + 4 + 8))  # ~25 min


def test_recipe_judge_fits_the_collective_timeout_and_a_slow_one_is_refused():
    from pathlib import Path

    recipe = Path(__file__).resolve().parents[1] / "recipes" / "warmup" / "qwen35_35b_a3b.yaml"
    cfg = load_warmup_config(recipe)
    (rubric,) = [e for e in cfg.rewards if e.name == "rubric"]
    assert judge_worst_case_s(rubric, cfg.judge_calls_per_generation()) <= 0.5 * cfg.train.collective_timeout_s
    with pytest.raises(ConfigError, match=r"rewards.rubric: a hanging judge can hold a rank 1519 s .*"
                                          r"train.collective_timeout_s=2400"):
        load_warmup_config(recipe, ["rewards.rubric.judge_timeout_s=300", "rewards.rubric.judge_max_retries=4"])
    from unified.warmup.trainer import build_grpo_config

    assert build_grpo_config(cfg, device=torch.device("cpu")).ddp_timeout == 2400
