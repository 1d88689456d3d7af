"""The seam of the parts of a run that are not episodes (unified.eval.parts): the plan, the runner and the
summary reach a part (today lm-eval's general suite) only through PlannedPart, so a part planted under the
suite's name is planned, printed, run after the benchmarks' episodes and summarised with no other code."""

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
    model: str = ""

    def label(self) -> str:
        return "recording part"

    def lines(self) -> list[str]:
        return ["# plan: recording part: 1 thing to run"]

    def run(self, out, *, backend, auto, loaded) -> None:
        CALLS.append(("run", backend, auto, loaded, sorted(p.name for p in Path(out).iterdir() if p.is_dir())))

    def section(self, out) -> GeneralSection:
        CALLS.append(("section",))
        return GeneralSection(model=self.model, settings={"part": "recording"})


@pytest.fixture
def recording_part(monkeypatch):
    CALLS.clear()
    monkeypatch.setitem(parts.PART_SUITES, "general",
                        lambda cfg, repair=True: RecordingPart(cfg.model) if "general" in parts.split_suites(cfg.suite)[1]
                        else None)


def test_a_part_is_planned_run_after_the_episodes_and_summarised_through_the_seam_only(tmp_path, capsys,
                                                                                         recording_part):
    import json

    out = tmp_path / "run"
    argv = ["--suite", "general", "--benchmarks", FIXTURE, "--model", "gold", "--set", "benchmarks.fixture_echo.n=2"]
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


def test_split_suites_separates_the_parts_from_the_adapters_suites():
    assert parts.split_suites("general, ood") == (["ood"], ["general"])
    assert parts.split_suites(None) == ([], [])


class GeneralNamedFixture(FixtureAdapter):
    """The fixture adapter under the general suite's name."""

    name = "general"


def test_a_benchmark_named_like_a_part_is_refused_before_anything_is_written(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    out = tmp_path / "never"
    with pytest.raises(SystemExit) as exit_info:
        main(["--benchmarks", "test_eval_parts:GeneralNamedFixture", "--model", "gold", "--out", str(out)])
    assert exit_info.value.code == 2
    assert "a benchmark named 'general' is the general suite's name (its records' directory OUT/general/)" in \
        capsys.readouterr().err
    assert not out.exists()
