"""``python -m unified.warmup``: the output dir records its recipe (a rerun of another recipe stops
with one line), settings that would fail after loading stop at once, and ``final/README.md`` is a
model card of what was trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _warmup_support import tiny_cli_overrides, write_fixture_awb_dir

from unified import __version__ as unified_version
from unified.warmup.__main__ import main
from unified.warmup.config import load_warmup_config
from unified.warmup.identity import IDENTITY_FILE, recipe_fields

REPO = Path(__file__).resolve().parents[1]
CPU = str(REPO / "recipes/warmup/embedded_cpu.yaml")
PAPER = str(REPO / "recipes/warmup/qwen35_35b_a3b.yaml")


def _errors(capsys, argv: list[str], code: int = 2) -> list[str]:
    capsys.readouterr()
    assert main(argv) == code
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_the_paper_recipes_empty_judge_is_flagged_by_dry_run_and_stops_a_run(capsys, tmp_path):
    lines = _errors(capsys, ["--recipe", PAPER, "--dry-run"])
    assert lines == [line for line in lines
                     if line.startswith("unified.warmup: rewards.rubric.judge_endpoint is empty")]
    assert len(lines) == 1 and "JUDGE=" in lines[0] and "--set rewards.rubric.judge_endpoint=openai:URL#MODEL" in lines[0]
    assert main(["--recipe", PAPER, "--dry-run", "--set",
                 "rewards.rubric.judge_endpoint=openai:http://j:8001/v1#judge"]) == 0
    # --print-command (what slurm/lwm_warmup.sh asks first) stops too, before any node loads weights
    assert _errors(capsys, ["--recipe", PAPER, "--print-command", "trainer"])[0].startswith(
        "unified.warmup: rewards.rubric.judge_endpoint is empty")
    assert "is not openai:URL#MODEL" in _errors(
        capsys, ["--recipe", PAPER, "--dry-run", "--set", "rewards.rubric.judge_endpoint=embedded"])[0]


def test_a_misspelt_model_spec_is_one_line_in_dry_run_and_run(capsys, tmp_path):
    for extra in (["--dry-run"], ["--output-dir", str(tmp_path / "out")]):
        lines = _errors(capsys, ["--recipe", CPU, "--model", "embeded", *extra])
        assert lines == ["unified.warmup: model.name_or_path: model spec 'embeded': no such checkpoint; "
                         "did you mean 'embedded'?"]
    assert not (tmp_path / "out").exists()
    assert "data.train: /no/such/dir does not exist" in _errors(capsys, ["--recipe", CPU, "--data", "/no/such/dir",
                                                                         "--dry-run"])[0]


def test_set_errors_name_the_flag_not_the_recipe_file(capsys):
    line = _errors(capsys, ["--recipe", CPU, "--set", "train.max_step=3", "--dry-run"])[0]
    assert line.startswith("unified.warmup: --set train.max_step=3: train: unknown key 'max_step'")
    assert "max_steps" in line and "embedded_cpu.yaml" not in line
    line = _errors(capsys, ["--recipe", CPU, "--set", "gspo.epsilon=abc", "--dry-run"])[0]
    assert line == "unified.warmup: --set gspo.epsilon=abc: gspo.epsilon: expected a number, got 'abc'"


def test_usage_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--recipe", CPU, "--dryrun"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == ("python -m unified.warmup: error: unrecognized arguments: --dryrun; did you mean --dry-run? "
                   "(flags are never abbreviated) (see python -m unified.warmup --help)")


def test_where_and_how_long_are_not_identity():
    a = recipe_fields(load_warmup_config(CPU))
    b = recipe_fields(load_warmup_config(CPU, ["output_dir=/elsewhere", "train.max_steps=50", "logging.wandb=false",
                                               "generation.cpu_threads=2"]))
    assert a == b
    assert recipe_fields(load_warmup_config(CPU, ["train.learning_rate=1e-3"])) != a


@pytest.mark.slow
def test_another_recipe_on_the_same_output_dir_stops_and_the_card_says_what_was_trained(
        tmp_path, tiny_checkpoint, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = write_fixture_awb_dir(tmp_path / "data")
    out = tmp_path / "run"
    base = ["--recipe", CPU, *tiny_cli_overrides(tiny_checkpoint, data, out, "train.max_steps=1", "train.save_steps=1")]
    assert main(base) == 0
    record = json.loads((out / IDENTITY_FILE).read_text())
    assert record["fields"]["model.name_or_path"] == str(Path(tiny_checkpoint).resolve()) and record["recipe_hash"]

    card = (out / "final" / "README.md").read_text()
    assert "None" not in card and (out / "README.md").read_text() == card  # TRL's card in output_dir replaced
    for piece in (f"spec: `{tiny_checkpoint}`", f"recipe hash: `{record['recipe_hash']}`", "| similarity",
                  "- steps: 1 (train.max_steps 1)", f"- train: `{data}`", "## Recipe (resolved)", f"unified {unified_version}",
                  "Not measured for this checkpoint", "repetition penalty weight 5"):
        assert piece in card, piece

    lines = _errors(capsys, [*base, "--set", "train.learning_rate=1e-3"])
    assert len(lines) == 1 and "train.learning_rate 2e-05 -> 0.001" in lines[0]
    assert "give a new --output-dir" in lines[0] and "--resume-anyway" in lines[0]
    assert "would" not in lines[0] and "already finished" not in lines[0]
    capsys.readouterr()
    assert main(base) == 0 and "already finished at step 1" in capsys.readouterr().out  # the same command
    (out / IDENTITY_FILE).unlink()  # an output dir from before identities: compared on recipe.resolved.yaml
    assert "gspo.epsilon 0.0003 -> 0.001" in _errors(capsys, [*base, "--set", "gspo.epsilon=1e-3"])[0]
    assert main(base) == 0 and (out / IDENTITY_FILE).is_file()
    capsys.readouterr()
    assert main([*base, "--set", "train.learning_rate=1e-3", "--set", "train.max_steps=2", "--resume-anyway"]) == 0
    accepted = json.loads((out / IDENTITY_FILE).read_text())["accepted_differences"]
    assert accepted[0]["differences"] == ["train.learning_rate 2e-05 -> 0.001"]
    card = (out / "final" / "README.md").read_text()
    assert "- steps: 2 (train.max_steps 2)" in card
    assert "continued under a changed recipe (--resume-anyway): train.learning_rate 2e-05 -> 0.001" in card
