"""A warmup whose judge is dead, dies, or whose rewards carry no signal stops instead of training on nothing.

The judge is a real OpenAI-compatible HTTP server on 127.0.0.1 (``_fake_chat.FakeChat``) answering in the
rubric's score-block format with a score made from the request's text (so completions that differ get
different rewards), or a port where nothing listens. The policy is the tiny random MoE checkpoint and the
data a fixture in AgentWorldBench format (``write_fixture_awb_dir``).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
from _fake_chat import FakeChat
from _warmup_support import build_tiny_trainer, tiny_cli_overrides, write_fixture_awb_dir
from transformers import TrainerCallback

from unified.rewards import CRITERIA
from unified.warmup.__main__ import main
from unified.warmup.callbacks import METRICS_FILE, read_metrics
from unified.warmup.failfast import FailFastMonitor, stop_message, zero_variance_share

CPU_RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "warmup" / "embedded_cpu.yaml")


def score_block(request, n) -> str:
    """The rubric's answer format, every criterion scored 1-5 from the judged text (differs by prediction)."""
    score = 1 + sum(map(ord, request["messages"][-1]["content"])) % 5
    return "<scores>\n" + "\n".join(f"{c}: {score}" for c in CRITERIA) + "\n</scores>"


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def judged(spec: str, *extra: str) -> list[str]:
    """--set items of the paper's 9:1 rubric:rule mix on ``spec``, one attempt, no cache (CPU recipe otherwise)."""
    items = ["rewards.similarity.weight=0", "rewards.repetition.weight=0", "rewards.rubric.weight=0.9",
             f"rewards.rubric.judge_endpoint={spec}", "rewards.rubric.cache_dir=", "rewards.rubric.judge_max_retries=0",
             "rewards.rubric.judge_timeout_s=5", "rewards.rule.weight=0.1", *extra]
    return [a for item in items for a in ("--set", item)]


@pytest.mark.parametrize("judge", ["dead", "junk"])
def test_a_dead_or_unparseable_judge_is_refused_before_anything_is_written(tmp_path, capsys, judge):
    data, out = write_fixture_awb_dir(tmp_path / "data"), tmp_path / "run"
    args = ["--recipe", CPU_RECIPE, *tiny_cli_overrides(None, data, out)]
    if judge == "dead":
        spec = f"openai:http://127.0.0.1:{dead_port()}/v1#judge"
        rc = main([*args, "--model", "embedded", *judged(spec)])
    else:
        with FakeChat(lambda request, n: "Looks right to me.") as chat:
            spec = chat.spec()
            rc = main([*args, "--model", "embedded", *judged(spec)])
        assert len(chat.asked) == 1  # one request
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"unified.warmup: rewards.rubric: the judge {spec} did not give a usable answer")
    assert ("judge failed: " if judge == "dead" else "unparseable") in err[0]
    assert not out.exists()  # refused before the output dir, the weights, step 1


def test_a_live_judge_gets_the_recipes_request_and_passes(tmp_path):
    from unified.rewards.rubric import JUDGE_SYSTEM
    from unified.warmup.config import load_warmup_config
    from unified.warmup.preflight import judge_problems

    data = write_fixture_awb_dir(tmp_path / "data")
    with FakeChat(score_block, model="judge") as chat:
        sets = judged(chat.spec(), "rewards.rubric.judge_max_tokens=77", f"data.train=[{data}]")[1::2]
        cfg = load_warmup_config(CPU_RECIPE, sets)
        assert judge_problems(cfg) == []
    (request,) = chat.asked
    assert request["max_tokens"] == 77 and request["temperature"] == 0.0 and request["model"] == "judge"
    assert request["messages"][0]["content"] == JUDGE_SYSTEM  # the rubric's own prompt
    assert "### Predicted observation (to grade)" in request["messages"][1]["content"]


class StopJudgeAfterStep(TrainerCallback):
    """Shut the judge's HTTP server down (nothing listens any more) at the end of optimizer step ``step``."""

    def __init__(self, chat: FakeChat, step: int):
        self.chat, self.step, self.stopped_after = chat, step, None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step and self.stopped_after is None:
            self.chat.__exit__(None, None, None)
            self.stopped_after = len(self.chat.asked)


def test_a_judge_that_dies_mid_run_stops_it_with_a_checkpoint(tmp_path, tiny_checkpoint):
    """The judge answers generation batch 1 and is gone from then on: batches 2 and 3 drop every sample
    (dropped_share 1.0 > 0.5 twice in a row), so the run saves checkpoint-3 and stops there, not at step 6."""
    from unified.warmup.config import load_warmup_config
    from unified.warmup.trainer import run_warmup

    data, out = write_fixture_awb_dir(tmp_path / "data"), tmp_path / "run"
    with FakeChat(score_block) as chat:
        sets = [*tiny_cli_overrides(None, None, None, "train.max_steps=6", "monitor.max_zero_variance_share=1.0")[1::2], f"model.name_or_path={tiny_checkpoint}",
                f"data.train=[{data}]", f"output_dir={out}", *judged(chat.spec())[1::2]]
        cfg = load_warmup_config(CPU_RECIPE, sets)
        assert (cfg.monitor.max_dropped_share, cfg.monitor.patience_batches) == (0.5, 2)  # the defaults
        killer = StopJudgeAfterStep(chat, 1)
        result = run_warmup(cfg, callbacks=[killer])
    assert killer.stopped_after == 8  # batch 1: 8 completions judged
    assert result.global_step == 3 and result.stopped["step"] == 3
    assert "rewards/dropped_share > monitor.max_dropped_share=0.5 for 2 generation batches in a row (1, 1)" \
        in result.stopped["reason"]
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert json.loads((out / "run.json").read_text())["stopped"]["checkpoint"].endswith("checkpoint-3")
    records = [r for r in read_metrics(out / METRICS_FILE) if "loss" in r]
    assert [r["rewards/dropped_share"] for r in records] == [0.0, 1.0, 1.0]
    assert "monitor/stopped" not in records[1] and records[2]["monitor/stopped"] == 1.0
    assert all("rewards/zero_variance_share" in r for r in records)
    assert "rerun the same command to resume" in stop_message(result.stopped)


def test_rewards_without_variance_stop_the_run(tmp_path):
    """Every completion gets the same reward: zero_variance_share 1.0 at batches 1 and 2, checkpoint-2."""
    def constant(completions, **kwargs):
        return [3.0] * len(completions)

    trainer = build_tiny_trainer(tmp_path, "model.router_aux_loss_coef=0", "train.max_steps=4",
                                 "monitor.max_zero_variance_share=1.0", reward_funcs=[constant])
    trainer.train()
    assert trainer.state.global_step == 2 and (tmp_path / "checkpoint-2" / "trainer_state.json").is_file()
    assert "rewards/zero_variance_share >= monitor.max_zero_variance_share=1" in trainer.failfast.outcome["reason"]


def test_zero_variance_share_and_the_patience_count():
    nan = float("nan")
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0],      # group 0: the same total twice: no signal
                            [2.0, 0.0], [1.0, 1.0],      # group 1: weighted 1.0 vs 0.75: signal
                            [nan, nan], [5.0, 0.0],      # group 2: one scored sample: no signal
                            [nan, 1.0], [nan, 2.0]])     # group 3: rubric dropped, rule differs: signal
    assert zero_variance_share(rewards, torch.tensor([0.5, 0.25]), 2) == pytest.approx(0.5)
    monitor = FailFastMonitor(max_dropped_share=0.5, max_zero_variance_share=None, patience=2)
    for share in (0.9, 0.2, 0.6):  # an interrupted run does not count
        monitor.observe({"rewards/dropped_share": share, "rewards/zero_variance_share": 1.0})
    assert monitor.reason is None
    monitor.observe({"rewards/dropped_share": 0.55})
    assert monitor.reason.startswith("rewards/dropped_share > monitor.max_dropped_share=0.5 for 2 generation "
                                     "batches in a row (0.6, 0.55)")
