"""One name per benchmark (issue 44, item 6): ``--benchmarks module:Class`` is known by its class's ``name``
for its settings, plan, summary, directory and ``--compare`` row; the ``module:Class`` spelling of ``--set``
means the same benchmark; a run directory recorded before the rule (``plan.json`` version 2, identity and
summary keyed by ``module:Class``) resumes and compares under the name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixture_eval_bench import FixtureAdapter
from unified.benchmarks.discovery import benchmark_name, registered_benchmarks
from unified.config import ConfigError
from unified.eval.cli import main
from unified.eval.plan import PLAN_VERSION, read_plan

TESTS = Path(__file__).parent
FIXTURE = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter format, written for tests
NAME = "fixture_echo"  # its class's `name`
BEFORE = TESTS / "fixtures" / "eval_run_before_one_name"
"""A run directory captured with main at 926010d, before one name per benchmark (``--benchmarks
fixture_eval_bench:FixtureAdapter --set benchmarks.fixture_eval_bench:FixtureAdapter.n=2 --model gold``)."""


class SameNameFixture(FixtureAdapter):
    """Another class that keeps the fixture's name (``fixture_echo``)."""


class NamedLikeAnInstalledOne(FixtureAdapter):
    name = "bfcl_v4"


def _gold(out: Path, *args: str) -> list[str]:
    return ["--model", "gold", "--out", str(out), "--benchmarks", FIXTURE, *args]


def _one_line_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2, err
    return err[-1]


def test_set_takes_the_name_or_the_module_class_spelling_of_one_benchmark(tmp_path, capsys):
    for key in (NAME, FIXTURE):
        out = tmp_path / key.replace(":", "_")
        assert main(_gold(out, "--set", f"benchmarks.{key}.n=3")) == 0
        assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [NAME]
        assert len((out / NAME / "results.jsonl").read_text().splitlines()) == 3  # the setting reached the class
        assert json.loads((out / "identity.json").read_text())["benchmarks"] == {NAME: {"n": 3}}
        assert list(json.loads((out / "summary.json").read_text())["benchmarks"]) == [NAME]
        plan = read_plan(out)
        assert plan.config.benchmark_config == {NAME: {"n": 3}} and plan.benchmarks[0].adapter_path == FIXTURE
    both = tmp_path / "both"
    line = _one_line_error(capsys, _gold(both, "--set", f"benchmarks.{NAME}.n=3", "--set", f"benchmarks.{FIXTURE}.n=4"))
    assert f"settings of one benchmark, {NAME}: give them once, as benchmarks.{NAME}" in line
    assert not both.exists()


def test_two_classes_under_one_name_or_an_installed_benchmarks_name_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    out = tmp_path / "never"
    line = _one_line_error(capsys, _gold(out, "test_benchmark_names:SameNameFixture"))
    assert f"--benchmarks {FIXTURE} and test_benchmark_names:SameNameFixture are both named '{NAME}'" in line
    line = _one_line_error(capsys, ["--model", "gold", "--out", str(out), "--dry-run",
                                    "--benchmarks", "test_benchmark_names:NamedLikeAnInstalledOne"])
    assert "its name 'bfcl_v4' is the installed benchmark bfcl_v4's" in line
    assert not out.exists()
    # the installed class given by its path is that benchmark, under its registered name
    assert benchmark_name(registered_benchmarks()["bfcl_v4"].value) == "bfcl_v4"
    with pytest.raises(ConfigError):
        benchmark_name("test_benchmark_names:NamedLikeAnInstalledOne")


def test_a_run_directory_recorded_before_one_name_resumes_and_compares_under_the_name(tmp_path, capsys):
    old = read_plan(BEFORE)  # version 2: named by the module:Class text; read under its directory's name
    assert json.loads((BEFORE / "plan.json").read_text())["benchmarks"][0]["name"] == FIXTURE
    assert old.version == PLAN_VERSION and [(b.name, b.adapter_path) for b in old.benchmarks] == [(NAME, FIXTURE)]
    assert old.config.benchmark_config == {NAME: {"n": 2}}
    run = tmp_path / "run"
    shutil.copytree(BEFORE, run)
    # its recorded settings (keyed by module:Class) are compared under the name: other settings are refused
    line = _one_line_error(capsys, _gold(run, "--set", f"benchmarks.{NAME}.n=4"))
    assert f'benchmarks.{NAME} {{"n": 2}} -> {{"n": 4}}' in line
    assert main(_gold(run, "--set", f"benchmarks.{NAME}.n=2")) == 0  # the same settings: resumed, nothing rerun
    assert len((run / NAME / "results.jsonl").read_text().splitlines()) == 2
    assert json.loads((run / "identity.json").read_text())["benchmarks"] == {NAME: {"n": 2}}
    assert read_plan(run).benchmark(NAME).to_run == []
    assert list(json.loads((run / "summary.json").read_text())["benchmarks"]) == [NAME]
    # --compare: the summary written before (keyed by module:Class) and one written now share one row
    new = tmp_path / "new"
    assert main(_gold(new, "--set", f"benchmarks.{FIXTURE}.n=2")) == 0
    capsys.readouterr()
    assert main(["--compare", str(BEFORE), str(new)]) == 0
    table = capsys.readouterr().out
    rows = [line for line in table.splitlines() if line.startswith("| other |")]
    assert len(rows) == 1 and rows[0].startswith(f"| other | {NAME} | 100.00 (ok; 2/2 run") and rows[0].endswith("| +0.00 |"), table
    assert "Settings that differ" not in table
