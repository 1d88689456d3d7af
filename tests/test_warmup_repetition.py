"""Issue 18's levers against repetition loops: ``generation.repetition_penalty`` (rollout sampling) and
the ``repetition`` reward entry (a training-only reward term that the held-out score leaves out)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _warmup_support import build_tiny_trainer, tiny_cli_overrides, write_fixture_awb_dir

from unified.config import ConfigError
from unified.warmup.__main__ import main
from unified.warmup.benchmark import REPORT_FILE
from unified.warmup.config import load_warmup_config
from unified.warmup.data import load_rewards
from unified.warmup.trainer import build_grpo_config

REPO = Path(__file__).resolve().parents[1]


def test_repetition_penalty_defaults_to_off_and_maps_to_grpo_config(tmp_path):
    default = load_warmup_config(None, [f"output_dir={tmp_path}"])
    assert default.generation.repetition_penalty == 1.0
    cfg = load_warmup_config(None, [f"output_dir={tmp_path}", "generation.repetition_penalty=1.15"])
    assert build_grpo_config(cfg, device=torch.device("cpu")).repetition_penalty == 1.15


def test_repetition_penalty_is_in_the_rollout_generation_config(tmp_path):
    trainer = build_tiny_trainer(tmp_path, "generation.repetition_penalty=1.3")
    assert trainer.generation_config.repetition_penalty == 1.3
    plain = build_tiny_trainer(tmp_path / "plain")
    assert plain.generation_config.repetition_penalty == 1.0


@pytest.mark.parametrize("override", ["generation.repetition_penalty=0", "rewards.repetition.weight=-1",
                                      "rewards.repetition.ngram=0"])
def test_repetition_settings_are_bounded(tmp_path, override):
    with pytest.raises((ConfigError, ValueError), match=override.split("=")[0].split(".")[-1]):
        load_warmup_config(None, [f"output_dir={tmp_path}", override])


def test_shaping_adds_a_training_only_repetition_term(tmp_path):
    recipe = REPO / "recipes/warmup/embedded_cpu.yaml"
    off = load_warmup_config(recipe, [f"output_dir={tmp_path}", "rewards.repetition.weight=0"])
    assert load_rewards(off)[1] == load_rewards(off, training=False)[1] == [1.0]  # the similarity reward alone
    cfg = load_warmup_config(recipe, [f"output_dir={tmp_path}", "rewards.repetition.weight=5",
                                      "rewards.repetition.ngram=2"])
    score_funcs, score_weights = load_rewards(cfg, training=False)
    funcs, weights = load_rewards(cfg)
    assert len(funcs) == len(score_funcs) + 1 and weights == [*score_weights, 5.0]
    term = funcs[-1]
    # 2-grams: [1,2,3,4] has none repeated; [7,8,7,8,7,8] has 2 distinct of 5 -> 1 - 2/5 = 0.6 of the penalty
    assert term(completion_ids=[[1, 2, 3, 4], [7, 8, 7, 8, 7, 8]]) == pytest.approx([0.0, -0.6])


@pytest.mark.slow
def test_before_after_scores_without_the_shaping_term(tmp_path, tiny_checkpoint, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = write_fixture_awb_dir(tmp_path / "data")
    out = tmp_path / "run"
    args = ["--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"), "--eval-before-after",
            "--heldout-temperature", "0",
            *tiny_cli_overrides(tiny_checkpoint, data, out, "train.max_steps=1", "train.save_steps=1",
                                "data.heldout_size=4", "rewards.repetition.weight=5")]
    assert main(args) == 0
    report = json.loads((out / REPORT_FILE).read_text())
    assert report["settings"]["rewards"] == ["similarity"] and report["settings"]["weights"] == [1.0]
    assert set(report["after"]["per_function"]) == {"similarity"}
    trained = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("rewards/repetition_penalty_reward/mean" in record for record in trained)
