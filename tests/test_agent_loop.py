"""The agent loop and tool-call parsing, with real (tiny/gold) policies and fixture environments."""

from __future__ import annotations

import pytest

from unified.benchmarks.contract import AgentLimits
from unified.agent.loop import AgentLoop, Job
from unified.chatformat.toolcalls import parse_completion, render_tool_call
from unified.inference import PolicyOutput
from unified.inference.base import ChatModel
from unified.types import ToolCall, ToolSpec

from fixture_eval_bench import EchoModel, FixtureAdapter

TOOLS = [ToolSpec(name="f", parameters={"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"}}})]


def test_parse_qwen_xml_parallel_and_reasoning():
    text = ("I should call f twice.\n</think>\n\nSure.\n<tool_call>\n<function=f>\n<parameter=s>\n42\n</parameter>\n"
            "<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n<parameter=n>\n[1]\n"
            "</parameter>\n</function>\n</tool_call>")
    parsed = parse_completion(text, TOOLS)
    assert parsed.reasoning == "I should call f twice."
    assert parsed.content == "Sure."
    assert [c.arguments for c in parsed.tool_calls] == [{"s": "42", "n": 7}, {"n": [1]}]
    assert all(c.parse_error is None for c in parsed.tool_calls)


def test_parse_hermes_json_and_malformed_kept():
    text = ('<tool_call>{"name": "f", "arguments": {"n": 3}}</tool_call>\n<tool_call>{"name": f}</tool_call>\n'
            "<tool_call>\n<function=f>\n<parameter=s>\ncut")
    calls = parse_completion(text, TOOLS).tool_calls
    assert len(calls) == 3
    assert calls[0].arguments == {"n": 3} and calls[0].parse_error is None
    assert "not valid JSON" in calls[1].parse_error
    assert "unterminated" in calls[2].parse_error


def test_render_then_parse_round_trip():
    call = ToolCall(name="f", arguments={"s": "[not json]", "n": 5})
    assert parse_completion("</think>" + render_tool_call(call), TOOLS).tool_calls[0].arguments == call.arguments


class ScriptedPolicy(ChatModel):
    """Answers from a fixed script per round (a real ChatModel subclass, no model)."""

    name = "scripted"

    def __init__(self, script):
        super().__init__("scripted")
        self.script, self.batches = list(script), []

    def generate(self, requests):
        self.batches.append(len(requests))
        text = self.script.pop(0) if self.script else "done"
        return [PolicyOutput(text=text, completion_tokens=5) for _ in requests]


def test_malformed_and_unknown_calls_become_error_observations():
    adapter = FixtureAdapter(n=1)
    text = ('<tool_call>{"name": "nope", "arguments": {}}</tool_call><tool_call>{bad</tool_call>'
            '<tool_call>{"name": "echo", "arguments": {"text": "0"}}</tool_call>')
    results, episodes = [], []
    loop = AgentLoop(adapter, ScriptedPolicy([text, "finished"]), on_result=lambda r, e: (results.append(r), episodes.append(e)))
    loop.run([Job(t) for t in adapter.tasks()])
    step = episodes[0].steps[0]
    assert [o.is_error for o in step.observations] == [True, True, False]
    assert "no tool named 'nope'" in step.observations[0].content
    assert results[0].passed and episodes[0].stop_reason == "answer"


def test_episodes_batched_together_and_crash_recorded():
    adapter = FixtureAdapter(n=5, crash=1)
    policy = EchoModel()
    seen = []
    original = policy.generate
    policy.generate = lambda reqs: (seen.append(len(reqs)), original(reqs))[1]
    results = AgentLoop(adapter, policy, max_in_flight=8).run([Job(t) for t in adapter.tasks()])
    assert max(seen) == 6  # all six episodes' turns went to the policy in one call
    by_id = {r.task_id: r for r in results}
    assert all(by_id[f"echo_{i}"].passed for i in range(5))
    assert by_id["crash_0"].error and "fixture environment crashed" in by_id["crash_0"].error


def test_limits_recorded():
    adapter = FixtureAdapter(n=1)
    call = '<tool_call>{"name": "echo", "arguments": {"text": "x"}}</tool_call>'
    episodes = []
    AgentLoop(adapter, ScriptedPolicy([call] * 10), limits=AgentLimits(max_turns=3),
              on_result=lambda r, e: episodes.append(e)).run([Job(adapter.tasks()[0])])
    assert episodes[0].stop_reason == "max_turns" and len(episodes[0].steps) == 3


@pytest.mark.slow
def test_hf_policy_batches_tiny_model(tiny_checkpoint):
    from unified.models import load_checkpoint
    from unified.inference.base import SamplingConfig
    from unified.inference.hf import HFPolicy

    policy = HFPolicy(str(tiny_checkpoint), SamplingConfig(max_new_tokens=8), loaded=load_checkpoint(str(tiny_checkpoint)))
    adapter = FixtureAdapter(n=3)
    episodes = []
    AgentLoop(adapter, policy, limits=AgentLimits(max_turns=2), max_in_flight=3,
              on_result=lambda r, e: episodes.append(e)).run([Job(t) for t in adapter.tasks()])
    assert len(episodes) == 3
    for episode in episodes:
        step = episode.steps[0]
        assert step.prompt.startswith("<|im_start|>system") and "<tools>" in step.prompt
        assert 0 < len(step.completion_token_ids) <= 8 and step.completion_tokens == len(step.completion_token_ids)


def test_a_full_context_ends_the_episode_as_a_limit_scored_as_it_stands():
    """An OpenAI-compatible server (real HTTP on loopback) answers the second call as vLLM does when the
    conversation outgrew ``max_model_len``: a 400 "maximum context length". The episode ends with
    ``context_full`` (a limit of the model, like ``max_turns``) and is scored, not recorded as an error
    (before: an infrastructure error, left out of the score's denominator)."""
    from _fake_chat import JSONServer

    from unified.inference.openai_backend import OpenAIPolicy

    answers = [(200, {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
                "content": '<tool_call>{"name": "echo", "arguments": {"text": "0"}}</tool_call>'}}],
                      "usage": {"prompt_tokens": 9, "completion_tokens": 5}}),
               (400, {"error": {"message": "This model's maximum context length is 4096 tokens. However, your "
                                           "prompt contains at least 4097 input tokens", "code": 400}})]

    with JSONServer(lambda request, n: answers[n] if n < len(answers) else (500, {"error": "no more"})) as server:
        adapter = FixtureAdapter(n=1)
        policy = OpenAIPolicy(f"openai:{server.url}#m", max_retries=0)
        results, episodes = [], []
        AgentLoop(adapter, policy, on_result=lambda r, e: (results.append(r), episodes.append(e))).run(
            [Job(adapter.tasks()[0])])
    episode, result = episodes[0], results[0]
    assert episode.stop_reason == "context_full" and episode.error is None and len(episode.steps) == 1
    assert "maximum context length" in episode.metadata["context_full"]
    assert result.error is None and result.score is not None  # scored as it stands
