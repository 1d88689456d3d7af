"""Promise: no value of the host's environment reaches an agent, a grader or a record.

Attack: plant ``OPENAI_API_KEY``/``HF_TOKEN`` canaries in the parent's environment, then read
every door a sandboxed process has: ``env``, ``/proc/self/environ``, every ``/proc/<pid>/environ``
(bubblewrap's own pid 1 kept the caller's environment before the fix: ``--clearenv`` only
cleans the child) and every ``/proc/<pid>/cmdline``. Same through the ``local`` backend's
long-lived sandbox and inside a QwenClawBench grader. Defense in depth: an observation that
carries a secret anyway (a leaky tool) is redacted before the episode records it.
"""

from __future__ import annotations

import json
import os

from security._support import needs_bwrap, needs_local
from unified.agent.loop import AgentLoop, Job
from unified.benchmarks.contract import Adapter, Environment, Task
from unified.execution import EnvironmentSpec, LocalBackend
from unified.agent.replay import GoldReplayer
from unified.sandbox import throwaway_sandbox
from unified.types import EpisodeResult, Message, Observation, ToolCall, ToolSpec

READ_EVERY_DOOR = ("env; cat /proc/self/environ; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline "
                   "/proc/[0-9]*/task/*/environ; do cat \"$f\"; echo; done 2>/dev/null | tr '\\0' '\\n'; "
                   "echo END")


def _assert_clean(text: str, canaries: dict[str, str]) -> None:
    assert text.rstrip().endswith("END"), text[-300:]  # the probe ran to its end
    for name, value in canaries.items():
        assert value not in text, f"{name} is readable inside"


@needs_bwrap
def test_no_proc_entry_of_a_sandbox_shows_the_host_environment(canaries):
    with throwaway_sandbox() as box:
        res = box.run(READ_EVERY_DOOR)
        _assert_clean(res.stdout, canaries)
        assert "bwrap" in box.run("cat /proc/1/cmdline").stdout  # pid 1 is bubblewrap: the door did exist
        # the sandbox runs as root too (host_uid=None): same promise
    with throwaway_sandbox(host_uid=None) as box:
        _assert_clean(box.run(READ_EVERY_DOOR).stdout, canaries)


@needs_bwrap
def test_the_hosts_working_directory_is_not_in_the_sandboxs_pid_1(tmp_path, monkeypatch):
    """The launcher chain's shells export PWD; bubblewrap (pid 1) kept it in /proc/1/environ."""
    here = tmp_path / "host-cwd-marker-5d1e"
    here.mkdir()
    monkeypatch.chdir(here)
    for options in ({}, {"host_uid": None}):
        with throwaway_sandbox(**options) as box:
            res = box.run(READ_EVERY_DOOR)
            assert res.stdout.rstrip().endswith("END") and "host-cwd-marker" not in res.stdout, res.stdout


@needs_local
def test_the_local_backend_keeps_the_host_environment_out(canaries):
    with LocalBackend().start(EnvironmentSpec(env={"GIVEN": "by-the-task"})) as session:
        res = session.exec(READ_EVERY_DOOR)
        _assert_clean(res.stdout, canaries)
        assert "GIVEN=by-the-task" in res.stdout  # what the task sets is there


@needs_bwrap
def test_a_grader_sees_no_host_secret(canaries, tmp_path):
    from evaluators.qwenclawbench.grading import run_automated_checks

    code = ("import glob\n"
            "def grade(transcript, workspace_path):\n"
            "    seen = ''\n"
            "    for f in glob.glob('/proc/[0-9]*/environ') + ['/proc/self/environ']:\n"
            "        try:\n"
            "            seen += open(f, 'rb').read().decode(errors='replace')\n"
            "        except OSError:\n"
            "            pass\n"
            f"    return {{'saw_openai_key': float({canaries['OPENAI_API_KEY']!r} in seen),\n"
            f"            'saw_hf_token': float({canaries['HF_TOKEN']!r} in seen), 'probed': float(bool(seen))}}\n")
    (tmp_path / "ws").mkdir()
    result = run_automated_checks(code, [], tmp_path / "ws", timeout_s=60)
    assert result["breakdown"] == {"saw_openai_key": 0.0, "saw_hf_token": 0.0, "probed": 1.0}, result


def test_secret_looking_host_values_are_redacted_from_text(canaries, monkeypatch):
    from unified.sandbox.hostenv import redact_host_secrets

    monkeypatch.setenv("HARMLESS_PORT", "8080")
    text = f"key={canaries['OPENAI_API_KEY']} hf={canaries['HF_TOKEN']} port=8080"
    assert redact_host_secrets(text) == "key=[redacted $OPENAI_API_KEY] hf=[redacted $HF_TOKEN] port=8080"


class _LeakyEnv(Environment):
    """A tool that answers with a host variable (a misconfigured service echoing its credentials)."""

    def __init__(self) -> None:
        super().__init__()
        self.tools = [ToolSpec(name="whoami", description="Show the service's credentials.",
                               parameters={"type": "object", "properties": {}})]
        self.system_prompt, self.first_user_message = "test", "Call whoami."

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        return [Observation(call.id, f"token in use: {os.environ['OPENAI_API_KEY']}") for call in tool_calls]


class _LeakyAdapter(Adapter):
    name = "leaky_fixture"

    def tasks(self, split=None, limit=None):
        return [Task(id="leak", benchmark=self.name)]

    def open(self, task, *, run=None):
        return _LeakyEnv()

    def score(self, task, episode, env):
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=0.0)

    def gold_turns(self, task):
        return [[ToolCall(name="whoami", arguments={}, id="w0")]]


def test_an_episode_never_records_a_host_secret(canaries):
    episodes = []
    adapter = _LeakyAdapter()
    AgentLoop(adapter, GoldReplayer(), on_result=lambda r, e: episodes.append(e)).run([Job(adapter.tasks()[0], 0)])
    record = json.dumps(episodes[0].to_dict(), default=str)
    assert "token in use" in record and canaries["OPENAI_API_KEY"] not in record
    assert "[redacted $OPENAI_API_KEY]" in record


ENV_ECHO_SERVICE = '''
import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Echo(BaseHTTPRequestHandler):
    def _answer(self):
        body = json.dumps(dict(os.environ)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _answer

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Echo).serve_forever()
'''


def test_claw_eval_mock_services_hold_no_host_secret(canaries, tmp_path):
    """The mock services answer the agent's tool calls: they start with an explicit environment."""
    import httpx

    from evaluators.claw_eval.services import ServiceGroup, ServiceSpec

    (tmp_path / "echo.py").write_text(ENV_ECHO_SERVICE)
    spec = ServiceSpec(name="echo", command="python echo.py", port=9290, health_check="http://localhost:9290/",
                       health_check_method="GET", env={"GIVEN": "by-the-task"})
    with ServiceGroup([spec], tmp_path) as group:
        seen = httpx.get(group.url("http://localhost:9290/"), trust_env=False).json()
    assert seen["GIVEN"] == "by-the-task" and not set(canaries) & set(seen), sorted(seen)
