"""The run fingerprint: settings recorded in a run's identity and plan, and ``--compare`` naming every
difference besides the weights and marking the delta NOT COMPARABLE (real runs of the gold replayer on a
benchmark in the adapter contract's format, tests/fixture_eval_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path

from unified.eval.cli import main
from unified.eval.fingerprint import run_fingerprint, setting_differences
from unified.eval.plan import read_plan

FIXTURE = "fixture_eval_bench:FixtureAdapter"
ECHO = "fixture_echo"  # its one name (the class's `name`): the key of its fingerprint


def _gold(out: Path, *extra: str) -> list[str]:
    return ["--benchmarks", FIXTURE, "--model", "gold", "--out", str(out), "--set", f"benchmarks.{ECHO}.n=3",
            *extra]


def test_the_fingerprint_records_sampling_budgets_trials_and_data(tmp_path, capsys):
    assert main(_gold(tmp_path / "a", "--max-new-tokens", "48", "--no-thinking", "--max-turns", "4")) == 0
    fp = run_fingerprint(tmp_path / "a")
    assert fp["sampling.max_new_tokens"] == 48 and fp["sampling.thinking"] is False
    assert fp["limits.max_turns"] == 4 and fp["backend"] == "gold" and fp["prompting"] == "act"
    assert {"sampling.temperature", "sampling.top_p", "limit", "runs"} <= set(fp)
    assert fp[f"{ECHO}.trials"] == 1 and fp[f"{ECHO}.tasks"] == 3 and f"{ECHO}.limits.max_turns" in fp
    plan = read_plan(tmp_path / "a")
    digest = plan.benchmarks[0].data_digest
    assert digest and len(digest) == 16 and fp[f"{ECHO}.data"] == digest
    assert "model.weights" not in fp and "model" not in fp  # what a comparison compares


def test_compare_names_every_setting_that_differs_and_marks_the_delta(tmp_path, capsys):
    assert main(_gold(tmp_path / "a", "--max-new-tokens", "512", "--thinking", "--max-turns", "40")) == 0
    assert main(_gold(tmp_path / "b", "--max-new-tokens", "48", "--no-thinking", "--max-turns", "4")) == 0
    assert main(_gold(tmp_path / "c", "--max-new-tokens", "512", "--thinking", "--max-turns", "40")) == 0
    capsys.readouterr()
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NOT COMPARABLE: A and B ran with ") and "different setting(s) besides the weights" in out
    row = next(line for line in out.splitlines() if line.startswith("| ") and ECHO in line)
    assert row.rstrip().endswith("+0.00 NOT COMPARABLE |"), row
    assert "- sampling.max_new_tokens: A 512 vs B 48" in out and "- sampling.thinking: A true vs B false" in out
    assert f"- {ECHO}.limits.max_turns: A 40 vs B 4" in out  # the budget its episodes ran under
    assert "- limits.max_turns" not in out  # the run-wide flag is compared where it acts (a protocol may override it)
    # the same settings: no difference named, the delta is plain
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "c")]) == 0
    same = capsys.readouterr().out
    assert "NOT COMPARABLE" not in same and "Settings that differ" not in same


def test_other_data_and_other_trials_are_differences_of_that_benchmark(tmp_path):
    assert main(_gold(tmp_path / "a")) == 0
    assert main(["--benchmarks", FIXTURE, "--model", "gold", "--out", str(tmp_path / "b"), "--runs", "2",
                 "--set", f"benchmarks.{ECHO}.n=2"]) == 0
    diffs = {d.key: d for d in setting_differences(tmp_path / "a", tmp_path / "b", [ECHO])}
    assert "runs" not in diffs  # compared where it acts: the benchmark's trials
    assert diffs[f"{ECHO}.trials"].benchmark == ECHO and (diffs[f"{ECHO}.trials"].a, diffs[f"{ECHO}.trials"].b) == (1, 2)
    assert diffs[f"{ECHO}.data"].benchmark == ECHO and diffs[f"{ECHO}.data"].a != diffs[f"{ECHO}.data"].b
    assert diffs[f"{ECHO}.settings.n"].line() == f"{ECHO}.settings.n: A 3 vs B 2"


def test_an_old_run_without_records_gives_no_fingerprint(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "summary.json").write_text(json.dumps({"benchmarks": {}}))
    assert run_fingerprint(tmp_path / "old") == {}
