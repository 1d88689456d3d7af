"""A run directory belongs to one run at a time, and a run cleans up after itself.

What a user (or a scheduler that resubmits a job) MAY do: start the same command twice, kill a
run with SIGKILL and start it again, point ``--out`` anywhere.

What it may NEVER cause: two runs appending to the same files (two runs on one ``--out`` wrote
140 lines for 70 tasks and broke two BFCL tasks); a lock left by a killed run blocking the next
one; a traceback for an ``--out`` that cannot be written; a lock file left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from unified.eval.cli import main
from unified.eval.rundir import RunDirError, RunDirLock

FIXTURE = "fixture_eval_bench:FixtureAdapter"
TESTS = Path(__file__).resolve().parents[1]


def _hold_lock(out: Path) -> subprocess.Popen:
    """Another process that holds ``out`` the way a running eval does (until killed)."""
    code = ("import sys, time\nfrom unified.eval.rundir import RunDirLock\n"
            f"lock = RunDirLock({str(out)!r}).__enter__()\nprint('held', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "--marker-of-the-first-run"], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _eval(out: Path) -> list[str]:
    return ["--benchmarks", FIXTURE, "--model", "gold", "--out", str(out), "--set", f"benchmarks.{FIXTURE}.n=3"]


def test_second_run_on_the_same_out_exits_naming_the_first_and_a_killed_holder_never_blocks(tmp_path, capsys,
                                                                                            monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    out = tmp_path / "run"
    holder = _hold_lock(out)
    try:
        with pytest.raises(SystemExit) as stopped:
            main(_eval(out))
        assert stopped.value.code == 2
        message = capsys.readouterr().err
        assert f"pid {holder.pid}" in message and "--marker-of-the-first-run" in message and "started" in message
        assert "Traceback" not in message and len(message.strip().splitlines()) == 1
        assert not (out / "fixture_echo").exists()  # nothing written next to the running one
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert json.loads((out / ".lock").read_text())["pid"] == holder.pid  # the killed run's stale lock file
    assert main(_eval(out)) == 0  # ... does not block the next run
    lines = (out / "fixture_echo" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and not (out / ".lock").exists()


def test_the_lock_is_exclusive_within_one_process_too(tmp_path):
    with RunDirLock(tmp_path):
        with pytest.raises(RunDirError, match=f"pid {os.getpid()}"):
            RunDirLock(tmp_path).__enter__()
    assert not (tmp_path / ".lock").exists()
    with RunDirLock(tmp_path):  # released: taken again at once
        pass


@pytest.mark.parametrize("where", ["under_a_file", "dev_null"])
def test_an_unwritable_out_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch, where):
    monkeypatch.syspath_prepend(str(TESTS))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = blocker / "run" if where == "under_a_file" else Path("/dev/null/run")
    with pytest.raises(SystemExit) as stopped:
        main(_eval(out))
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert str(out) in err and "Not a directory" in err
