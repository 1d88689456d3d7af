"""The seam of the parts of a run that are not episodes (unified.eval.parts): the plan, the runner and the
summary reach a part (today lm-eval, `--benchmarks lm_eval` or `--suite general`) only through PlannedPart and
the registry PART_KINDS, so a part planted under that name is planned, printed, run after the benchmarks'
episodes, written into plan.json's `parts` and read back, and summarised with no other code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from fixture_eval_bench import FixtureAdapter
from unified.eval import parts
from unified.eval.cli import main
from unified.eval.records import GeneralSection

FIXTURE = "fixture_eval_bench:FixtureAdapter"  # a benchmark in the adapter format, written for tests
CALLS: list[tuple[Any, ...]] = []


@dataclass
class RecordingPart:
    """A part that records what the runner and the summary ask of it (a fixture in the PlannedPart shape)."""

    suite: ClassVar[str] = "general"
    directory: ClassVar[str] = "general"
    model: str = ""
    name: str = "lm_eval"

    @property
    def pairs(self) -> list[str]:
        return ["thing"]

    def label(self) -> str:
        return "recording part"

    def lines(self) -> list[str]:
        return ["# plan: recording part: 1 thing to run"]

    def run(self, out, *, backend, auto, loaded) -> None:
        CALLS.append(("run", backend, auto, loaded, sorted(p.name for p in Path(out).iterdir() if p.is_dir())))

    def section(self, out) -> GeneralSection:
        CALLS.append(("section",))
        return GeneralSection(model=self.model, settings={"part": "recording"})

    def merged(self, shards, dirs, target):
        return self


@pytest.fixture
def recording_part(monkeypatch):
    CALLS.clear()
    monkeypatch.setitem(parts.PART_KINDS, "lm_eval", parts.PartKind(
        "lm_eval", "general", "general", lambda cfg, repair=True: RecordingPart(cfg.model), RecordingPart))


@pytest.mark.parametrize("asked", [["--suite", "general", "--benchmarks", FIXTURE], ["--benchmarks", f"lm_eval,{FIXTURE}"]])
def test_a_part_is_planned_run_after_the_episodes_and_summarised_through_the_seam_only(tmp_path, capsys,
                                                                                         recording_part, asked):
    import json

    from unified.eval.plan import read_plan

    out = tmp_path / "run"
    argv = [*asked, "--model", "gold", "--set", "benchmarks.fixture_echo.n=2"]
    assert main([*argv, "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "# would evaluate: fixture_echo, recording part" in printed
    assert "# plan: recording part: 1 thing to run" in printed and not CALLS and not out.exists()
    assert main([*argv, "--out", str(out)]) == 0
    runs = [c for c in CALLS if c[0] == "run"]
    # once, after the benchmark's records; --model gold: no engine, no checkpoint in memory
    assert runs == [("run", None, False, None, ["fixture_echo"])]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["general"] == {"model": "gold", "settings": {"part": "recording"}, "tasks": {}}
    assert summary["benchmarks"]["fixture_echo"]["status"] == "ok"
    assert read_plan(out).parts == [RecordingPart("gold")]  # plan.json's one list of parts, read back by name


def test_a_plan_part_of_unknown_name_is_an_error_naming_the_field(tmp_path):
    import json

    from unified.config import ConfigError
    from unified.eval.plan import read_plan

    (tmp_path / "plan.json").write_text(json.dumps({"config": {}, "parts": [{"name": "lm_evl"}]}))
    with pytest.raises(ConfigError, match=r"plan.json: parts\[0\].name: unknown part 'lm_evl'. Did you mean 'lm_eval'"):
        read_plan(tmp_path)


def test_split_suites_separates_the_parts_from_the_adapters_suites():
    assert parts.split_suites("general, ood") == (["ood"], ["lm_eval"])
    assert parts.split_suites(None) == ([], [])
    assert parts.split_benchmarks(["bfcl_v4,lm_eval", "x:Y"]) == (["bfcl_v4", "x:Y"], ["lm_eval"])


class GeneralNamedFixture(FixtureAdapter):
    """The fixture adapter under the general suite's name."""

    name = "general"


def test_a_benchmark_named_like_a_part_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    out = tmp_path / "never"
    with pytest.raises(SystemExit) as exit_info:
        main(["--benchmarks", "test_eval_parts:GeneralNamedFixture", "--model", "gold", "--out", str(out)])
    assert exit_info.value.code == 2
    assert "a benchmark named 'general' takes the name of a part of the run that is not episodes (its records' " \
           "directory OUT/general/)" in capsys.readouterr().err
    assert not out.exists()
