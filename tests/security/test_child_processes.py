"""What the harness starts dies with it, and what it writes for itself does not outlive it.

What may happen to a run: it is killed with SIGKILL (out of memory, a scheduler's time limit,
a user's ``kill -9``), with no chance to stop what it started.

What may NEVER follow: a local judge/user server (gigabytes with a real model) that outlives
its parent and keeps listening; server logs or a BFCL project root left in ``/tmp`` by every
start or run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody has reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pid: int, limit_s: float = 30.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _env(tmpdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "BFCL_PROJECT_ROOT"}
    return {**env, "TMPDIR": str(tmpdir), "PYTHONPATH": f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"}


@pytest.mark.slow
def _session(sid: int) -> list[int]:
    """Pids of the live (non-zombie) processes whose session id is ``sid``."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(stat.parent.name))
    return pids


def _wait_session_empty(sid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while _session(sid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_local_server_dies_with_its_parent_killed_by_sigkill(tiny_checkpoint, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    parent_code = (
        "import sys, time\nfrom unified.inference.server import LocalOpenAIServer\n"
        f"server = LocalOpenAIServer({str(tiny_checkpoint)!r}, max_new_tokens=4).__enter__()\n"
        "print(server.process.pid, server.port, flush=True)\ntime.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True,
                              env=_env(tmpdir), start_new_session=True)
    server_pid = None
    try:
        server_pid, _port = map(int, parent.stdout.readline().split())
        assert _alive(server_pid)
        os.kill(parent.pid, signal.SIGKILL)  # no __exit__, no atexit: the server is on its own now
        parent.wait(timeout=30)
        assert _wait_gone(server_pid), f"the local server {server_pid} outlived its parent"
        # nothing of the server lives on (a forked child would keep its port): no process is left in the
        # parent's session. (Connecting to the port proved nothing on a busy machine: another process
        # may be given the freed port.)
        assert _wait_session_empty(parent.pid), f"processes of the server's session outlived it: {_session(parent.pid)}"
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
        if server_pid and _alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)
    assert list(tmpdir.iterdir()) == []  # its log left nothing in TMPDIR, even after the kill


@pytest.mark.slow
def test_server_log_goes_where_asked_and_a_temporary_one_is_removed(tiny_checkpoint, tmp_path, monkeypatch):
    import tempfile

    from unified.inference.server import LocalOpenAIServer

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    with LocalOpenAIServer(str(tiny_checkpoint), max_new_tokens=4, log_path=tmp_path / "run" / "judge.log"):
        pass
    assert "local server" in (tmp_path / "run" / "judge.log").read_text()
    with LocalOpenAIServer(str(tiny_checkpoint), max_new_tokens=4) as server:
        assert "local server" in server.log_tail()
    assert list(tmpdir.iterdir()) == []


def test_a_server_that_cannot_start_reports_its_log(tmp_path):
    from unified.inference.server import LocalOpenAIServer

    with pytest.raises(RuntimeError, match="exited with") as failed:
        with LocalOpenAIServer(str(tmp_path / "no-such-checkpoint"), ready_timeout_s=120):
            pass
    assert "no-such-checkpoint" in str(failed.value)


@pytest.mark.slow
def test_a_bfcl_run_leaves_nothing_in_tmp(tmp_path):
    pytest.importorskip("bfcl_eval")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    done = subprocess.run([sys.executable, "-m", "unified.eval", "--benchmarks", "bfcl_v4", "--limit", "2",
                           "--model", "gold", "--out", str(tmp_path / "run")], env=_env(tmpdir),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list(tmpdir.iterdir()) == []
