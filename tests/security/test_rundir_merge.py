"""``--merge`` writes only inside ``--out``, copies only regular files, and keeps holes holes.

The shards' ``<benchmark>/work/`` trees hold adapter state, and files sandboxed episodes left
there: the merge treats them as untrusted. What a shard MAY hold: any tree of directories and
regular files, sparse ones too. What it may NEVER cause:

- a write outside ``--out``: shard 0's ``work/d`` a link to a directory elsewhere, shard 1's
  ``work/d/PWNED.txt`` a file (the merge copied the link, then wrote the file through it);
- a merged run whose links point out of it, or a FIFO that blocks (or breaks) the merge: links
  and special files are left out, each named in ``shards.json``, ``summary.md`` and on stderr;
- a sparse file made dense (a 512 MiB file of holes cost 512 MiB of disk in the merge), or a
  copy past the merge's byte budget (such a file stays in its shard, listed like the others).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from unified.eval.cli import main

TESTS = Path(__file__).resolve().parents[1]
DEPENDS = "fixture_eval_bench:DependentFixtureAdapter"  # a benchmark in the adapter format, written for tests
BENCH = "fixture_depends"


@pytest.fixture
def shards(tmp_path, monkeypatch) -> list[Path]:
    """The two shard run directories of one fixture command (gold answers)."""
    monkeypatch.syspath_prepend(str(TESTS))
    dirs = [tmp_path / f"shard-{i}" for i in range(2)]
    for i, d in enumerate(dirs):
        assert main(["--model", "gold", "--benchmarks", DEPENDS, "--set", f"benchmarks.{DEPENDS}.groups=2",
                     "--out", str(d), "--shard", f"{i}/2"]) == 0
    return dirs


def _work(shard: Path) -> Path:
    work = shard / BENCH / "work"
    work.mkdir(parents=True, exist_ok=True)
    return work


def _merge(shards: list[Path], out: Path) -> int:
    return main(["--merge", *map(str, shards), "--out", str(out), "--benchmarks", DEPENDS])


def test_a_link_in_one_shard_never_carries_another_shards_file_out_of_the_merge(shards, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, _work(shards[0]) / "d")
    os.symlink("/etc/hostname", _work(shards[0]) / "host-file")
    (_work(shards[1]) / "d").mkdir()
    (_work(shards[1]) / "d" / "PWNED.txt").write_text("written through the link")
    merged = tmp_path / "merged"
    assert _merge(shards, merged) == 0
    assert list(outside.iterdir()) == []  # nothing written outside --out
    work = merged / BENCH / "work"
    assert (work / "d").is_dir() and not (work / "d").is_symlink()
    assert (work / "d" / "PWNED.txt").read_text() == "written through the link"  # a plain file of shard 1: kept
    assert not os.path.lexists(work / "host-file")
    links = [p for p in work.rglob("*") if p.is_symlink()]
    assert links == []
    skipped = json.loads((merged / "shards.json").read_text())["work_skipped"]
    assert {(s["path"], s["shard"]) for s in skipped} == {(f"{BENCH}/work/d", str(shards[0])),
                                                           (f"{BENCH}/work/host-file", str(shards[0]))}
    assert all("symbolic link" in s["why"] for s in skipped)
    assert "2 work entries were left out" in (merged / "summary.md").read_text()
    err = capsys.readouterr().err
    assert f"{BENCH}/work/d" in err and "left out" in err


def test_fifos_and_sockets_in_a_shard_are_left_out_and_named(shards, tmp_path, capsys):
    import socket

    os.mkfifo(_work(shards[0]) / "pipe")
    here = os.getcwd()
    os.chdir(_work(shards[1]))  # a short relative name: a Unix socket path has a 108-byte limit
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind("sock")
    finally:
        os.chdir(here)
    try:
        merged = tmp_path / "merged"
        assert _merge(shards, merged) == 0
    finally:
        server.close()
    work = merged / BENCH / "work"
    assert not os.path.lexists(work / "pipe") and not os.path.lexists(work / "sock")
    skipped = {s["path"]: s["why"] for s in json.loads((merged / "shards.json").read_text())["work_skipped"]}
    assert "FIFO" in skipped[f"{BENCH}/work/pipe"] and "socket" in skipped[f"{BENCH}/work/sock"]
    assert f"{BENCH}/work/pipe" in capsys.readouterr().err


MIB = 1 << 20


def test_a_sparse_work_file_stays_sparse_in_the_merge(shards, tmp_path):
    sparse = _work(shards[0]) / "sparse.bin"
    with open(sparse, "wb") as fh:
        fh.write(b"head")
        fh.seek(512 * MIB - 4)
        fh.write(b"tail")
    if os.stat(sparse).st_blocks * 512 > 4 * MIB:
        pytest.skip(f"{tmp_path} does not keep holes (its filesystem writes sparse files dense)")
    merged = tmp_path / "merged"
    assert _merge(shards, merged) == 0
    copy = merged / BENCH / "work" / "sparse.bin"
    info = os.stat(copy)
    assert info.st_size == 512 * MIB
    assert info.st_blocks * 512 <= 4 * MIB, f"the merge wrote {info.st_blocks * 512} bytes of disk for holes"
    with open(copy, "rb") as fh:
        assert fh.read(4) == b"head"
        fh.seek(512 * MIB - 4)
        assert fh.read() == b"tail"


def test_work_files_past_the_merge_budget_stay_in_their_shard_and_are_listed(shards, tmp_path, monkeypatch):
    from unified.eval import merge as merge_module

    monkeypatch.setattr(merge_module, "MERGE_WORK_BUDGET_BYTES", 3 * MIB)
    (_work(shards[0]) / "a.bin").write_bytes(os.urandom(2 * MIB))
    (_work(shards[1]) / "b.bin").write_bytes(os.urandom(2 * MIB))  # 4 MiB in all: b is over the budget
    merged = tmp_path / "merged"
    assert _merge(shards, merged) == 0
    work = merged / BENCH / "work"
    assert (work / "a.bin").stat().st_size == 2 * MIB and not os.path.lexists(work / "b.bin")
    skipped = json.loads((merged / "shards.json").read_text())["work_skipped"]
    assert [(s["path"], s["shard"]) for s in skipped] == [(f"{BENCH}/work/b.bin", str(shards[1]))]
    assert "budget" in skipped[0]["why"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.parametrize("shape", ["adapter_path", "version_2_name"])
def test_a_shard_plan_naming_code_never_runs_it_in_the_merge(shards, tmp_path, capsys, shape):
    """Issue 42, R5: a shard's plan.json naming ``os:system`` with a config ``{"command": ...}`` ran the
    command as the merging user (the summary loaded the adapter the plan named). A run directory never
    decides what code runs: the entry is a skip saying how to give the adapter, and nothing runs. Both
    places a plan can name code: a benchmark's ``adapter_path`` (plan version 3, one name per benchmark), and
    the benchmark's name itself in a version-2 plan (read back under its directory's name)."""
    marker = tmp_path / "PWNED"
    for shard in shards:
        path = shard / "plan.json"
        plan = json.loads(path.read_text().replace(DEPENDS, "os:system"))
        planned = plan["benchmarks"][0]
        assert planned["name"] == BENCH and planned["adapter_path"] == "os:system"
        key = BENCH
        if shape == "version_2_name":
            plan["version"], planned["name"], key = 2, "os:system", "os:system"
            del planned["adapter_path"]
        plan["config"]["benchmark_config"] = {key: {"command": f"touch {marker}"}}
        path.write_text(json.dumps(plan))
    merged = tmp_path / "merged"
    assert main(["--merge", *map(str, shards), "--out", str(merged)]) == 0
    assert not marker.exists()
    entry = json.loads((merged / "summary.json").read_text())["benchmarks"][BENCH]
    # summarised from the records alone (the adapter keeps the SDK's mean), saying that no code was loaded
    assert entry["status"] == "ok" and entry["aggregate"]["score"] == 100.0
    assert "never decides what code runs" in entry["aggregate"]["computed_without_adapter"]
    assert "--benchmarks os:system" in entry["aggregate"]["computed_without_adapter"]


def test_hard_links_are_copied_once_and_sparse_twins_compare_without_reading_holes(shards, tmp_path, monkeypatch):
    """Issue 42, R9: ``--merge`` copied each hard link separately (65 MB -> 1.1 GB) and compared two
    same-size sparse files byte by byte (16 GiB of holes: 95 s). Links of one file now cost its bytes
    once (they stay links), and files the merge already holds compare over their data ranges only."""
    from unified.eval import merge as merge_module

    monkeypatch.setattr(merge_module, "MERGE_WORK_BUDGET_BYTES", 8 * MIB)  # 20 separate copies would not fit
    first = _work(shards[0]) / "blob.bin"
    first.write_bytes(os.urandom(2 * MIB))
    for i in range(20):
        os.link(first, _work(shards[0]) / f"link-{i:02d}.bin")
    for shard in shards:  # both shards hold a 16 GiB file of holes with the same few bytes of data
        with open(_work(shard) / "huge.bin", "wb") as fh:
            fh.write(b"state")
            fh.truncate(16 << 30)
    if os.stat(_work(shards[0]) / "huge.bin").st_blocks * 512 > 4 * MIB:
        pytest.skip(f"{tmp_path} does not keep holes")
    merged = tmp_path / "merged"
    assert _merge(shards, merged) == 0
    work = merged / BENCH / "work"
    copies = [work / "blob.bin", *sorted(work.glob("link-*.bin"))]
    assert len(copies) == 21 and len({os.stat(c).st_ino for c in copies}) == 1  # one file, 21 names
    assert os.stat(work / "blob.bin").st_nlink == 21 and (work / "link-07.bin").read_bytes() == first.read_bytes()
    shards_json = json.loads((merged / "shards.json").read_text())
    assert shards_json["work_skipped"] == [] and shards_json["work_conflicts"] == []  # equal, not "differ"
    assert os.stat(work / "huge.bin").st_size == 16 << 30
