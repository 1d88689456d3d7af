"""The gold run the run-plan tests pin byte for byte (tests/test_eval_plan.py): fixture benchmarks in the
adapter format (tests/fixture_eval_bench.py and the small variants below, written for tests), run with
``--model gold``, and the normalisation that makes two runs of it comparable as bytes.

``python tests/gold_run_fixture.py OUT`` runs it and writes the normalised records into
``tests/fixtures/eval_gold_run/`` (how the expected files were captured, on main before the run plan)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from fixture_eval_bench import FixtureAdapter
from unified.benchmarks.contract import BenchmarkUnavailable, Task

ECHO = "fixture_eval_bench:FixtureAdapter"
DEPENDS = "fixture_eval_bench:DependentFixtureAdapter"
SKIPPING = "gold_run_fixture:SkippingGoldFixture"
PROTOCOL = "gold_run_fixture:ProtocolGoldFixture"
UNAVAILABLE = "gold_run_fixture:UnavailableGoldFixture"
FAILING = "gold_run_fixture:FailingTasksGoldFixture"
ECHO_NAME, DEPENDS_NAME = "fixture_echo", "fixture_depends"  # one name per benchmark: the class's `name` keys
FAILING_NAME = "gold_failing"                                  # its plan, its summary and its directory
EXPECTED = Path(__file__).parent / "fixtures" / "eval_gold_run"


class SkippingGoldFixture(FixtureAdapter):
    """Every task needs something this machine lacks."""

    name = "gold_skipping"

    def tasks(self, split=None, limit=None):
        return [Task(id=t.id, benchmark=self.name, payload=t.payload, skip_reason="needs ffmpeg (not installed)")
                for t in super().tasks(split, limit)]


class ProtocolGoldFixture(FixtureAdapter):
    """Vouches for its number; a protocol of 2 trials."""

    name = "gold_protocol"
    runs_default = 2

    def aggregate(self, results, *, run=None):
        return {**super().aggregate(results, run=run), "comparable": True, "not_comparable_because": []}


class UnavailableGoldFixture(FixtureAdapter):
    name = "gold_unavailable"

    def tasks(self, split=None, limit=None):
        raise BenchmarkUnavailable("its data is not here", "set GOLD_FIXTURE_DATA")


class FailingTasksGoldFixture(FixtureAdapter):
    name = "gold_failing"

    def tasks(self, split=None, limit=None):
        raise ValueError("the task file is corrupt")


def gold_argv(out: Path) -> list[str]:
    """The command (``python -m unified.eval`` arguments) of the pinned gold run."""
    return ["--model", "gold", "--max-in-flight", "3", "--out", str(out),
            "--benchmarks", ECHO, DEPENDS, SKIPPING, PROTOCOL, UNAVAILABLE, FAILING,
            "--set", f"benchmarks.{ECHO}.n=5", "--set", f"benchmarks.{ECHO}.crash=1",
            "--set", f"benchmarks.{DEPENDS}.groups=2", "--set", f"benchmarks.{SKIPPING}.n=2",
            "--set", f"benchmarks.{PROTOCOL}.n=3"]


BENCH_DIRS = ("fixture_echo", "fixture_depends", "gold_skipping", "gold_protocol")


def _without_times(value):
    """A record without what differs between two runs by design: times and durations."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items()
                if not (k.endswith("_at") or "seconds" in k or k in ("elapsed", "wall_time"))}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    if isinstance(value, str) and "Traceback (most recent call last)" in value:  # paths and line numbers
        return value.strip().splitlines()[-1]                                    # are the code's: the exception
    return value


def _canonical_jsonl(path: Path) -> str:
    """The file's lines, times dropped, sorted by (task, trial): a run's line order is its schedule's."""
    rows = [_without_times(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()]
    rows.sort(key=lambda r: (r["task_id"], r["trial"]))
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def normalised(run: Path) -> dict[str, str]:
    """File name -> normalised text of a run directory's records and summary (the pinned bytes)."""
    out = {}
    for bench in BENCH_DIRS:
        for name in ("results.jsonl", "episodes.jsonl"):
            out[f"{bench}.{name}"] = _canonical_jsonl(run / bench / name)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    summary.pop("updated_at")
    summary.pop("merged_from", None)
    for entry in summary["benchmarks"].values():
        if entry.get("runs_dir"):
            entry["runs_dir"] = Path(entry["runs_dir"]).name
        if entry.get("traceback"):  # its line numbers are the code's, not the run's: its last line
            entry["traceback"] = entry["traceback"].strip().splitlines()[-1]
    out["summary.json"] = json.dumps(summary, indent=2, sort_keys=True) + "\n"
    md = (run / "summary.md").read_text(encoding="utf-8")
    out["summary.md"] = re.sub(r"\*\*Merged from [^\n]*\n\n", "", md)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from unified.eval.cli import main

    run = Path(sys.argv[1])
    assert main(gold_argv(run)) == 0
    EXPECTED.mkdir(parents=True, exist_ok=True)
    for name, text in normalised(run).items():
        (EXPECTED / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(normalised(run))} files into {EXPECTED}")
