"""``--eval-before-after``: held-out reward before/after, the paired statistics, and resuming the benchmark."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

from unified.warmup.__main__ import main
from unified.warmup.benchmark import REPORT_FILE, paired_difference

REPO = Path(__file__).resolve().parents[1]


def test_paired_difference_hand_computed():
    stats = paired_difference([0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 4.0, 3.0])  # d = 1, 0, 2, 0
    assert stats["mean_diff"] == pytest.approx(0.75)
    sd = math.sqrt(((0.25) ** 2 + 0.75 ** 2 + 1.25 ** 2 + 0.75 ** 2) / 3)
    assert stats["sd_diff"] == pytest.approx(sd) and stats["se_diff"] == pytest.approx(sd / 2)
    assert (stats["up"], stats["down"], stats["same"], stats["prompts"]) == (2, 0, 2, 4)
    with pytest.raises(ValueError, match="3 before vs 2 after"):
        paired_difference([1, 2, 3], [1, 2])


@pytest.mark.slow
def test_before_after_reports_paired_scores_and_resumes(tmp_path, tiny_checkpoint, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = write_fixture_awb_dir(tmp_path / "data")
    out = tmp_path / "run"

    def run(max_steps: int) -> dict:
        args = ["--recipe", str(REPO / "recipes/warmup/embedded_cpu.yaml"), "--eval-before-after",
                "--heldout-temperature", "0",
                *tiny_cli_overrides(tiny_checkpoint, data, out, f"train.max_steps={max_steps}", "train.save_steps=1",
                                    "data.heldout_size=4", "train.learning_rate=1e-3", "data.validation_size=2",
                                    "monitor.probe_size=2", "monitor.keep_best=true")]
        capsys.readouterr()
        assert main(args) == 0
        return json.loads((out / REPORT_FILE).read_text())

    first = run(1)
    printed = capsys.readouterr().out
    assert "repetition loops in the held-out completions:" in printed and "of 4 before" in printed
    assert set(first["loops"]) == {"before", "after"} and all(0 <= v <= 4 for v in first["loops"].values())
    assert first["status"] == "done" and first["steps"] == 1 and first["heldout_size"] == 4
    assert first["validation_size"] == 2 and first["collapse"]["best_step"] in (0, 1)  # the recipe's keep_best
    assert first["settings"]["temperature"] == 0 and first["settings"]["samples_per_prompt"] == 1
    assert first["settings"]["rewards"] == ["similarity"]  # the CPU recipe's graded reward
    before, after = first["before"], first["after"]
    assert len(before["per_prompt"]) == len(after["per_prompt"]) == 4
    assert before["sample_ids"] == after["sample_ids"] == first["settings"]["heldout"]
    assert all(0.0 <= v <= 25.0 for v in before["per_prompt"] + after["per_prompt"])
    # one greedy completion per prompt: the mean paired difference is the difference of the means
    assert first["paired"]["mean_diff"] == pytest.approx(after["mean_reward"] - before["mean_reward"])
    assert len(first["step_times"]) == 1 and first["peak_memory"]["memory/peak_rss_gib"] > 0

    # a record written before `enable_thinking` was renamed `thinking` is still reused
    stored = json.loads((out / REPORT_FILE).read_text())
    stored["settings"]["enable_thinking"] = stored["settings"].pop("thinking")
    (out / REPORT_FILE).write_text(json.dumps(stored))
    second = run(2)  # more steps: the "before" scores are reused, training resumes at step 1
    printed = capsys.readouterr().out
    assert "before (from" in printed and "enable_thinking read as thinking" in printed
    assert second["before"] == before and second["steps"] == 2 and len(second["step_times"]) == 2
    assert json.loads((out / "run.json").read_text())["resumed_from"].endswith("checkpoint-1")
