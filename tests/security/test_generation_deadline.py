"""``--max-seconds`` bounds an episode while the model is still generating.

What a model MAY do: generate until its token budget, never emit an end-of-turn token, sit
behind a server that answers slowly or never.

What it may NEVER cause: an episode that outlives its wall-time limit because the limit was
only checked between turns (``--max-seconds 5`` did not stop a 30 s generation). Each request
carries the episode's deadline; every backend stops there (``finish_reason="timeout"``, the
text so far kept) and the episode ends with ``stop_reason="timeout"``.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fixture_eval_bench import FixtureAdapter
from unified.benchmarks.contract import AgentLimits
from unified.agent.loop import AgentLoop, Job
from unified.models import load_checkpoint
from unified.models.continuous import ContinuousBatcher
from unified.models.generation import SamplingParams, batched_generate
from unified.inference.base import SamplingConfig

LONG = 100_000
"""A token budget no test could wait for: only the deadline can end these generations."""


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint, device="cpu")


def _prompt(tok, text="write a long story"):
    return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


def test_batched_rows_stop_at_their_own_deadline(loaded):
    prompts = [_prompt(loaded.tokenizer), _prompt(loaded.tokenizer, "and another one")]
    past = time.monotonic() - 1.0
    outs = batched_generate(loaded.model, loaded.tokenizer, prompts, SamplingParams(max_new_tokens=20),
                            deadlines=[past, None])
    assert outs[0].finish_reason == "timeout" and len(outs[0].token_ids) == 1  # one decode step, then stopped
    assert outs[1].finish_reason in ("stop", "length") and len(outs[1].token_ids) > 1


def test_generate_path_stops_at_the_deadline(tiny_checkpoint, tmp_path):
    """Models whose cache cannot be prefilled row by row (linear attention) go through ``generate``."""
    from unified.models.tiny import save_tiny_checkpoint

    hybrid = load_checkpoint(save_tiny_checkpoint(tmp_path / "qwen3_5", "qwen3_5_moe"), device="cpu")
    out, = batched_generate(hybrid.model, hybrid.tokenizer, [_prompt(hybrid.tokenizer)],
                            SamplingParams(max_new_tokens=20), deadlines=[time.monotonic() - 1.0])
    assert out.finish_reason == "timeout" and len(out.token_ids) < 20


def test_continuous_rows_stop_at_their_deadline(loaded):
    engine = ContinuousBatcher(loaded.model, loaded.tokenizer, SamplingParams(max_new_tokens=LONG))
    engine.add("late", _prompt(loaded.tokenizer), deadline=time.monotonic() - 1.0)
    (key, out), = engine.step()
    assert key == "late" and out.finish_reason == "timeout" and len(out.token_ids) == 1 and not engine.busy


@pytest.mark.timeout(300)  # without the deadline this generation runs for an hour: fail instead
@pytest.mark.parametrize("scheduling", ["rounds", "continuous"])
def test_the_loop_ends_a_long_generation_at_max_seconds(tiny_checkpoint, loaded, scheduling):
    from unified.inference.hf import HFPolicy

    policy = HFPolicy(str(tiny_checkpoint), SamplingConfig(max_new_tokens=LONG, thinking=False),
                      loaded=loaded)
    adapter, episodes = FixtureAdapter(n=1), []
    AgentLoop(adapter, policy, limits=AgentLimits(max_seconds=1.0), scheduling=scheduling,
              on_result=lambda r, e: episodes.append(e)).run([Job(adapter.tasks()[0])])
    episode, = episodes
    assert episode.stop_reason == "timeout" and episode.metadata["limit_hit"] == "timeout"
    step, = episode.steps
    assert step.extras["finish_reason"] == "timeout" and 0 < step.completion_tokens < LONG


class _SilentServer:
    """A real OpenAI-compatible endpoint on loopback that never answers a chat request."""

    def __enter__(self):
        release = self.release = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                release.wait(120)
                self.send_response(500)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"openai:http://127.0.0.1:{self.server.server_port}/v1#silent"

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scheduling", ["rounds", "continuous"])
def test_a_server_that_never_answers_ends_at_max_seconds(scheduling):
    from unified.inference.openai_backend import OpenAIPolicy

    with _SilentServer() as spec:
        policy = OpenAIPolicy(spec, timeout_s=300.0, max_retries=4)  # the request's own limits are far away
        adapter, episodes = FixtureAdapter(n=1), []
        try:
            AgentLoop(adapter, policy, limits=AgentLimits(max_seconds=1.0), scheduling=scheduling,
                      on_result=lambda r, e: episodes.append(e)).run([Job(adapter.tasks()[0])])
        finally:
            policy.close()
    episode, = episodes
    assert episode.stop_reason == "timeout" and episode.error is None
    assert episode.steps[0].extras["finish_reason"] == "timeout"
