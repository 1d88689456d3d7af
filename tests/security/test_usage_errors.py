"""Bad numbers on a command line or in a recipe are usage errors that name the value.

What a user (or a sweep script with a typo) MAY pass: any string for any flag, any YAML for
any recipe key, ``--set`` overrides of every field.

What it may NEVER cause: a run that starts with a meaningless setting (``--limit -1``,
``--runs -3``, ``--limit 0``, ``--max-in-flight 0``, a negative ``max_steps`` or
``learning_rate``, a NaN) and fails later, or silently does something else; a traceback
instead of one line naming the flag or key and the value.
"""

from __future__ import annotations

import pytest

from unified.config import ConfigError
from unified.eval.cli import main as eval_main
from unified.warmup.__main__ import main as warmup_main
from unified.warmup.config import load_warmup_config

FIXTURE = "fixture_eval_bench:FixtureAdapter"


@pytest.mark.parametrize("flag, value, says", [
    ("--limit", "-1", ">= 1"), ("--limit", "0", ">= 1"), ("--runs", "-3", ">= 1"), ("--max-in-flight", "0", ">= 1"),
    ("--max-turns", "0", ">= 1"), ("--max-steps-per-turn", "-1", ">= 1"), ("--max-episode-tokens", "0", ">= 1"),
    ("--max-new-tokens", "0", ">= 1"), ("--max-seconds", "-5", "> 0"), ("--max-seconds", "nan", "finite"),
    ("--temperature", "-0.5", ">= 0"), ("--top-p", "7", "<= 1"), ("--top-p", "0", "> 0"), ("--limit", "ten", "integer"),
])
def test_eval_flags_out_of_range_are_usage_errors_naming_flag_and_value(flag, value, says, capsys):
    with pytest.raises(SystemExit) as stopped:
        eval_main(["--benchmarks", FIXTURE, "--model", "gold", "--dry-run", flag, value])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and f"argument {flag}" in err and says in err and "Traceback" not in err


@pytest.mark.parametrize("override, says", [
    ("limit=-1", "limit: expected a value >= 1, got -1"), ("runs=0", "runs: expected a value >= 1, got 0"),
    ("max_in_flight=-2", "max_in_flight: expected a value >= 1, got -2"),
    ("limits.max_turns=-2", "limits.max_turns: expected a value >= 1, got -2"),
    ("limits.max_seconds=.inf", "limits.max_seconds: expected a finite number, got inf"),
    ("sampling.top_p=7", "sampling.top_p: expected a value <= 1, got 7"),
    ("sampling.max_new_tokens=0", "sampling.max_new_tokens: expected a value >= 1, got 0"),
])
def test_eval_set_overrides_out_of_range_name_the_key_and_value(override, says, capsys):
    with pytest.raises(SystemExit) as stopped:
        eval_main(["--benchmarks", FIXTURE, "--model", "gold", "--dry-run", "--set", override])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and says in err and "Traceback" not in err


@pytest.mark.parametrize("override, says", [
    ("train.max_steps=-5", "train.max_steps: expected a value >= 1, got -5"),
    ("train.learning_rate=-1e-6", "train.learning_rate: expected a value > 0, got -1e-06"),
    ("train.learning_rate=.nan", "train.learning_rate: expected a finite number"),
    ("train.per_device_train_batch_size=0", "train.per_device_train_batch_size"),
    ("train.gradient_accumulation_steps=0", "train.gradient_accumulation_steps"),
    ("train.save_steps=0", "train.save_steps"), ("train.warmup_steps=-1", "train.warmup_steps"),
    ("generation.max_completion_length=0", "generation.max_completion_length"),
    ("generation.top_p=1.5", "generation.top_p"), ("data.limit=-1", "data.limit"),
    ("gspo.num_iterations=0", "gspo.num_iterations"), ("rewards.judge_max_concurrency=0", "judge_max_concurrency"),
    ("rewards.judge_timeout_s=-1", "judge_timeout_s"), ("launch.gpus_per_node=-1", "launch.gpus_per_node"),
])
def test_warmup_recipe_values_out_of_range_are_usage_errors(override, says, capsys):
    with pytest.raises(ConfigError, match=says.replace("+", r"\+").replace("(", r"\(")):
        load_warmup_config(None, ["rewards.judge_model=embedded", override])
    assert warmup_main(["--dry-run", "--set", "rewards.judge_model=embedded", "--set", override]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_a_bad_value_in_a_recipe_file_names_file_and_line(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("output_dir: x\ntrain:\n  max_steps: 10\n  learning_rate: -3e-4\n")
    with pytest.raises(ConfigError, match=rf"{recipe}:4: train.learning_rate: expected a value > 0"):
        load_warmup_config(recipe, ["rewards.judge_model=embedded"])
