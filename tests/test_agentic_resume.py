"""Resuming an agentic GSPO run (unified.warmup.agentic_checkpoint): a run stopped after step N and rerun goes on
at N + 1 with the same metrics rows and final weights as a run that was never stopped; a pre-emption request
(``preempt.request``, the single-turn warmup's way) stops it with a checkpoint and exit status 75. The
policy is a tiny random MoE; the benchmark is a fixture adapter written for these tests in the adapter
format (tests/fixture_eval_bench.py) whose scores vary with the sampled tokens, so every step updates."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fixture_eval_bench import FixtureAdapter
from unified.store import read_jsonl
from unified.types import EpisodeResult
from unified.warmup.__main__ import main as warmup_main
from unified.warmup.agentic import run_agentic
from unified.warmup.config import load_warmup_config
from unified.warmup.preempt import PREEMPT_REQUEST, PREEMPTED_EXIT, Preempted


class EvenTokensFixture(FixtureAdapter):
    """Scores the share of even token ids the policy generated in the episode (varied rewards from a random
    model). With ``PREEMPT_AFTER`` set to ``(dir, task_id)``, scoring that task writes ``dir/preempt.request``
    (the file slurm/lwm_warmup.sh writes on the pre-emption warning) once."""

    name = "fixture_even_tokens"
    PREEMPT_AFTER: tuple[Path, str] | None = None

    def score(self, task, episode, env):
        if self.PREEMPT_AFTER is not None and task.id == self.PREEMPT_AFTER[1]:
            (self.PREEMPT_AFTER[0] / PREEMPT_REQUEST).touch()
            type(self).PREEMPT_AFTER = None
        ids = [i for step in episode.steps for i in step.completion_token_ids]
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial,
                             score=sum(1 for i in ids if i % 2 == 0) / max(1, len(ids)))


class SignalFixture(EvenTokensFixture):
    """Sends this process SIGUSR1 (slurm's pre-emption warning, relayed by srun) while scoring."""

    def score(self, task, episode, env):
        os.kill(os.getpid(), signal.SIGUSR1)
        return super().score(task, episode, env)


def settings(out: Path, checkpoint: Path, steps: int) -> list[str]:
    return [f"output_dir={out}", f"model.name_or_path={checkpoint}", "logging.wandb=false", "rewards=[]",
            "rewards.benchmark.weight=1", "rewards.benchmark.adapter=test_agentic_resume:EvenTokensFixture",
            "rewards.benchmark.heldout_size=1", "rewards.benchmark.limits.max_turns=1", f"train.max_steps={steps}",
            "train.learning_rate=1e-2", "gspo.num_generations=2", "generation.max_completion_length=8",
            "agentic.tasks_per_step=2", "agentic.max_in_flight=1", "agentic.save_final=true"]


def metric_rows(out: Path) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in ("seconds", "peak_rss_gib")} for row in read_jsonl(out / "metrics.jsonl")]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "final" / "model.safetensors"))


def test_interrupted_agentic_run_resumes_to_the_straight_runs_metrics_and_weights(tmp_path, tiny_checkpoint):
    straight = tmp_path / "straight"
    report = run_agentic(load_warmup_config(None, settings(straight, tiny_checkpoint, 3) + ["agentic.eval_before_after=false"]))
    assert [s["step"] for s in report["steps"]] == [1, 2, 3] and all(s["samples"] > 0 for s in report["steps"])
    # the task cursor: 5 training tasks, 2 a step
    assert report["tasks_used"] == [["echo_0", "echo_1"], ["echo_2", "echo_3"], ["echo_4", "echo_0"]]

    # stopped after step 2 (a run of 2 steps), then the same command with 3 steps: resumes at step 3
    stopped = tmp_path / "stopped"
    first = run_agentic(load_warmup_config(None, settings(stopped, tiny_checkpoint, 2)))
    assert (stopped / "checkpoint-2" / "trainer_state.json").is_file()
    (stopped / "metrics.jsonl").open("a").write('{"step": 3, "torn')  # a row of a step killed mid-write
    resumed = run_agentic(load_warmup_config(None, settings(stopped, tiny_checkpoint, 3)))
    assert resumed["resumed_from"] == str(stopped / "checkpoint-2")
    assert resumed["before"] == first["before"]  # measured once, carried by the checkpoint
    assert (stopped / "eval_after_step2" / "run.json").is_file()  # the 2-step run's eval after, set aside
    assert json.loads((stopped / "eval_before" / "run.json").read_text())  # and not rerun over
    assert metric_rows(stopped) == metric_rows(straight)
    assert resumed["tasks_used"] == report["tasks_used"]
    a, b = final_weights(straight), final_weights(stopped)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(str(Path(tiny_checkpoint) / "model.safetensors"))
    assert any(not torch.equal(start[k], a[k]) for k in a)  # the steps did update the weights
    again = run_agentic(load_warmup_config(None, settings(stopped, tiny_checkpoint, 3)))
    assert again.get("already_finished") and metric_rows(stopped) == metric_rows(straight)


def test_preempt_request_saves_a_checkpoint_and_the_rerun_finishes_the_run(tmp_path, tiny_checkpoint, capsys):
    out = tmp_path / "run"
    argv = [a for s in settings(out, tiny_checkpoint, 3) + ["agentic.eval_before_after=false"] for a in ("--set", s)]
    EvenTokensFixture.PREEMPT_AFTER = (out, "echo_2")  # scored during step 2
    try:
        assert warmup_main(argv) == PREEMPTED_EXIT
    finally:
        EvenTokensFixture.PREEMPT_AFTER = None
    assert "pre-empted at step 2" in capsys.readouterr().err
    assert (out / "checkpoint-2" / "trainer_state.json").is_file() and not (out / "final").exists()
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    assert warmup_main(argv) == 0
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]
    assert (out / "final" / "model.safetensors").is_file()
    with pytest.raises(Preempted):  # the signal: SIGUSR1 during a step stops at its end, as the request does
        sets = settings(tmp_path / "signal", tiny_checkpoint, 3) + ["agentic.eval_before_after=false",
                                                                    "rewards.benchmark.adapter=test_agentic_resume:SignalFixture"]
        run_agentic(load_warmup_config(None, sets))
    assert (tmp_path / "signal" / "checkpoint-1" / "trainer_state.json").is_file()
