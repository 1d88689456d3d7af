"""Collapse detection: the loop detector, the per-step degenerate shares, and stop/rollback (tiny MoE)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import TrainerCallback
from _warmup_support import fixture_rl_dataset, tiny_overrides, tiny_policy, token_f1

from unified.config import ConfigError
from unified.warmup.callbacks import METRICS_FILE, read_metrics
from unified.warmup.config import load_warmup_config
from unified.warmup.degenerate import DegenerateMonitor, find_loop, is_truncated, loop_count, periodic_tail

LOOPS = {
    "hash": "#\n\n#\n\n#\n\n#\n\n#\n\n#\n\n#\n\n#\n\n#\n\n#",
    "fence": "```\n\n```\n\n```\n\n```\n\n```\n\n```\n\n``",  # cut mid-unit by the length limit
    "think": "<think>\n\n<think>\n\n<think>\n\n<think>\n\n<thin",
    "sentence": "The function is not defined. The function is not defined. The function is not defined. The",
    "sentence_lines": "The function is not defined.\nThe function is not defined.\nThe function is not defined.\n",
    "lines_with_noise": "ok\nError: retry\nError: retry\nError: retry\nError: retry\nError: retry",
    "words": "done done done done done done done done done done",
}

NORMAL = [
    "total 8\ndrwxr-xr-x 2 root root 4096 Jan  1 00:00 .\n-rw-r--r-- 1 root root   12 Jan  1 00:00 notes.txt",
    '{"status": "ok", "items": [1, 2, 3], "next": null}',
    "The file was created. It contains three lines. The last line is empty.",
    "| name | size |\n|------|------|\n| a.txt | 12 |\n| b.txt | 40 |",
    "1\n2\n3\n4\n5\n6\n7\n8",
    "Traceback (most recent call last):\n  File \"main.py\", line 3\nNameError: name 'x' is not defined",
    "----",
    "ok",
    "",
    "def add(a, b):\n    return a + b\n\n\nprint(add(2, 3))",
]


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_loops_of_any_unit_are_found(name):
    loop = find_loop(LOOPS[name])
    assert loop is not None and loop.repeats >= 3 and loop.coverage >= 0.5, loop


@pytest.mark.parametrize("text", NORMAL)
def test_normal_text_is_not_a_loop(text):
    assert find_loop(text) is None


def test_token_loops_and_truncation():
    assert find_loop("a b c d e f g h i j", token_ids=[5, 6, 7, 5, 6, 7, 5, 6, 7, 5]).unit == "tokens"
    assert find_loop("a b c d e f g h i j", token_ids=[5, 6, 7, 8, 9, 10, 11, 12]) is None
    assert periodic_tail([1, 2, 1, 2, 1, 2], 10) == (2, 4)
    assert is_truncated([1, 2, 3, 4], 4, eos_token_id=9) and not is_truncated([1, 2, 3, 9], 4, eos_token_id=9)
    assert not is_truncated([1, 2], 4, eos_token_id=9)
    assert loop_count([LOOPS["hash"], NORMAL[0], LOOPS["fence"]]) == 2


def test_monitor_reports_shares_without_changing_the_reward():
    logged = {}
    monitor = DegenerateMonitor(max_length=4, eos_token_id=9)
    completions = [[{"role": "assistant", "content": LOOPS["hash"]}], [{"role": "assistant", "content": NORMAL[1]}],
                   [{"role": "assistant", "content": NORMAL[2]}], [{"role": "assistant", "content": "x"}]]
    ids = [[1, 2, 3, 4], [1, 2, 3, 9], [1, 2, 3, 4], [1, 9]]
    values = monitor(completions, completion_ids=ids, log_metric=logged.__setitem__)
    assert values == [1.0, 0.0, 0.0, 0.0]
    assert logged == {"degenerate/loop_share": 0.25, "degenerate/truncated_share": 0.5, "degenerate/share": 0.5}


@pytest.mark.parametrize("override", ["monitor.max_probe_loop_rise=1.5", "monitor.probe_size=-1",
                                      "monitor.on_collapse=restart", "monitor.max_rollout_loop_share=-0.1"])
def test_monitor_settings_are_checked(override):
    with pytest.raises(ConfigError, match="monitor"):
        load_warmup_config(None, [override])


def _trainable(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _run(tmp_path, *extra: str):
    from unified.warmup.trainer import run_warmup

    model, tok = tiny_policy(seed=0)
    start = _trainable(model)
    cfg = load_warmup_config(None, tiny_overrides(tmp_path, "train.max_steps=3", "train.learning_rate=1e-2",
                                                  "monitor.probe_size=3", *extra))
    result = run_warmup(cfg, train_dataset=fixture_rl_dataset(), reward_funcs=[token_f1], model=model, tokenizer=tok)
    return start, model, result, read_metrics(tmp_path / METRICS_FILE)


@pytest.mark.slow
def test_every_step_logs_degenerate_shares_and_the_probe(tmp_path, capsys):
    start, model, result, records = _run(tmp_path)  # on_collapse: log (the default), no threshold
    steps = [r for r in records if "reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3] and result.global_step == 3
    assert set(result.collapse) == {"start_probe_reward"}  # no collapse: only the start's probe is recorded
    for r in steps:
        for key in ("degenerate/loop_share", "degenerate/truncated_share", "probe/loop_share", "probe/reward",
                    "probe/kl_to_start", "rewards/degenerate/mean", "grad_norm", "reward_std"):
            assert key in r, key
        assert 0.0 <= r["degenerate/truncated_share"] <= 1.0 and r["probe/kl_to_start"] >= 0.0
    assert steps[-1]["probe/kl_to_start"] > 0.0  # lr 1e-2 moved the policy
    out = capsys.readouterr().out
    assert out.count("unified.warmup: step ") == 3 and "rollouts: loops" in out and "probe: loops" in out


@pytest.mark.slow
def test_rollback_restores_the_last_good_weights_and_stops(tmp_path):
    # a rise of 0 counts as a collapse at the first step: the last good weights are the start's
    start, model, result, records = _run(tmp_path, "monitor.max_probe_loop_rise=0", "monitor.on_collapse=rollback")
    assert result.global_step == 1
    assert result.collapse["collapsed_at"] == 1 and result.collapse["kept_step"] == 0
    now = _trainable(model)
    assert all(torch.equal(now[n], start[n]) for n in start)
    from unified.models import load_checkpoint

    final = load_checkpoint(result.final_dir, dtype=torch.float32).model
    saved = dict(final.named_parameters())
    assert all(torch.equal(saved[n].detach(), start[n]) for n in start)  # final/ holds the start's weights
    assert [r.get("collapse/kept_step") for r in records if "reward" in r] == [0.0]
    assert json.loads((tmp_path / "run.json").read_text())["collapse"]["action"] == "rollback"


@pytest.mark.slow
def test_stop_keeps_the_collapsed_weights(tmp_path):
    start, model, result, _ = _run(tmp_path, "monitor.max_rollout_loop_share=0", "monitor.on_collapse=stop")
    assert result.global_step == 1 and result.collapse["action"] == "stop"
    now = _trainable(model)
    assert any(not torch.equal(now[n], start[n]) for n in start)


def test_the_probe_leaves_the_training_rng_alone():
    from unified.warmup.config import MonitorSection
    from unified.warmup.guard import CollapseGuard

    model, tok = tiny_policy(seed=0)
    guard = CollapseGuard(MonitorSection(probe_size=2), DegenerateMonitor(6, tok.eos_token_id),
                          probe=fixture_rl_dataset(2), score_funcs=[token_f1], score_weights=[1.0], tokenizer=tok,
                          max_new_tokens=4)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    probe = guard.measure_probe(model)
    assert torch.equal(torch.rand(3), expected)  # the rollouts after a probe draw what they would have drawn
    assert set(probe) >= {"probe/loop_share", "probe/reward", "probe/kl_to_start"}


class _ScriptedProbeScore:
    """A probe reward that scores the start and each step with a fixed script (the step to keep is known)."""

    __name__ = "scripted_probe_score"

    def __init__(self, script: list[float]):
        self.script, self.calls = list(script), 0

    def __call__(self, completions, **kwargs) -> list[float]:
        value = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return [value] * len(completions)


class _WeightsPerStep(TrainerCallback):
    """A callback that copies the trainable weights after every optimizer step."""

    def __init__(self):
        self.steps: dict[int, dict[str, torch.Tensor]] = {}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.steps[state.global_step] = _trainable(model)


@pytest.mark.slow
@pytest.mark.parametrize("script, best", [([0.0, 5.0, 1.0, 2.0], 1), ([3.0, 1.0, 2.0, 2.5], 0), ([0.0, 1.0, 2.0, 3.0], 3)])
def test_keep_best_ends_with_the_weights_of_the_best_validation_step(tmp_path, script, best):
    from unified.models import load_checkpoint
    from unified.warmup.trainer import run_warmup

    model, tok = tiny_policy(seed=0)
    start = _trainable(model)
    cfg = load_warmup_config(None, tiny_overrides(tmp_path, "train.max_steps=3", "train.learning_rate=1e-2",
                                                  "monitor.probe_size=2", "data.validation_size=2",
                                                  "monitor.keep_best=true", "monitor.probe_kl=false"))
    seen = _WeightsPerStep()
    result = run_warmup(cfg, train_dataset=fixture_rl_dataset(), reward_funcs=[token_f1], model=model, tokenizer=tok,
                        validation_dataset=fixture_rl_dataset(2), probe_rewards=([_ScriptedProbeScore(script)], [1.0]),
                        callbacks=[seen])
    assert result.global_step == 3 and result.collapse["best_step"] == best
    assert result.collapse["best_probe_reward"] == max(script)
    assert result.collapse["start_probe_reward"] == script[0]  # the start's probe has no metrics.jsonl line
    expected = start if best == 0 else seen.steps[best]
    assert any(not torch.equal(seen.steps[3][n], expected[n]) for n in expected) or best == 3
    final = dict(load_checkpoint(result.final_dir, dtype=torch.float32).model.named_parameters())
    assert all(torch.equal(final[n].detach(), expected[n]) for n in expected)
    records = [r for r in read_metrics(tmp_path / METRICS_FILE) if "probe/reward" in r]
    assert [r["probe/reward"] for r in records] == script[1:]
    assert not any("probe/kl_to_start" in r for r in records)  # probe_kl off


def test_keep_best_needs_a_validation_probe(tmp_path):
    with pytest.raises(ConfigError, match="monitor.keep_best"):
        load_warmup_config(None, tiny_overrides(tmp_path, "monitor.keep_best=true", "monitor.probe_size=4"))
    with pytest.raises(ConfigError, match="data.validation_size"):
        load_warmup_config(None, tiny_overrides(tmp_path, "monitor.keep_best=true", "data.validation_size=4"))


def test_the_validation_split_leaves_the_heldout_rows_alone(tmp_path):
    from unified.warmup.data import load_splits

    base = ["data.train=[data/lwm]", "data.heldout_size=6", "data.max_prompt_tokens=null"]
    plain = load_splits(load_warmup_config(None, tiny_overrides(tmp_path, *base)))
    split = load_splits(load_warmup_config(None, tiny_overrides(tmp_path, *base, "data.validation_size=5")))
    assert plain.validation is None and len(split.validation) == 5
    assert list(split.heldout["sample_id"]) == list(plain.heldout["sample_id"])
    train, val, held = (set(s["sample_id"]) for s in (split.train, split.validation, split.heldout))
    assert not (train & val) and not (train & held) and not (val & held)
    assert train | val == set(plain.train["sample_id"])


def test_the_probe_is_turned_off_with_sharded_weights(tmp_path, capsys):
    sharded = ["launch.cpu_processes=2", "launch.distributed=deepspeed_zero3", "monitor.probe_size=2",
               "data.validation_size=2", "monitor.keep_best=true"]
    cfg = load_warmup_config(None, tiny_overrides(tmp_path, *sharded))
    assert cfg.monitor.probe_size == 0 and cfg.monitor.keep_best is False
    assert "are turned off: the probe decodes with the whole model on every rank" in capsys.readouterr().err
    ddp = load_warmup_config(None, tiny_overrides(tmp_path, *sharded[:1], "launch.distributed=ddp", *sharded[2:]))
    assert ddp.monitor.probe_size == 2 and ddp.monitor.keep_best is True
