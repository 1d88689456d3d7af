"""Fuzzing the harness with malformed tool calls: no mutation of a valid call escapes as an exception.

A model under RL finds the inputs that break its harness by itself. The seeded generator of
:mod:`security._tool_call_fuzz` mutates valid calls (both wire forms) with nesting, huge
numbers, NaN/Infinity, control characters, broken tags, invalid UTF-8, duplicate keys, wrong
types, giant strings, truncation and byte flips. The promise, per mutation: the parser returns
(a malformed call is a call with ``parse_error``), the agent loop finishes the episode with a
result, and the episode and result are written and read back. Before the fix, 579 of these
10,000 escaped the parser (353 RecursionError, 226 ValueError) and the first one stopped the
loop. ``pytest -s`` prints the figures.
"""

from __future__ import annotations

import random
import time

import pytest

from fixture_eval_bench import FixtureAdapter
from security._tool_call_fuzz import TOOL, mutate, mutations
from unified.agent.loop import AgentLoop, Job
from unified.chatformat.toolcalls import parse_completion
from unified.eval.rundir import BenchmarkStore
from unified.store import json_line
from unified.agent.replay import GoldReplayer, Replayer
from unified.inference.base import PolicyOutput
from unified.types import Episode, EpisodeResult, ToolSpec

MUTATIONS = 10_000
SEED = 13
TOOLS = [ToolSpec(name=TOOL, parameters={"type": "object", "properties": {"text": {"type": "string"},
                                                                         "n": {"type": "integer"}}})]


@pytest.fixture(scope="module")
def corpus() -> list[tuple[list[str], str]]:
    return list(mutations(MUTATIONS, seed=SEED))


def test_parser_returns_on_every_mutation(corpus):
    escaped, malformed, started = [], 0, time.perf_counter()
    for i, (operators, text) in enumerate(corpus):
        try:
            parsed = parse_completion(text, TOOLS)
        except Exception as exc:  # noqa: BLE001 - counting is the point
            escaped.append((i, operators, type(exc).__name__))
            continue
        for call in parsed.tool_calls:
            assert isinstance(call.arguments, dict) and isinstance(call.name, str)
            malformed += call.parse_error is not None
    seconds = time.perf_counter() - started
    print(f"\nparser: {len(corpus)} mutations, {len(escaped)} escaped, {malformed} calls with parse_error, "
          f"{seconds:.1f}s")
    assert not escaped, escaped[:5]


class FuzzPolicy(Replayer):
    """Task ``echo_N``'s first turn answers mutation N; every later turn says "done"."""

    name = model = "fuzz"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def respond(self, adapter, task, messages):
        first = not any(m["role"] == "assistant" for m in messages)
        return PolicyOutput(text=self.texts[task.payload["n"]] if first else "done", completion_tokens=1)


def test_agent_loop_finishes_every_episode_of_every_mutation(corpus, tmp_path):
    adapter = FixtureAdapter(n=len(corpus))
    store = BenchmarkStore(tmp_path, adapter.name)
    results: list[EpisodeResult] = []

    def record(result: EpisodeResult, episode: Episode) -> None:
        results.append(result)
        line = json_line(episode.to_dict())  # what the run directory writes, for every episode
        line.decode("utf-8")
        if int(episode.task_id.rsplit("_", 1)[1]) % 100 == 0:  # one in a hundred also through the real files (fsync'ed) and back
            store.append(result, episode)

    started = time.perf_counter()
    try:
        AgentLoop(adapter, FuzzPolicy([text for _, text in corpus]), max_in_flight=256,
                  on_result=record).run([Job(t) for t in adapter.tasks()])
        escaped = None
    except Exception as exc:  # noqa: BLE001
        escaped = exc
    seconds = time.perf_counter() - started
    errors = [r for r in results if r.error]
    print(f"\nagent loop: {len(corpus)} mutations, {int(escaped is not None)} escaped, {len(results)} results, "
          f"{len(errors)} episode errors, {seconds:.1f}s")
    assert escaped is None, repr(escaped)
    assert len(results) == len(corpus) and not errors, errors[:1]
    assert len(store.load()) == len(store.episodes()) == len(corpus) // 100


class FuzzedGoldReplayer(GoldReplayer):
    """The gold calls of each BFCL turn, mutated (seeded): valid calls of the real tools, then broken."""

    name = model = "fuzzed_gold"

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.rng, self.answers = random.Random(seed), 0

    def respond(self, adapter, task, messages):
        try:
            text = super().respond(adapter, task, messages).text
        except Exception:  # no ground truth to replay here: answer without calls
            text = "done"
        if "<tool_call>" in text:
            text = mutate(text, self.rng)[1]
        self.answers += 1
        return PolicyOutput(text=text, completion_tokens=1, finish_reason="stop")


@pytest.mark.slow
def test_bfcl_eval_with_a_fuzzing_model_has_a_result_for_every_task(tmp_path):
    pytest.importorskip("bfcl_eval")
    from unified.benchmarks.discovery import load_adapter
    from unified.eval.config import EvalConfig
    from unified.eval.runner import run_eval

    limit, categories = 24, "single_turn,multi_turn,memory_kv"
    cfg = EvalConfig(benchmarks=["bfcl_v4"], model="fuzzed_gold", out=str(tmp_path), limit=limit, max_in_flight=8,
                     benchmark_config={"bfcl_v4": {"categories": categories}})
    policy = FuzzedGoldReplayer(seed=SEED)
    summary = run_eval(cfg, policy=policy)
    store = BenchmarkStore(tmp_path, "bfcl_v4")
    results, episodes = store.load(), store.episodes()
    wanted = {(t.id, 0) for t in load_adapter("bfcl_v4", categories=categories).tasks(None, limit)}
    print(f"\nbfcl_v4: {len(wanted)} tasks (memory prerequisites included), {len(results)} results, "
          f"{sum(r.error is not None for r in results.values())} errors, {policy.answers} fuzzed answers")
    assert summary.benchmarks["bfcl_v4"].results >= limit
    assert set(results) == set(episodes) == wanted and policy.answers > limit
    assert all(r.error is None for r in results.values()), [r.error for r in results.values() if r.error][:1]
    assert any(c.parse_error for e in episodes.values() for s in e.steps for c in s.tool_calls)
