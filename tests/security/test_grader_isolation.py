"""Promise: nothing the agent wrote runs inside a grader, and a grader has no network.

Attack (QwenClawBench): the agent cannot do the task, so it writes
``.local/lib/python3.11/site-packages/zz.pth`` into its workspace; before the fix the grader ran
``python3`` without ``-I`` and with ``HOME=/workspace``, so the ``.pth`` line ran inside the
grader and printed a forged result (an impossible task scored 1.0). Same idea with a
``sitecustomize.py``/``json.py`` in the workspace (the grader's working directory).

Attack (Claw-Eval): the grader ran with the host network (for its LLM judge), so anything it
runs could reach the host's loopback services; now it has none and reaches its judge through a
relay on a Unix socket that only knows the judge's URL.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
from pathlib import Path

from _process_support import LoopbackListener
from security._support import needs_bwrap
from unified.types import Episode

FORGED = '@@UNIFIED_GRADE_RESULT@@{"scores": {"impossible": 1.0}}'
IMPOSSIBLE = "def grade(transcript, workspace_path):\n    return {'impossible': 0.0}\n"


def _plant(ws: Path) -> None:
    forge = ("import sys, os; sys.stdout.write('\\n" + FORGED.replace("'", "\\'") + "\\n'); sys.stdout.flush(); "
             "os._exit(0)\n")
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    for version in {"3.11", "3.12", "3.13", minor}:
        site = ws / ".local" / "lib" / f"python{version}" / "site-packages"
        site.mkdir(parents=True, exist_ok=True)
        (site / "zz_forge.pth").write_text(forge)
        (site / "usercustomize.py").write_text(forge)
    for name in ("sitecustomize.py", "json.py", "glob.py"):
        (ws / name).write_text(forge)


@needs_bwrap
def test_a_pth_file_in_the_workspace_cannot_forge_a_qwenclawbench_grade(tmp_path):
    from evaluators.qwenclawbench.grading import run_automated_checks

    ws = tmp_path / "ws"
    _plant(ws)
    result = run_automated_checks(IMPOSSIBLE, [], ws, timeout_s=60)
    assert result["score"] == 0.0 and result["breakdown"] == {"impossible": 0.0}, result


@needs_bwrap
def test_a_qwenclawbench_grader_runs_isolated(tmp_path):
    from evaluators.qwenclawbench.grading import run_automated_checks

    code = ("import os, sys\n"
            "def grade(transcript, workspace_path):\n"
            "    return {'isolated': float(sys.flags.isolated), 'no_user_site': float(not sys.flags.no_user_site == 0),\n"
            "            'home_outside_workspace': float(not os.environ['HOME'].startswith(workspace_path)),\n"
            "            'no_pythonpath': float('PYTHONPATH' not in os.environ),\n"
            "            'workspace_not_on_path': float(all(not p.startswith(workspace_path) for p in sys.path if p))}\n")
    (tmp_path / "ws").mkdir()
    result = run_automated_checks(code, [], tmp_path / "ws", timeout_s=60)
    assert set(result["breakdown"].values()) == {1.0}, result


CLAW_CHECKOUT = Path(__file__).parents[1] / "fixtures" / "claw_eval" / "fixture_checkout"
PROBE_GRADER = '''
import os, socket, sys
from claw_eval.graders.base import AbstractGrader
from claw_eval.models.trace import DimensionScores


class ProbeGrader(AbstractGrader):
    """Scores what the grader's process could reach: completion = the host's loopback, robustness = isolated."""

    def grade(self, messages, dispatches, task, audit_data=None, judge=None, media_events=None, env_snapshot=None):
        scores = DimensionScores()
        try:
            socket.create_connection(("127.0.0.1", PORT), 3).close()
            scores.completion = 1.0
        except OSError:
            scores.completion = 0.0
        scores.robustness = float(sys.flags.isolated and not os.environ["HOME"].startswith("/workspace"))
        return scores
'''


@needs_bwrap
def test_a_claw_eval_grader_has_no_network(tmp_path):
    from evaluators.claw_eval.grading import build_trace, run_grader

    listener = LoopbackListener()
    checkout = tmp_path / "checkout"  # the fixture checkout plus one probing task (the grader sees the checkout only)
    shutil.copytree(CLAW_CHECKOUT, checkout)
    task_dir = checkout / "tasks" / "fixture_T01_notes"
    (task_dir / "grader.py").write_text(PROBE_GRADER.replace("PORT", str(listener.port)))
    trace = build_trace(Episode(benchmark="claw_eval", task_id="fixture_T01_notes"), [], {})
    graded = run_grader(checkout=checkout, task_dir=task_dir, trace=trace, env_snapshot=None, timeout_s=120)
    assert "error" not in graded, json.dumps(graded)[:2000]
    assert graded["scores"]["completion"] == 0.0 and listener.hits == 0  # the host's loopback is out of reach
    assert graded["scores"]["robustness"] == 1.0  # python -I, HOME outside the workspace


@needs_bwrap
def test_the_judge_relay_forwards_only_completions_and_keeps_the_key(tmp_path):
    """A sandbox without network reaches the judge through the relay; the key is added outside it."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from unified.sandbox import Sandbox, SandboxConfig
    from unified.sandbox.relay import EndpointRelay

    seen = []

    class Judge(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append((self.path, self.headers.get("Authorization")))
            body = b'{"choices": [{"message": {"content": "{\\"score\\": 1}"}}]}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    judge = HTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=judge.serve_forever, daemon=True).start()
    ask = ("import socket, sys\n"
           "def post(path):\n"
           "    s = socket.socket(socket.AF_UNIX); s.connect('/grader/judge.sock')\n"
           "    s.sendall(('POST %s HTTP/1.1\\r\\nHost: relay\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{}' % path).encode())\n"
           "    out = b''\n"
           "    while True:\n"
           "        chunk = s.recv(65536)\n"
           "        if not chunk: return out.decode()\n"
           "        out += chunk\n"
           "print(post('/chat/completions').split()[1], post('/files').split()[1])\n")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    inputs.chmod(0o755)
    try:
        with EndpointRelay(inputs / "judge.sock", f"http://127.0.0.1:{judge.server_port}/v1", api_key="sk-judge-key-123"), \
                Sandbox(SandboxConfig(workspace=tmp_path / "ws", readonly_binds=[(str(inputs), "/grader")])) as box:
            res = box.run(["/usr/bin/python3", "-I", "-c", ask], timeout_s=60)
    finally:
        judge.shutdown()
    assert res.stdout.split() == ["200", "403"], (res.stdout, res.stderr[-500:])
    assert seen == [("/v1/chat/completions", "Bearer sk-judge-key-123")]
