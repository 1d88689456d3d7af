"""Model output is untrusted input to the harness: it may be anything, it may never stop a run.

What a model MAY write: any text, any bytes a backend hands on (invalid UTF-8, lone UTF-16
surrogates, control characters), tool calls that are malformed in every way (deep nesting,
integers past Python's 4,300-digit limit, NaN/Infinity, broken tags, wrong types, giant
strings), completions that are cut off.

What it may NEVER cause: an exception out of the parser or the agent loop (one malformed
completion stopped a whole eval, and its rerun stopped at the same episode, forever); a call
dropped silently (a malformed call is an error observation the model sees); a record that
cannot be written or read back. Whatever goes wrong inside one episode is recorded on that
episode, the run goes on, and a rerun resumes past it.
"""

from __future__ import annotations

import json

import pytest

from fixture_eval_bench import FixtureAdapter, FixtureEnv
from unified.agent.loop import AgentLoop, Job
from unified.chatformat.toolcalls import calls_from_structured, parse_completion
from unified.chatformat.untrusted import MAX_JSON_DEPTH, UntrustedJSONError, load_untrusted_json
from unified.agent.prompting import PROMPTING, PromptingModule
from unified.eval.config import EvalConfig
from unified.eval.runner import run_eval
from unified.eval.rundir import BenchmarkStore
from unified.agent.replay import Replayer
from unified.inference.base import PolicyOutput

NESTED = '<tool_call>{"name": "x", "arguments": {"a": ' + "[" * 50000 + "]" * 50000 + "}}</tool_call>"
BIG_INT = '<tool_call>{"name": "x", "arguments": {"a": ' + "7" * 5000 + "}}</tool_call>"
FIXTURE = "fixture_eval_bench:FixtureAdapter"


@pytest.mark.parametrize("text, why", [(NESTED, "nested deeper than"), (BIG_INT, "5000 digits")])
def test_the_two_crashing_completions_become_parse_errors(text, why):
    calls = parse_completion(text).tool_calls
    assert len(calls) == 1 and why in calls[0].parse_error


@pytest.mark.parametrize("text, why", [
    ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "nested deeper"),
    ("[" * 100000, "nested deeper"),
    ("-" + "9" * 4301, "4301 digits"),
    ('{"a": NaN}', "NaN"), ("[Infinity]", "Infinity"), ("1e999", "overflows"),
    ('"\\ud800"', "surrogate"), ('{"\\udfff": 1}', "surrogate"),
    ("{", "Expecting"), (None, "expected JSON text"),
])
def test_untrusted_json_names_the_problem(text, why):
    with pytest.raises(UntrustedJSONError, match=why):
        load_untrusted_json(text)


def test_untrusted_json_keeps_what_is_valid():
    depth = MAX_JSON_DEPTH
    assert load_untrusted_json("[" * depth + "]" * depth) is not None
    assert load_untrusted_json('{"a": [1, 2.5, "\\ud83d\\ude00", null]}') == {"a": [1, 2.5, "\U0001F600", None]}


def test_server_parsed_calls_of_any_shape_become_error_calls():
    calls = calls_from_structured([
        "not a dict", {"name": 5, "arguments": {}}, {"name": "f", "arguments": "[" * 5000},
        {"name": "f", "arguments": '{"a": ' + "1" * 5000 + "}"}, {"name": "f", "arguments": {"a": 1}},
    ])
    assert [c.parse_error is None for c in calls] == [False, False, False, False, True]
    assert "must be a string" in calls[1].parse_error and "nested deeper" in calls[2].parse_error


def test_invalid_text_is_cleaned_not_raised():
    parsed = parse_completion("a \ud800 b <tool_call>{\"name\": \"f\\udc80\", \"arguments\": {}}</tool_call>")
    parsed.content.encode("utf-8")
    assert parsed.tool_calls[0].parse_error and "surrogate" in parsed.tool_calls[0].parse_error
    assert parse_completion(b"<tool_call>{\"name\": \"f\\xff\"}</tool_call>".decode("latin-1")).tool_calls


# --------------------------------------------------------------------------------------
# the loop and the run directory

HOSTILE = {
    "echo_1": NESTED.replace('"x"', '"echo"'),
    "echo_2": BIG_INT.replace('"x"', '"echo"'),
    "echo_3": '<tool_call>{"name": "echo", "arguments": {"text": "\\ud800"}}</tool_call>',
    "echo_4": "a lone surrogate in the text itself: \ud800, and invalid UTF-8 decoded with surrogateescape: "
              + b"\xff\xfe".decode("utf-8", "surrogateescape"),
}


class HostileOutputPolicy(Replayer):
    """Turn 1 of task ``echo_N``: its hostile completion (or the right call); later turns: "done"."""

    name = model = "hostile"

    def __init__(self, completions: dict[str, str]) -> None:
        self.completions, self.requests = completions, 0

    def respond(self, adapter, task, messages):
        self.requests += 1
        first = not any(m["role"] == "assistant" for m in messages)
        right = '<tool_call>{"name": "echo", "arguments": {"text": "%s"}}</tool_call>' % task.payload["n"]
        return PolicyOutput(text=self.completions.get(task.id, right) if first else "done", completion_tokens=3)


def test_hostile_completions_finish_the_eval_and_a_rerun_runs_nothing_again(tmp_path):
    cfg = EvalConfig(benchmarks=[FIXTURE], model="hostile", out=str(tmp_path), benchmark_config={FIXTURE: {"n": 6}})
    summary = run_eval(cfg, policy=HostileOutputPolicy(HOSTILE))
    bench = summary.benchmarks["fixture_echo"]
    assert bench.results == 6 and bench.errors == 0
    store = BenchmarkStore(tmp_path, "fixture_echo")
    results, episodes = store.load(), store.episodes()
    assert {task_id for task_id, _ in results} == {f"echo_{i}" for i in range(6)}
    for task_id in ("echo_1", "echo_2", "echo_3"):  # a malformed call: an error observation, never dropped
        step = episodes[(task_id, 0)].steps[0]
        assert len(step.tool_calls) == 1 and step.tool_calls[0].parse_error
        assert step.observations[0].is_error and "could not parse" in step.observations[0].content
        assert not results[(task_id, 0)].passed
    assert "\ufffd" in episodes[("echo_4", 0)].steps[0].completion  # the invalid text, recorded cleaned
    for path in (store.results_path, store.episodes_path):
        path.read_bytes().decode("utf-8")  # the files stay valid UTF-8
    again = HostileOutputPolicy(HOSTILE)
    run_eval(cfg, policy=again)
    assert again.requests == 0 and len(store.load()) == 6


class _RaisingPrompting(PromptingModule):
    name = "raises_on_marker"

    def parse(self, completion):
        if "RAISE" in completion:
            raise RuntimeError("prompting module blew up")
        return completion, {}


class UnrecordableEnv(FixtureEnv):
    def __init__(self, task):
        super().__init__(task)
        if task.id == "echo_2":
            self.metadata = {"huge": 10 ** 5000}  # no JSON writer can print it


class OddAdapter(FixtureAdapter):
    """``echo_1``'s score is not a result; ``echo_2``'s episode cannot be serialised."""

    def open(self, task, *, run=None):
        return UnrecordableEnv(task)

    def score(self, task, episode, env):
        return None if task.id == "echo_1" else super().score(task, episode, env)


class OddPolicy(HostileOutputPolicy):
    """``echo_3``: a completion the prompting module chokes on; ``echo_4``: not a PolicyOutput."""

    def respond(self, adapter, task, messages):
        output = super().respond(adapter, task, messages)
        return None if task.id == "echo_4" else output


def test_any_exception_inside_one_episode_is_recorded_and_the_run_goes_on(tmp_path):
    if "raises_on_marker" not in PROMPTING:
        PROMPTING.register("raises_on_marker", _RaisingPrompting)
    adapter = OddAdapter(n=6)
    store = BenchmarkStore(tmp_path, adapter.name)
    loop = AgentLoop(adapter, OddPolicy({"echo_3": "RAISE"}), prompting="raises_on_marker", on_result=store.append)
    results = {r.task_id: r for r in loop.run([Job(t) for t in adapter.tasks()])}
    assert set(results) == {f"echo_{i}" for i in range(6)}
    # score() returned junk after the agent acted: 0, counted, labelled (issue 42, R2), never left out
    assert results["echo_1"].error is None and results["echo_1"].score == 0.0
    assert results["echo_1"].details["status"] == "scoring_failed_after_agent"
    assert "not an EpisodeResult" in results["echo_1"].details["grader_error"]
    assert "recording the episode failed" in results["echo_2"].error
    assert "prompting module blew up" in results["echo_3"].error
    assert "not a PolicyOutput" in results["echo_4"].error
    assert results["echo_0"].passed and results["echo_5"].passed
    recorded = store.load()
    assert len(recorded) == 6 and recorded[("echo_2", 0)].error  # on disk, so a rerun skips it
    assert json.loads(store.episodes_path.read_text().splitlines()[-1])["task_id"]


def test_the_depth_limit_holds_whatever_the_recursion_limit():
    """A library in the process raised ``sys.setrecursionlimit`` (the import-graph test did, for the rest
    of the suite): the depth limit relied on json's RecursionError and let 5000 levels through to the
    parser ("not valid JSON" instead of "nested deeper"; deeper still is a C-stack crash on a worker
    thread). The nesting is now counted before parsing, outside strings."""
    import sys

    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        with pytest.raises(UntrustedJSONError, match="nested deeper"):
            load_untrusted_json("[" * 5000 + "]" * 5000)
        assert load_untrusted_json('{"a": "' + "[" * 5000 + '"}') == {"a": "[" * 5000}  # brackets in a string
        assert load_untrusted_json('["\\"", [[1]]]') == ['"', [[1]]]
    finally:
        sys.setrecursionlimit(previous)
