"""The closing table and the memory notice of ``make demo`` (unified.demo), on recorded results."""

from __future__ import annotations

from unified import demo
from unified.eval.records import BenchmarkEntry, RunSummary


def _report():
    before = {"mean_reward": 2.0, "mean_completion_tokens": 30.0}
    after = {"mean_reward": 3.5, "mean_completion_tokens": 12.5}
    paired = {"prompts": 8, "mean_diff": 1.5, "se_diff": 0.5, "up": 5, "down": 1, "same": 2}
    return {"before": before, "after": after, "paired": paired, "steps": 3, "train_size": 70}


def test_table_shows_the_rule_based_reward_with_its_se_and_what_the_suite_ran_and_skipped():
    summary = RunSummary(benchmarks={
        "bfcl_v4": BenchmarkEntry(status="ok", aggregate={"score": 0.25, "metric": "overall accuracy"}, tasks=2,
                                  tasks_run=2, tasks_skipped=0, tasks_errored=0),
        "claw_eval": BenchmarkEntry(status="skipped", reason="no local checkout", how_to_fix="set CLAW_EVAL_ROOT"),
    })
    table = demo.before_after_table(_report(), summary)
    assert "rule-based" in table and "| 2.00 | 3.50 (paired +1.50 +- 0.50 SE; 5 up, 1 down, 2 same) |" in table
    assert "| mean completion length, tokens | 30.0 | 12.5 |" in table  # a report without its settings
    capped = {**_report(), "settings": {"max_new_tokens": 32}}
    capped["before"] = {**capped["before"], "completion_ids": [[1] * 32, [1] * 28]}
    capped["after"] = {**capped["after"], "completion_ids": [[1] * 32, [1] * 32]}
    assert "| mean completion length, tokens (capped at 32) | 30.0; 1 of 2 hit the cap | 12.5; 2 of 2 hit the cap |" \
        in demo.before_after_table(capped, summary)
    assert "bfcl_v4 | not run (time) | 0.25 (overall accuracy; tasks run 2/2, skipped 0, errored 0) |" in table
    assert "claw_eval | not run (time) | skipped: no local checkout (set CLAW_EVAL_ROOT) |" in table


def test_table_without_an_eval_summary_says_so():
    assert "agent suite (ood) | not run" in demo.before_after_table(_report(), None)


def test_a_warmup_that_kept_the_start_is_called_identical_weights():
    kept = {**_report(), "collapse": {"best_step": 0, "best_probe_reward": 1.2, "kept_step": 0}}
    table = demo.before_after_table(kept, None)
    assert "IDENTICAL WEIGHTS" in table and "STARTING weights, unchanged after 3 steps" in table
    assert "after warmup (identical weights: the start kept) |" in table
    trained = {**_report(), "collapse": {"best_step": 3, "best_probe_reward": 1.9}}
    assert "IDENTICAL" not in demo.before_after_table(trained, None)


def test_final_weights_note_names_the_step_final_holds():
    from unified.warmup.guard import final_weights_note

    assert final_weights_note({}, 5) == "final/ holds the weights of the last step, 5"
    assert "step 2's weights, not step 5's" in final_weights_note({"best_step": 2, "kept_step": 2}, 5)
    rolled = final_weights_note({"collapsed_at": 4, "action": "rollback", "reason": "loops 80%", "kept_step": 0}, 4)
    assert "STARTING weights" in rolled and "rolled back (loops 80%)" in rolled


def test_memory_notice_warns_when_memory_is_short(monkeypatch):
    monkeypatch.setattr(demo, "available_memory_gib", lambda: 3.0)
    notice = demo.memory_notice()
    need, measured = demo.demo_cost()
    assert f"needs about {need:.0f} GiB" in notice and "WARNING" in notice and measured in notice
    assert "docs/costs.md" in measured  # the one table of costs, quoted
    monkeypatch.setattr(demo, "available_memory_gib", lambda: 64.0)
    assert "WARNING" not in demo.memory_notice()


def test_the_demo_warmup_is_two_updates_of_one_generation_batch_at_the_measured_learning_rate():
    """The settings docs/warmup_collapse.md measured over seeds (measurements/demo_seed_sweep.py reads the same
    function, and its own ``--set`` extras come after them and win)."""
    from unified.warmup.config import load_warmup_config, updates_per_generation

    cfg = load_warmup_config(demo.DEMO_RECIPE, demo.demo_warmup_overrides(steps=2, heldout=8))
    assert (cfg.train.max_steps, updates_per_generation(cfg), cfg.train.learning_rate) == (2, 2, 1e-4)
    assert cfg.gspo.steps_per_generation * cfg.train.per_device_train_batch_size // cfg.gspo.num_generations == 4  # prompts
    assert (cfg.data.heldout_size, cfg.data.validation_size, cfg.monitor.probe_size) == (8, 8, 8)
    swept = load_warmup_config(demo.DEMO_RECIPE, [*demo.demo_warmup_overrides(steps=2, heldout=8),
                                                  "train.learning_rate=2e-5"])
    assert swept.train.learning_rate == 2e-5


def test_the_demo_turn_is_called_what_it_is():
    call = '<tool_call>\n<function=list_files>\n<parameter=path>\n/tmp\n</parameter>\n</function>\n</tool_call>'
    assert demo.tool_turn_verdict(call, 20, 48).startswith('a tool call: list_files({"path": "/tmp"})')
    echo = '{"type": "function", "function": {"name": "list_files", "description": "List the files'
    assert demo.tool_turn_verdict(echo, 48, 48) == ("NO tool call: the model answered in text (the embedded 135M "
                                                   "model is not a reliable tool caller); stopped at the 48-token "
                                                   "cap (--max-new-tokens)")
    assert demo.tool_turn_verdict("<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>", 9, 48) \
        .startswith("NOT a valid tool call (unknown tool 'rm_rf')")


def test_the_recap_gives_the_fresh_seeds_and_leads_with_it_when_the_setting_does_not_learn(tmp_path, monkeypatch):
    import json

    chosen = {"range": "0-9", "n": 10, "kept_start": 1, "heldout_up": 8, "mean_diff": 0.752, "se_diff": 0.241}
    learns = {"range": "100-109", "n": 10, "kept_start": 2, "heldout_up": 7, "mean_diff": 0.5, "se_diff": 0.2}
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"selection": chosen, "report": learns}))
    monkeypatch.setattr(demo, "DEMO_SEED_REPORT", path)
    table = demo.before_after_table(_report(), None)
    assert table.startswith("Before/after") and "These settings on fresh training seeds, never used to choose them: " \
        "10 seeds (100-109): kept the start on 2, raised the held-out reward on 7, mean paired difference " \
        "+0.50 +- 0.20 SE. On the seeds they were chosen on, 10 seeds (0-9): kept the start on 1" in table
    path.write_text(json.dumps({"selection": chosen, "report": {**learns, "heldout_up": 5, "kept_start": 3}}))
    table = demo.before_after_table(_report(), None)  # 5 of 10 is not most
    assert table.startswith("THE DEMO'S WARMUP DOES NOT LEARN ON MOST FRESH SEEDS: of 10 seeds never used to choose "
                            "its settings, 5 raised the held-out reward and 3 kept the starting weights.")
    other = {"range": "elsewhere", "n": 5, "kept_start": 2, "heldout_up": 1, "mean_diff": -0.16, "se_diff": None}
    path.write_text(json.dumps({"selection": chosen, "report": learns, "other_fresh": [other]}))
    table = demo.before_after_table(_report(), None)  # pooled: 8 of 15 up, 4 kept the start: most learn
    assert table.startswith("Before/after") and "; 5 seeds (elsewhere): kept the start on 2, raised the held-out " \
        "reward on 1, mean paired difference -0.16." in table
