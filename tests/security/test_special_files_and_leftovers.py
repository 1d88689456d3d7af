"""Promise: special files the agent leaves do not break grading, and no sandbox leaves state behind.

Attack: a FIFO in the workspace (``mkfifo pipe``). Before the fix QwenClawBench grading failed
(copying the workspace for the grader raised on the named pipe); a grader that opened it would
hang. Now FIFOs, sockets and devices are left out of the grader's copy. And every sandbox,
local session and grader removes its temporary state directory, also when it fails to start.
"""

from __future__ import annotations

import glob
import os
import tempfile

import pytest

from security._support import needs_bwrap, needs_local
from unified.execution import EnvironmentSpec, LocalBackend
from unified.sandbox import Sandbox, SandboxConfig, SandboxError

PATTERNS = ("unified-sbx-*", "unified-local-*", "unified-ws-*", "unified-grade-*", "qcb-grade-*", "claw-grade-*")


def _temp_state() -> set[str]:
    roots = {tempfile.gettempdir(), "/tmp"}
    return {p for root in roots for pattern in PATTERNS for p in glob.glob(os.path.join(root, pattern))}


@needs_bwrap
def test_a_fifo_in_the_workspace_does_not_break_grading(tmp_path):
    from evaluators.qwenclawbench.grading import run_automated_checks

    ws = tmp_path / "ws"
    ws.mkdir()
    os.mkfifo(ws / "pipe")
    (ws / "answer.txt").write_text("42")
    code = ("import os\ndef grade(transcript, workspace_path):\n"
            "    return {'answered': float(open(os.path.join(workspace_path, 'answer.txt')).read() == '42')}\n")
    result = run_automated_checks(code, [], ws, timeout_s=60)
    assert result.get("error") is None and result["score"] == 1.0, result


@needs_bwrap
def test_sandboxes_leave_no_state_behind_even_when_they_fail_to_start(tmp_path):
    before = _temp_state()
    with Sandbox(SandboxConfig(workspace=tmp_path / "ws")) as box:
        assert box.run("echo hi > f; mkfifo p; echo ok").stdout == "ok\n"
    with pytest.raises(SandboxError, match="does not exist"):
        Sandbox(SandboxConfig(workspace=tmp_path / "ws2", readonly_binds=["/nonexistent/path"])).__enter__()
    assert _temp_state() - before == set()
    assert os.stat(tmp_path / "ws2").st_uid == os.getuid() if (tmp_path / "ws2").exists() else True


@needs_local
def test_local_sessions_leave_no_state_behind():
    before = _temp_state()
    with LocalBackend().start(EnvironmentSpec()) as session:
        session.exec("mkfifo /tmp/p; mkfifo p; (sleep 100 &); echo ok")
    assert _temp_state() - before == set()
