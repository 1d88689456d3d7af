"""Run readers hold what they read, not what a file claims to be (issue 55, N2).

A shard's ``results.jsonl`` made 3 GiB long with ``os.truncate`` (a hole: no disk used, and no newline in
it) once made ``read_run`` take 9.7 GB of RAM. Every reader of a run directory (``read_run`` for analysis,
``trace.load_run`` for view and --compare, --merge) streams JSONL a line at a time with a per-line cap, so
such a file is refused in one line naming the file and line, within a fixed memory budget. The readers run in
a child whose data limit is 1 GiB over what its imports took, so a regression fails with a MemoryError there
instead of taking the machine's memory; the child reports its peak RSS growth (``ru_maxrss``), asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from unified.eval.cli import main

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
DEPENDS = "fixture_eval_bench:DependentFixtureAdapter"  # a benchmark in the adapter format, written for tests
BENCH = "fixture_depends"
HOLE = 3 << 30
BUDGET = 256 << 20
"""Peak RSS growth allowed to each reader over the 3 GiB file (the per-line cap is 64 MiB)."""

CHILD = r'''
import json, resource, sys
from unified.eval.cli import main
from unified.eval.reader import read_run
from unified.trace.load import load_run

def vm_data() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData")

limit = vm_data() + (1 << 30)
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
which, shard, other, out = sys.argv[1:5]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
try:
    if which == "read_run":
        read_run(shard)
        message = "read"
    elif which == "load_run":
        load_run(shard)
        message = "read"
    else:
        status = main(["--merge", shard, other, "--out", out, "--benchmarks", sys.argv[5]])
        message = f"merge exited {status}"
except SystemExit as exc:  # the CLI's one-line usage error
    message = f"merge exited {exc.code}"
except MemoryError:
    message = "MemoryError"
except ValueError as exc:
    message = str(exc)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
print(json.dumps({"message": message, "grown": grown}))
'''


@pytest.fixture(scope="module")
def holed_shards(tmp_path_factory) -> list[Path]:
    """Two shards of one fixture command (gold answers); shard 0's results.jsonl then grows a 3 GiB hole."""
    base = tmp_path_factory.mktemp("holed")
    sys.path.insert(0, str(TESTS))
    try:
        dirs = [base / f"shard-{i}" for i in range(2)]
        for i, d in enumerate(dirs):
            assert main(["--model", "gold", "--benchmarks", DEPENDS, "--set", f"benchmarks.{DEPENDS}.groups=2",
                         "--out", str(d), "--shard", f"{i}/2"]) == 0
    finally:
        sys.path.remove(str(TESTS))
    results = dirs[0] / BENCH / "results.jsonl"
    os.truncate(results, results.stat().st_size + HOLE)
    assert os.stat(results).st_blocks * 512 < 1 << 20  # a hole: no disk used
    return dirs


@pytest.mark.parametrize("reader", ["read_run", "load_run", "merge"])
def test_a_sparse_multi_gib_results_file_is_refused_in_one_line_within_a_fixed_memory_budget(
        holed_shards, tmp_path, capfd, reader):
    results = holed_shards[0] / BENCH / "results.jsonl"
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, reader, str(holed_shards[0]), str(holed_shards[1]),
                               str(tmp_path / "merged"), DEPENDS], cwd=REPO, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{TESTS}"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{reader} did not finish with a 3 GiB hole in {results}")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{reader}: peak RSS grew {report['grown'] / (1 << 20):.0f} MiB over a {HOLE >> 30} GiB hole")
    assert report["grown"] < BUDGET, report
    if reader == "merge":
        assert report["message"] == "merge exited 2"
        lines = [line for line in done.stderr.splitlines() if str(results) in line]
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        message = lines[0]
    else:
        message = report["message"]
    assert str(results) in message and "\n" not in message
    assert "bytes" in message and ("a line of more than" in message or "no newline" in message), message
