"""The workspace session (an ExecutionSession over a host workspace) and run_grader, on real bubblewrap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from _requires import needs_local
from unified.execution import (
    CopyBudget,
    CopyBudgetExceeded,
    CopyRefused,
    ExecutionError,
    ExecutionSession,
    GraderSpec,
    LocalBackend,
    WorkspaceSpec,
    run_grader,
)

pytestmark = needs_local


def _checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    (checkout / "files").mkdir(parents=True)
    (checkout / "files" / "data.txt").write_text("task data\n")
    return checkout


def test_a_workspace_session_speaks_the_session_calls_and_runs_its_tools_inside(tmp_path):
    checkout = _checkout(tmp_path)
    with LocalBackend().workspace(WorkspaceSpec(name="unified-ws-test-", commands={"python": "/usr/bin/python3"})) as ws:
        assert isinstance(ws, ExecutionSession)
        with pytest.raises(ExecutionError, match="not running"):
            ws.exec("true")
        ws.copy_task_file(checkout / "files" / "data.txt", "in/data.txt", root=checkout, where="task.yaml: files")
        ws.start()
        assert ws.exec("cat in/data.txt").stdout == "task data\n"
        assert ws.exec("pwd; echo $X", workdir="/workspace/in", env={"X": "1"}).stdout == "/workspace/in\n1\n"
        assert ws.exec(["python", "-c", "print(6 * 7)"]).stdout == "42\n"  # the spec's extra command
        assert ws.tool("read", {"path": "in/data.txt"}) == (True, "task data\n")
        assert ws.tool("write", {"path": "out.txt", "content": "answer"}).ok
        shell = ws.shell("cat out.txt; exit 3", timeout_s=30)
        assert not shell.ok and shell.text.startswith("answer") and shell.metadata["exit_code"] == 3
        with pytest.raises(ValueError, match="unknown workspace tool"):
            ws.tool("rm", {})
        ws.write_file("notes/a.txt", "via exec\n")
        assert ws.read_file("/workspace/notes/a.txt") == b"via exec\n"
        host = ws.host_workspace
        assert (host / "out.txt").read_text() == "answer"
    assert not host.exists()  # close removes the scratch directory


def test_nothing_a_command_starts_outlives_it(tmp_path):
    with LocalBackend().workspace(WorkspaceSpec(name="unified-ws-test-")) as ws:
        ws.start()
        ws.exec("(sleep 30 &) ; echo started > /tmp/mark")
        assert ws.exec("ls /tmp; pgrep -c sleep || true").stdout.strip() == "0"  # fresh /tmp, no sleep left
        assert ws.stop_agent_processes()["ok"]
        assert ws.verifier_env()["HOME"] == "/tmp"


def test_task_files_and_workspace_reads_stay_inside(tmp_path):
    checkout = _checkout(tmp_path)
    (tmp_path / "secret").write_text("HOST SECRET\n")
    (checkout / "files" / "link").symlink_to(tmp_path / "secret")
    with LocalBackend().workspace(WorkspaceSpec(name="unified-ws-test-")) as ws:
        with pytest.raises(ValueError, match="points outside the workspace"):
            ws.copy_task_file(checkout / "files" / "data.txt", "../escape.txt", root=checkout, where="task.yaml")
        with pytest.raises(CopyRefused, match="outside the task's checkout"):
            ws.copy_task_file(checkout / "files" / "link", "link", root=checkout, where="task.yaml")
        ws.start()
        ws.exec(f"ln -s {tmp_path / 'secret'} out; printf 12345678 > small")
        with pytest.raises(FileNotFoundError):
            ws.read_workspace_file("/workspace/out")  # a link out of the workspace is not followed
        with pytest.raises(FileNotFoundError):
            ws.read_workspace_file("/etc/hostname")  # outside the mount point
        budget = CopyBudget(10)
        assert ws.read_workspace_file("/workspace/small", budget) == b"12345678"
        with pytest.raises(CopyBudgetExceeded, match="budget"):
            ws.read_workspace_file("/workspace/small", budget)


def test_run_grader_gets_inputs_a_workspace_copy_and_no_network(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "answer.txt").write_text("42")
    os.mkfifo(workspace / "pipe")  # left out of the copy
    script = ("import os, socket\n"
              "print(open('/grader/question.txt').read(), open('answer.txt').read(), sorted(os.listdir('.')))\n"
              "s = socket.socket()\ntry:\n    s.connect(('1.1.1.1', 80)); print('net')\n"
              "except OSError:\n    print('no network')\n")
    result = run_grader(GraderSpec(argv=["/usr/bin/python3", "-I", "/grader/run.py"], workspace=workspace,
                                   files={"run.py": script, "question.txt": "q?"}, timeout_s=60))
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["q? 42 ['answer.txt']", "no network"]
    with pytest.raises(CopyRefused, match="budget"):
        run_grader(GraderSpec(argv=["true"], workspace=workspace, copy_mb=1e-6))
