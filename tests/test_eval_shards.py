"""``--shard I/N`` and ``--merge``: the pairs a shard runs, resuming a shard, merged run == unsharded run."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from unified.benchmarks.contract import Task
from unified.config import ConfigError
from unified.eval.cli import main
from unified.eval.shards import Shard, dependency_groups, parse_shard, shard_pairs

TESTS = Path(__file__).parent
ECHO = "fixture_eval_bench:FixtureAdapter"  # benchmarks in the adapter format, written for tests
DEPENDS = "fixture_eval_bench:DependentFixtureAdapter"


@pytest.fixture(autouse=True)
def _fixture_path(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def records(run: Path, bench: str) -> dict:
    """(task, trial) -> (result, episode without its timestamps) of a run directory."""
    episodes = {}
    for e in lines(run / bench / "episodes.jsonl"):
        e = {k: v for k, v in e.items() if k not in ("started_at", "finished_at", "wall_seconds")}
        for step in e.get("steps", []):
            for key in [k for k in step if "seconds" in k or k.endswith("_at")]:
                step.pop(key)
        episodes[(e["task_id"], e["trial"])] = e
    out = {}
    for r in lines(run / bench / "results.jsonl"):
        key = (r["task_id"], r["trial"])
        assert key not in out, f"{key} recorded twice in {run}"
        out[key] = (r, episodes.get(key))
    return out


def comparable_summary(run: Path) -> dict:
    """summary.json without what differs by design: the time, the run directory, a merge's own record."""
    summary = json.loads((run / "summary.json").read_text())
    summary.pop("updated_at")
    summary.pop("merged_from", None)
    for entry in summary["benchmarks"].values():
        entry["runs_dir"] = Path(entry["runs_dir"]).name
    return summary


def summary_md_without_merge_note(run: Path) -> str:
    """summary.md less the paragraph that says it is a merge (asserted on its own)."""
    text = (run / "summary.md").read_text()
    assert text.count("**Merged from ") == 1
    return re.sub(r"\*\*Merged from [^\n]*\n\n", "", text)


def work_files(run: Path, bench: str) -> dict[str, bytes]:
    root = run / bench / "work"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def eval_cli(*args: str) -> int:
    return main(["--model", "gold", "--max-in-flight", "4", *args])


def test_shard_spec_is_checked():
    assert parse_shard("2/4") == Shard(2, 4) and parse_shard(None) is None
    for bad in ("4/4", "-1/4", "1/0", "1", "a/b"):
        with pytest.raises(ConfigError, match="shard"):
            parse_shard(bad)


def test_shards_partition_the_pairs_and_keep_them_under_limit():
    tasks = [Task(id=f"t{i}", benchmark="b") for i in range(40)]
    runs = 3
    everything = shard_pairs("b", tasks, runs, None)
    parts = [shard_pairs("b", tasks, runs, Shard(i, 4)) for i in range(4)]
    assert set().union(*parts) == everything and sum(map(len, parts)) == len(everything)  # disjoint, complete
    assert all(parts)  # 120 pairs: no shard left empty
    for i in range(4):  # a pair keeps its shard when --limit cuts the listing (and on every rerun)
        assert shard_pairs("b", tasks[:7], runs, Shard(i, 4)) == {p for p in parts[i] if int(p[0][1:]) < 7}
        assert shard_pairs("b", list(reversed(tasks)), runs, Shard(i, 4)) == parts[i]


def test_a_dependency_group_stays_in_one_shard():
    sys.path.insert(0, str(TESTS))
    from fixture_eval_bench import DependentFixtureAdapter

    tasks = DependentFixtureAdapter(groups=5).tasks()
    groups = dependency_groups(tasks)
    assert groups["chain_3"] == groups["question_3_1"] == groups["setup_3"] == "setup_3" and groups["echo_0"] is None
    for i in range(3):
        part = shard_pairs("fixture_depends", tasks, 2, Shard(i, 3))
        for g in range(5):
            members = {(t, k) for t in (f"setup_{g}", f"question_{g}_0", f"question_{g}_1", f"chain_{g}")
                       for k in range(2)}
            assert members <= part or not members & part


def test_merged_shards_equal_the_unsharded_run(tmp_path, capsys):
    common = ["--benchmarks", ECHO, DEPENDS, "--runs", "2", "--set", f"benchmarks.{ECHO}.n=9",
              "--set", f"benchmarks.{DEPENDS}.groups=4"]
    assert eval_cli(*common, "--out", str(tmp_path / "whole")) == 0
    shards = [tmp_path / f"shard-{i}" for i in range(3)]
    for i, d in enumerate(shards):
        assert eval_cli(*common, "--out", str(d), "--shard", f"{i}/3") == 0
    sizes = [len(records(d, "fixture_echo")) + len(records(d, "fixture_depends")) for d in shards]
    assert all(sizes) and sum(sizes) == 2 * (9 + 4 * 4 + 6)

    # each shard's summary says it is one, with its pairs and the command that merges them
    merge_cmd = f"python -m unified.eval --merge {' '.join(map(str, shards))} --out {tmp_path}"
    for i, (d, size) in enumerate(zip(shards, sizes)):
        summary = json.loads((d / "summary.json").read_text())
        assert summary["shard"] == {"shard": f"{i}/3", "index": i, "count": 3, "pairs": size, "pairs_total": 62,
                                    "merge_command": merge_cmd, "note": f"not a whole run; merge with `{merge_cmd}`"}
        for name, entry in summary["benchmarks"].items():
            total = 2 * 9 if name == "fixture_echo" else 2 * (4 * 4 + 6)  # setup tasks (not scored) are pairs too
            pairs = len(records(d, name))
            assert entry["shard"] == {"shard": f"{i}/3", "pairs": pairs, "pairs_total": total}
            assert not entry["comparable"]
            assert f"shard {i}/3: {pairs} of {total} (task, trial) pairs, not a whole run" \
                in entry["not_comparable_because"]
        md = (d / "summary.md").read_text()
        assert f"**Shard {i}/3: not a whole run.** It holds {size} of 62 (task, trial) pairs" in md
        assert f"Merge the 3 shards with `{merge_cmd}`" in md
    assert "shard" not in json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert "Shard" not in (tmp_path / "whole" / "summary.md").read_text()

    # a shard killed half-way resumes on its own: cut its records, rerun the same command
    cut = shards[1] / "fixture_echo" / "results.jsonl"
    kept = cut.read_text().splitlines()
    cut.write_text(kept[0] + "\n" + kept[1][: len(kept[1]) // 2])  # one whole line and a torn one
    capsys.readouterr()
    assert eval_cli(*common, "--out", str(shards[1]), "--shard", "1/3") == 0
    assert f"{len(kept) - 1} episodes to run ({1} already recorded)" in capsys.readouterr().err

    assert main(["--merge", *map(str, shards), "--out", str(tmp_path / "merged"), "--benchmarks", ECHO, DEPENDS]) == 0
    for bench in ("fixture_echo", "fixture_depends"):
        whole, merged = records(tmp_path / "whole", bench), records(tmp_path / "merged", bench)
        assert merged == whole and all(r["passed"] for r, _ in whole.values())  # gold: every pair passes
    assert comparable_summary(tmp_path / "merged") == comparable_summary(tmp_path / "whole")
    assert summary_md_without_merge_note(tmp_path / "merged") == (tmp_path / "whole" / "summary.md").read_text()
    # the shards' work dirs (here: the fixture's record of finished dependencies) come into the merge
    whole_work = work_files(tmp_path / "whole", "fixture_depends")
    assert len(whole_work) == 4 * 4 + 6 and work_files(tmp_path / "merged", "fixture_depends") == whole_work
    merged_from = json.loads((tmp_path / "merged" / "summary.json").read_text())["merged_from"]
    assert merged_from["shards"] == [{"dir": str(d), "shard": f"{i}/3"} for i, d in enumerate(shards)]
    assert merged_from["work"] == {"fixture_depends": {"dir": str(tmp_path / "merged" / "fixture_depends" / "work"),
                                                       "files": 22}}
    assert merged_from["work_conflicts"] == []
    md = (tmp_path / "merged" / "summary.md").read_text()
    assert f"**Merged from 3 shards** (`--merge`): `{shards[0]}` (0/3)" in md
    assert f"fixture_depends 22 into `{tmp_path / 'merged' / 'fixture_depends' / 'work'}`" in md


def test_merge_keeps_one_copy_of_a_work_file_two_shards_hold_and_lists_the_other(tmp_path):
    common = ["--benchmarks", DEPENDS, "--set", f"benchmarks.{DEPENDS}.groups=3"]
    shards = [tmp_path / f"s{i}" for i in range(2)]
    for i, d in enumerate(shards):
        assert eval_cli(*common, "--out", str(d), "--shard", f"{i}/2") == 0
    for i, d in reversed(list(enumerate(shards))):  # shard 1 written first: the order on disk does not decide
        work = d / "fixture_depends" / "work"
        (work / "notes").mkdir(parents=True, exist_ok=True)
        (work / "notes" / "same.txt").write_text("same bytes")
        (work / "notes" / "state.json").write_text(f'{{"from": {i}}}')
    merged = tmp_path / "m"
    assert main(["--merge", str(shards[1]), str(shards[0]), "--out", str(merged), "--benchmarks", DEPENDS]) == 0
    work = merged / "fixture_depends" / "work"
    assert (work / "notes" / "state.json").read_text() == '{"from": 0}' and (work / "notes" / "same.txt").exists()
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["merged_from"]["work_conflicts"] == [{"path": "fixture_depends/work/notes/state.json",
                                                         "kept": str(shards[0]), "other": str(shards[1])}]
    assert "1 work file(s) differed between shards" in (merged / "summary.md").read_text()
    # merging again replaces the work dir too (a file gone from the shards is gone from the merge)
    (shards[1] / "fixture_depends" / "work" / "notes" / "state.json").unlink()
    (shards[0] / "fixture_depends" / "work" / "notes" / "state.json").unlink()
    assert main(["--merge", *map(str, shards), "--out", str(merged), "--benchmarks", DEPENDS]) == 0
    assert not (work / "notes" / "state.json").exists()
    assert json.loads((merged / "summary.json").read_text())["merged_from"]["work_conflicts"] == []


def test_merge_refuses_what_is_not_the_shards_of_one_command(tmp_path, capsys):
    common = ["--benchmarks", ECHO, "--set", f"benchmarks.{ECHO}.n=12"]
    shards = [tmp_path / f"s{i}" for i in range(2)]
    for i, d in enumerate(shards):
        assert eval_cli(*common, "--out", str(d), "--shard", f"{i}/2") == 0

    def merge_error(*dirs: Path) -> str:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(["--merge", *map(str, dirs), "--out", str(tmp_path / "m")])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err  # one line, no traceback
        return err[0]

    assert "1 of 2 shards not given: 1/2" in merge_error(shards[0])
    # a shard that did not finish: its missing pairs name it
    path = shards[1] / "fixture_echo" / "results.jsonl"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    assert f"shard(s) 1/2 ({shards[1]}) did not finish" in merge_error(*shards)
    other = tmp_path / "other"
    assert eval_cli("--benchmarks", ECHO, "--set", f"benchmarks.{ECHO}.n=5", "--out", str(other),
                    "--shard", "1/2") == 0
    assert "not a shard of the same command" in merge_error(shards[0], other)
    assert "differs in: benchmark_config" in merge_error(shards[0], other)


@pytest.mark.slow
def test_bfcl_memory_questions_stay_with_their_conversations(tmp_path):
    pytest.importorskip("bfcl_eval")
    common = ["--benchmarks", "bfcl_v4", "--limit", "3", "--set", "benchmarks.bfcl_v4.categories=memory_kv,simple_python",
              "--set", "benchmarks.bfcl_v4.limit_order=per_category"]
    assert eval_cli(*common, "--out", str(tmp_path / "whole")) == 0
    shards = [tmp_path / f"shard-{i}" for i in range(2)]
    for i, d in enumerate(shards):
        assert eval_cli(*common, "--out", str(d), "--shard", f"{i}/2") == 0
    assert main(["--merge", *map(str, shards), "--out", str(tmp_path / "merged")]) == 0
    whole = records(tmp_path / "whole", "bfcl_v4")
    assert records(tmp_path / "merged", "bfcl_v4") == whole
    assert all(r["passed"] for r, _ in whole.values() if not r["details"].get("prereq"))
    assert comparable_summary(tmp_path / "merged") == comparable_summary(tmp_path / "whole")
    # BFCL's memory snapshots (the work dir) of every shard are in the merged run, under the same names
    whole_work = work_files(tmp_path / "whole", "bfcl_v4")
    assert any("memory_snapshot" in name for name in whole_work)
    assert work_files(tmp_path / "merged", "bfcl_v4").keys() == whole_work.keys()


def test_bad_shard_flags_are_usage_errors(tmp_path, capsys):
    for argv, message in ((["--benchmarks", ECHO, "--shard", "4/4"], "--shard: expected I/N with 0 <= I < N"),
                          (["--merge", str(tmp_path)], "--merge needs --out")):
        with pytest.raises(SystemExit) as exc:
            eval_cli(*argv, *(["--out", str(tmp_path / "x")] if "--merge" not in argv else []))
        assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # refused before anything was written
