"""Terminal-Bench through harbor's Terminus-2 (the default agent) on the fixture tasks, with a scripted
model on loopback (an OpenAI-compatible HTTP server that answers in Terminus-2's JSON) as the eval's
policy: harbor's own prompt, parser and completion double-check run in .venv-harbor, our sandbox runs
its tmux commands, the task's verifier scores. Skips without .venv-harbor (make harbor)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evaluators.terminal_bench import TerminalBench2Adapter, aggregate_rewards
from evaluators.terminal_bench.terminus import HARBOR_VERSION, harbor_python
from unified.agent.loop import AgentLoop, Job
from unified.agent.replay import GoldReplayer
from unified.benchmarks.contract import BenchmarkUnavailable, RunContext
from unified.inference import make_chat_model
from unified.types import EpisodeResult
from _requires import needs_harbor, needs_local, needs_tmux

FIXTURES = Path(__file__).parent / "fixtures" / "terminal_bench"
REAL = Path(__file__).parent / "fixtures" / "terminal_bench_real"


def terminus_answer(keystrokes: list[str], complete: bool = False, duration: float = 0.5) -> str:
    """One answer in the format Terminus-2's JSON template asks for."""
    return json.dumps({"analysis": "scripted", "plan": "scripted",
                       "commands": [{"keystrokes": k, "duration": duration} for k in keystrokes],
                       "task_complete": complete})


class ScriptedModel:
    """An OpenAI-compatible server on loopback answering each chat request with the next scripted text."""

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.requests = list(answers), []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.requests.append(body)
                text = model.answers.pop(0) if model.answers else terminus_answer([], complete=True)
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text},
                                                "finish_reason": "stop"}],
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.spec = f"openai:http://127.0.0.1:{self.server.server_address[1]}/v1#scripted"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted():
    models = []

    def make(answers):
        models.append(ScriptedModel(answers))
        return models[-1]

    yield make
    for m in models:
        m.close()


def _adapter(**kw):
    return TerminalBench2Adapter(root=str(FIXTURES), backend="local", **kw)


def _harbor_template(name: str) -> str:
    """Harbor's own prompt template, read from the installed package (the bridge loads the same file)."""
    import subprocess

    code = ("import harbor.agents.terminus_2 as t, pathlib; "
            f"print((pathlib.Path(t.__file__).parent / 'templates' / {name!r}).read_text(), end='')")
    return subprocess.run([str(harbor_python()), "-c", code], capture_output=True, text=True, check=True,
                          env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"}).stdout


def test_without_harbor_the_default_agent_is_unavailable_with_the_fix(tmp_path):
    adapter = _adapter(harbor_python=str(tmp_path / "no-python"))
    with pytest.raises(BenchmarkUnavailable) as caught:
        adapter.tasks()
    assert "make harbor" in caught.value.how_to_fix and "agent=tool_calling" in caught.value.how_to_fix
    assert _adapter(agent="tool_calling", harbor_python=str(tmp_path / "no-python")).tasks()  # the option needs none


def test_the_aggregate_names_the_agent_and_every_terminus_difference():
    def result(**details):
        return EpisodeResult(benchmark="terminal_bench_2", task_id="t", trial=0, score=1.0, passed=True,
                             details={"backend": "docker", **details})

    tool = aggregate_rewards([result(agent="tool_calling")])
    assert not tool["comparable"] and any("tool-calling" in r for r in tool["not_comparable_because"])
    terminus = aggregate_rewards([result(agent="terminus_2", harbor_version=HARBOR_VERSION, loop_limit="max_turns")])
    reasons = " | ".join(terminus["not_comparable_because"])
    assert "tool-calling" not in reasons and "LiteLLM" in reasons and "ExecutionSession.exec" in reasons
    assert "asciinema" in reasons and "agent timeout" in reasons and "1 episode(s) cut by the agent loop's limit" in reasons
    other = aggregate_rewards([result(agent="terminus_2", harbor_version="0.26.0")])
    assert f"harbor 0.26.0 instead of {HARBOR_VERSION}" in " | ".join(other["not_comparable_because"])


def test_terminus_2_runs_under_harbors_limits_unless_the_user_sets_caps():
    from unified.benchmarks.contract import AgentLimits
    from evaluators.terminal_bench import NO_LOOP_CAP

    adapter = TerminalBench2Adapter(root=str(FIXTURES), agent="terminus_2")
    lifted = adapter.agent_limits(AgentLimits())  # the library's defaults (40 turns, 32,768 tokens, 3,600 s)
    assert {k: getattr(lifted, k) for k in NO_LOOP_CAP} == NO_LOOP_CAP and adapter.loop_caps == {}
    capped = adapter.agent_limits(AgentLimits(max_turns=12, max_seconds=600.0))
    assert (capped.max_turns, capped.max_seconds, capped.max_episode_tokens) == (12, 600.0, NO_LOOP_CAP["max_episode_tokens"])
    assert adapter.loop_caps == {"max_turns": 12, "max_seconds": 600.0}
    reasons = aggregate_rewards([EpisodeResult(benchmark="terminal_bench_2", task_id="t", trial=0, score=1.0, passed=True,
                                               details={"backend": "docker", "agent": "terminus_2",
                                                        "loop_caps": adapter.loop_caps})])["not_comparable_because"]
    assert any('"max_seconds": 600.0' in r and '"max_turns": 12' in r for r in reasons), reasons
    tool = TerminalBench2Adapter(root=str(FIXTURES), agent="tool_calling")
    assert tool.agent_limits(AgentLimits()) == AgentLimits()  # our own agent keeps the run's limits


@needs_local
@needs_tmux
@needs_harbor
@pytest.mark.slow
def test_terminus_2_solves_a_fixture_task_with_harbors_prompt_parser_and_double_check(scripted, tmp_path):
    model = scripted(["this is not JSON",  # harbor's parser rejects it: nothing runs, the model is told
                      terminus_answer(["echo 'Hello, world!' > /app/hello.txt\n", "cat /app/hello.txt\n"]),
                      terminus_answer([], complete=True),  # Terminus-2 asks once more before it stops
                      terminus_answer([], complete=True)])
    adapter = _adapter(tasks="fixture_hello_file")
    task = adapter.tasks()[0]
    policy = make_chat_model(model.spec)
    [result] = AgentLoop(adapter, policy, model_name="scripted", run=RunContext(work_dir=tmp_path)).run([Job(task, 0)])
    assert result.error is None and result.score == 1.0 and result.passed, result
    d = result.details
    assert d["agent"] == "terminus_2" and d["harbor_version"] == HARBOR_VERSION and d["completed"] is True
    assert d["n_episodes"] == 4 and d["model_calls"] == 4 and d["backend"] == "local"
    # the first prompt is harbor's JSON template around the task's instruction and the terminal screen
    template = _harbor_template("terminus-json-plain.txt")
    first = model.requests[0]["messages"]
    assert [m["role"] for m in first] == ["user"] and "tools" not in model.requests[0]
    head, tail = template.split("{instruction}")
    assert first[0]["content"].startswith(head.replace("{{", "{").replace("}}", "}"))
    assert task.payload["instruction"].strip() in first[0]["content"]
    # each later call carries harbor's history: the earlier prompts and answers, then the new prompt
    second = model.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"] and second[1]["content"] == "this is not JSON"
    assert "JSON" in second[2]["content"] and "Hello, world!" not in second[2]["content"]
    third = model.requests[2]["messages"][-1]["content"]
    assert "Hello, world!" in third  # the terminal output of the commands harbor's parser read
    fourth = model.requests[3]["messages"][-1]["content"]
    assert fourth != third and "task_complete" in fourth  # the double-check before grading
    trajectory = json.loads(Path(d["trajectory"]).read_text())  # harbor's own transcript (ATIF)
    agent_steps = [s for s in trajectory["steps"] if s["source"] == "agent"]
    assert len(agent_steps) == 4
    assert agent_steps[1]["tool_calls"][0]["arguments"]["keystrokes"] == "echo 'Hello, world!' > /app/hello.txt\n"


@needs_local
@needs_tmux
@needs_harbor
@pytest.mark.slow
def test_a_real_terminal_bench_2_task_through_terminus_2(scripted, tmp_path):
    """regex-log, copied from Terminal-Bench 2.0 (tests/fixtures/terminal_bench_real/README.md): the scripted
    model types the reference regex through harbor's TmuxSession; the task's own test_outputs.py passes."""
    adapter = TerminalBench2Adapter(root=str(REAL), backend="local")
    [task] = adapter.tasks()
    solve = (REAL / "tb2_regex_log_copied" / "solution" / "solve.sh").read_text()
    heredoc = solve[solve.index("cat << 'EOF'"):]  # the file-writing part of the reference solution
    model = scripted([terminus_answer([heredoc, "wc -c /app/regex.txt\n"]), terminus_answer([], complete=True),
                      terminus_answer([], complete=True)])
    [result] = AgentLoop(adapter, make_chat_model(model.spec), run=RunContext(work_dir=tmp_path)).run([Job(task, 0)])
    assert result.error is None and result.score == 1.0, result
    assert "PASSED test_regex_matches_dates" in result.details["verifier_output"]
    assert result.details["agent"] == "terminus_2" and result.details["n_episodes"] == 3
    assert task.payload["instruction"].splitlines()[0] in model.requests[0]["messages"][0]["content"]
    reasons = adapter.aggregate([result])["not_comparable_because"]
    assert any("network off" in r for r in reasons) and any("LiteLLM" in r for r in reasons)


@needs_local
@needs_tmux
@needs_harbor
@pytest.mark.slow
def test_gold_through_the_default_agent_types_the_oracle_and_scores_100_percent(tmp_path):
    adapter = _adapter(tasks="fixture_region_report")
    [result] = AgentLoop(adapter, GoldReplayer(), run=RunContext(work_dir=tmp_path)).run([Job(adapter.tasks()[0], 0)])
    assert result.error is None and result.score == 1.0 and result.details["agent"] == "terminus_2"
    assert "tool-calling terminal" in result.details["oracle"]


@needs_local
@needs_tmux
@needs_harbor
@pytest.mark.slow
def test_terminus_2_summarisation_asks_the_policy_with_harbors_own_history(scripted, tmp_path):
    """A context limit just above Terminus-2's free-token threshold makes harbor summarise after the first turn:
    its summary, questions and answers calls reach the policy with the histories harbor gives them (the questions
    call with none), not the episode's conversation."""
    model = scripted([terminus_answer(["echo 'Hello, world!' > /app/hello.txt\n"])])  # then: task_complete answers
    adapter = _adapter(tasks="fixture_hello_file", terminus_context_limit=8300)
    loop = AgentLoop(adapter, make_chat_model(model.spec), run=RunContext(work_dir=tmp_path))
    [result] = loop.run([Job(adapter.tasks()[0], 0)])
    assert result.error is None and result.score == 1.0, result
    assert result.details["summarization_count"] >= 1 and result.details["completed"] is True
    lengths = [len(r["messages"]) for r in model.requests]
    assert lengths[0] == 1 and 1 in lengths[1:]  # the questions subagent starts from an empty history
    assert result.details["model_calls"] == len(model.requests) > result.details["n_episodes"]


@needs_local
@needs_tmux
@needs_harbor
@pytest.mark.slow
def test_the_task_timeout_stops_terminus_2_mid_wait_and_the_verifier_still_runs(scripted, tmp_path):
    import time

    model = scripted([terminus_answer(["sleep 50\n"], duration=55)])  # harbor would wait 55 s before its next call
    adapter = _adapter(tasks="fixture_hello_file", agent_timeout_s=12)
    started = time.monotonic()
    loop = AgentLoop(adapter, make_chat_model(model.spec), run=RunContext(work_dir=tmp_path))
    [result] = loop.run([Job(adapter.tasks()[0], 0)])
    assert time.monotonic() - started < 45
    assert result.error is None and result.details["agent_timed_out"] is True and result.score == 0.0
    assert "completed" not in result.details and "reward" in result.details  # stopped, not finished; still verified


@needs_local
@needs_tmux
def test_an_interpreter_without_harbor_fails_the_start_with_its_import_error_and_closes_the_sandbox(tmp_path):
    import sys

    adapter = _adapter(tasks="fixture_hello_file", harbor_python=sys.executable)  # a python that has no harbor
    [task] = adapter.tasks()
    env = adapter.open(task, run=RunContext(work_dir=tmp_path))
    with pytest.raises(Exception, match="No module named 'harbor'"):
        env.__enter__()
    assert env.bridge is None and env.session is None  # stopped: the sandbox is closed
