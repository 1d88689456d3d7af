"""unified.sandbox: escapes fail, limits bind, runaway commands die without leftovers."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from unified.sandbox import Sandbox, SandboxConfig, SandboxError, throwaway_sandbox
from _process_support import LoopbackListener, processes_with
from _requires import needs_bwrap

pytestmark = needs_bwrap



def test_runs_in_workspace_and_files_reach_the_host(tmp_path):
    ws = tmp_path / "ws"
    with Sandbox(SandboxConfig(workspace=ws)) as box:
        res = box.run("echo hello > note.txt && cat note.txt && pwd && id -un")
        assert res.exit_code == 0 and not res.timed_out
        assert res.stdout.split() == ["hello", "/workspace", "agent"]
        assert res.backend == "bwrap"
        assert box.run(["cat"], stdin="piped").stdout == "piped"
        assert box.run("exit 3").exit_code == 3
    assert (ws / "note.txt").read_text() == "hello\n"


def test_writes_outside_the_workspace_fail(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.chmod(tmp_path, 0o755)
    with Sandbox(SandboxConfig(workspace=tmp_path / "ws", readonly_binds=[str(outside)])) as box:
        for target in ("/etc/evil", "/usr/evil", "/evil", f"{outside}/evil"):
            res = box.run(f"echo started; echo x > {target}")
            assert res.stdout == "started\n", res.stderr  # the sandbox ran; only the write failed
            assert res.exit_code != 0, target
            assert "Read-only" in res.stderr or "Permission denied" in res.stderr, res.stderr
        assert box.run(f"ls {outside}").exit_code == 0  # visible, read-only
        # /tmp is private: written inside, never seen on the host
        name = f"unified-sbx-probe-{uuid.uuid4().hex}"
        assert box.run(f"echo x > /tmp/{name} && cat /tmp/{name}").stdout == "x\n"
        assert not Path("/tmp", name).exists()
        # host directories that were not bound are absent
        assert box.run(f"ls {Path(__file__).parent}").exit_code != 0
    assert not (outside / "evil").exists()


def test_host_environment_is_not_inherited(tmp_path, monkeypatch):
    monkeypatch.setenv("UNIFIED_SECRET_PROBE", "s3cret")
    with Sandbox(SandboxConfig(workspace=tmp_path / "ws", env={"GIVEN": "yes"})) as box:
        out = box.run("env").stdout
    assert "s3cret" not in out and "GIVEN=yes" in out


_CONNECT = ("python3 -c 'import socket,sys; s=socket.create_connection((\"127.0.0.1\", int(sys.argv[1])), 3); "
            "print(\"connected\")' {port}")


def test_network_is_unreachable_unless_enabled(tmp_path):
    server = LoopbackListener()
    with Sandbox(SandboxConfig(workspace=tmp_path / "a")) as box:
        res = box.run(_CONNECT.format(port=server.port))
        assert res.exit_code != 0 and "connected" not in res.stdout
        outbound = box.run("python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 3)'")
        assert outbound.exit_code != 0
        assert box.run("cat /proc/net/dev").stdout.count(":") == 1  # only lo
    assert server.hits == 0
    with Sandbox(SandboxConfig(workspace=tmp_path / "b", network=True)) as box:
        res = box.run(_CONNECT.format(port=server.port))
        assert res.stdout.strip() == "connected", res.stderr
    assert server.hits == 1
    server.sock.close()


def test_runaway_command_is_killed_at_its_limit_and_leaves_nothing(tmp_path):
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}"
    script = (f"sleep {marker} & (setsid sleep {marker} &) ; nohup sleep {marker} >/dev/null 2>&1 & "
              "while :; do :; done")
    with Sandbox(SandboxConfig(workspace=tmp_path / "ws", timeout_s=30)) as box:
        start = time.monotonic()
        res = box.run(script, timeout_s=1.5)
        elapsed = time.monotonic() - start
    assert res.timed_out and res.exit_code == -9
    assert elapsed < 10
    time.sleep(0.2)
    assert processes_with(f"sleep {marker}") == []


def test_background_process_does_not_outlive_its_command(tmp_path):
    marker = f"{uuid.uuid4().int % 10**6 + 2 * 10**6}"
    with Sandbox(SandboxConfig(workspace=tmp_path / "ws")) as box:
        res = box.run(f"sleep {marker} & echo started")
    assert res.stdout == "started\n" and not res.timed_out and res.duration_s < 10
    time.sleep(0.2)
    assert processes_with(f"sleep {marker}") == []


def test_memory_and_process_limits_bind(tmp_path):
    with Sandbox(SandboxConfig(workspace=tmp_path / "ws", memory_mb=200, max_processes=16)) as box:
        mem = box.run("python3 -c 'b = bytearray(400 * 1024 * 1024); print(len(b))'")
        assert mem.exit_code != 0 and "MemoryError" in mem.stderr
        ok = box.run("python3 -c 'b = bytearray(50 * 1024 * 1024); print(len(b))'")
        assert ok.exit_code == 0
        if os.geteuid() == 0 and box.config.host_uid is None:  # pragma: no cover - documented opt-out
            return
        forks = box.run("for i in $(seq 40); do sleep 2 & done; wait", timeout_s=20)
        assert "fork" in forks.stderr.lower() or "resource temporarily unavailable" in forks.stderr.lower()


def test_the_address_space_limit_follows_memory_unless_lifted(tmp_path):
    """A browser reserves ~1 TiB of address space: a sandbox that runs one lifts RLIMIT_AS, not its memory limit."""
    with Sandbox(SandboxConfig(workspace=tmp_path / "a", memory_mb=300)) as box:
        assert box.run("ulimit -v").stdout.strip() == str(300 * 1024)
    with Sandbox(SandboxConfig(workspace=tmp_path / "b", memory_mb=300, address_space_mb=0)) as box:
        assert box.run("ulimit -v").stdout.strip() == "unlimited"


def test_throwaway_workspace_is_removed_and_run_needs_context():
    with throwaway_sandbox() as box:
        ws = box.workspace
        assert box.run("touch made").exit_code == 0
        assert (ws / "made").exists()
    assert not ws.exists()
    with pytest.raises(SandboxError, match="context manager"):
        Sandbox(SandboxConfig(workspace=Path("/tmp/never-used"))).run("true")


def test_scratch_sandbox_confines_its_workspace_and_deletes_everything(tmp_path):
    from unified.sandbox import ScratchSandbox

    scratch = ScratchSandbox(prefix="scratch-test-", scratch_dir=tmp_path)
    scratch.workspace.mkdir()
    (scratch.workspace / "given.txt").write_text("from the task")
    box = scratch.start(timeout_s=20)
    assert box.run("cat given.txt && echo made > made.txt").stdout == "from the task"
    assert (scratch.workspace / "made.txt").read_text() == "made\n"
    scratch.close()
    scratch.close()  # twice is harmless (stop() may run after a failed start)
    assert scratch.box is None and not scratch.root.exists() and list(tmp_path.iterdir()) == []
