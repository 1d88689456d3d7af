"""The library's rewards inside TRL: named functions, mixed by GRPOConfig.reward_weights (one GSPO step).

TRL logs ``rewards/<__name__>/mean`` per function and ``reward``, the mean of
``sum_k w_k r_k``; so the logged ``reward`` must equal ``sum_k w_k * rewards/<k>/mean``.
"""

from __future__ import annotations

import hashlib

import pytest

from _warmup_support import fixture_rl_dataset, tiny_overrides, tiny_policy
from unified.inference.judge import Judge
from unified.rewards import CRITERIA, build_rewards
from unified.warmup.callbacks import METRICS_FILE, read_metrics
from unified.warmup.config import load_warmup_config
from unified.warmup.trainer import build_trainer


class ContentJudge(Judge):
    """A judge with no model whose 1-5 scores depend on the request text, so completions get different rewards."""

    def __init__(self) -> None:
        super().__init__(model=None, name="content-judge")

    def answer(self, requests):
        answers = []
        for request in requests:
            digest = hashlib.sha256(request[-1]["content"].encode()).digest()
            answers.append("<scores>\n" + "\n".join(f"{c}: {1 + digest[i] % 5}" for i, c in enumerate(CRITERIA))
                           + "\n</scores>")
        return answers


def test_trl_mixes_the_named_library_rewards_by_their_weights(tmp_path):
    cfg = load_warmup_config(None, tiny_overrides(tmp_path, "train.max_steps=1", "rewards.rubric.judge_model=embedded",
                                                  "rewards.rubric.cache_dir=", "rewards.similarity.weight=0.5"))
    funcs, weights = build_rewards(cfg.rewards, judge=ContentJudge())
    assert [f.__name__ for f in funcs] == ["rubric", "rule", "similarity"] and weights == [0.9, 0.1, 0.5]
    model, tokenizer = tiny_policy(0, "qwen3_moe")
    trainer = build_trainer(cfg, train_dataset=fixture_rl_dataset(), reward_funcs=funcs, reward_weights=weights,
                            model=model, tokenizer=tokenizer)
    trainer.train()
    (record,) = [r for r in read_metrics(tmp_path / METRICS_FILE) if "loss" in r]
    means = {f.__name__: record[f"rewards/{f.__name__}/mean"] for f in funcs}
    assert 5.0 <= means["rubric"] <= 25.0 and 0.0 <= means["similarity"] <= 25.0
    assert record["reward"] == pytest.approx(sum(w * means[name] for name, w in zip(means, weights)), rel=1e-5)
