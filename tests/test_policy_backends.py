"""ChatModel backends: openai against a real loopback server, vllm skipped without the engine."""

from __future__ import annotations

import importlib.util

import pytest

from unified.benchmarks.contract import AgentLimits
from unified.agent.loop import AgentLoop, Job
from unified.inference import make_chat_model
from unified.inference.base import PolicyRequest, SamplingConfig
from unified.registry import UnknownNameError

from fixture_eval_bench import FixtureAdapter


@pytest.mark.slow
def test_openai_backend_runs_episodes_against_local_server(tiny_checkpoint):
    from unified.inference.server import LocalOpenAIServer

    with LocalOpenAIServer(str(tiny_checkpoint), max_new_tokens=8) as server:
        policy = make_chat_model(server.spec, SamplingConfig(max_new_tokens=8))
        adapter = FixtureAdapter(n=3)
        episodes = []
        loop = AgentLoop(adapter, policy, limits=AgentLimits(max_turns=2), max_in_flight=3,
                         on_result=lambda r, e: episodes.append(e))
        assert loop.uses_continuous_batching  # each request goes out when its episode is ready
        loop.run([Job(t) for t in adapter.tasks()])
        assert len(episodes) == 3 and all(e.error is None for e in episodes)
        assert all(e.steps[0].completion_tokens > 0 and '"messages"' in e.steps[0].prompt for e in episodes)
        # the same episodes by rounds (one concurrent batch per round) give the same greedy completions
        by_rounds = []
        AgentLoop(adapter, policy, limits=AgentLimits(max_turns=2), max_in_flight=3, scheduling="rounds",
                  on_result=lambda r, e: by_rounds.append(e)).run([Job(t) for t in adapter.tasks()])
        completions = lambda eps: {e.task_id: [s.completion for s in e.steps] for e in eps}  # noqa: E731
        assert completions(by_rounds) == completions(episodes)
        policy.close()


def test_openai_backend_reports_unreachable_endpoint_per_request():
    policy = make_chat_model("openai:http://127.0.0.1:9/v1#none")
    policy.config = type(policy.config)(base_url=policy.config.base_url, model="none", timeout_s=2, max_retries=0)
    from unified.inference.openai_compat import OpenAICompatClient

    policy.client = OpenAICompatClient(policy.config)
    outs = policy.generate([PolicyRequest(messages=[{"role": "user", "content": "hi"}])] * 2)
    assert all(isinstance(o, Exception) for o in outs)


def test_unknown_backend_lists_valid_ones():
    with pytest.raises(UnknownNameError) as info:
        make_chat_model("embedded", backend="vllmm")
    assert "vllm" in str(info.value)


@pytest.mark.gpu
def test_vllm_backend_generates(tiny_checkpoint):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (gpu extra)")
    policy = make_chat_model(f"vllm:{tiny_checkpoint}", SamplingConfig(max_new_tokens=4))
    out = policy.generate([PolicyRequest(messages=[{"role": "user", "content": "hi"}])])[0]
    assert out.completion_tokens > 0


def test_concurrency_reaches_each_backend(tiny_checkpoint):
    """``--max-in-flight`` is not throttled by a backend's own default (8 requests, 16 rows)."""
    assert make_chat_model("openai:http://127.0.0.1:9/v1#none", concurrency=24).config.max_concurrency == 24
    assert make_chat_model(str(tiny_checkpoint), concurrency=24).max_batch_size == 24
    assert make_chat_model(str(tiny_checkpoint), concurrency=24, max_batch_size=4).max_batch_size == 4
