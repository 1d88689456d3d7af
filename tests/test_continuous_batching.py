"""Continuous batching: the engine (unified.models.continuous) on a tiny real MoE, and the agent
loop's continuous schedule with a scripted streaming policy and with the hf backend."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
import torch

from unified.benchmarks.contract import AgentLimits
from unified.agent.loop import AgentLoop, Job
from unified.models import load_checkpoint
from unified.models.continuous import ContinuousBatcher, ContinuousStats, continuous_batching_supported
from unified.models.generation import SamplingParams, batched_generate
from unified.models.prefix_cache import PrefixCache
from unified.inference.base import ChatModel, PolicyOutput, SamplingConfig

from fixture_eval_bench import FixtureAdapter

QUESTIONS = ["hi", "list the files in /tmp and say which one is the largest, then delete it",
             "what is 2 + 2?", "write one line of a poem about the sea, the sky and the long walk home at night"]


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint, device="cpu")


def _prompts(tok, questions=QUESTIONS):
    return [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q in questions]


def _alone(loaded, prompts, params):
    """Reference: each prompt generated alone by the round-based path (no padding, no cache)."""
    return [batched_generate(loaded.model, loaded.tokenizer, [p], params)[0] for p in prompts]


def test_greedy_equals_one_at_a_time_and_respects_max_rows(loaded):
    params = SamplingParams(max_new_tokens=12)
    prompts = _prompts(loaded.tokenizer)
    batcher = ContinuousBatcher(loaded.model, loaded.tokenizer, params, max_rows=2)
    for i, p in enumerate(prompts):
        batcher.add(i, p)
    outputs, most_live = {}, 0
    while batcher.busy:
        outputs.update(batcher.step())
        most_live = max(most_live, batcher.live_rows)
    reference = _alone(loaded, prompts, params)
    assert [outputs[i].token_ids for i in range(len(prompts))] == [o.token_ids for o in reference]
    assert [outputs[i].finish_reason for i in range(len(prompts))] == [o.finish_reason for o in reference]
    assert [outputs[i].text for i in range(len(prompts))] == [o.text for o in reference]
    assert most_live == 2
    stats = batcher.stats
    assert stats.rows == 4 and stats.completion_tokens == sum(len(o.token_ids) for o in reference)
    assert stats.row_steps == stats.completion_tokens  # one token per live row per step, none wasted


def test_rows_join_mid_decoding_without_changing_other_rows(loaded):
    params = SamplingParams(max_new_tokens=10)
    prompts = _prompts(loaded.tokenizer)
    batcher = ContinuousBatcher(loaded.model, loaded.tokenizer, params, max_rows=8)
    batcher.add("a", prompts[1])
    outputs = {}
    for _ in range(4):
        outputs.update(batcher.step())
    batcher.add("b", prompts[3])  # joins a row that is 4 tokens into its completion
    batcher.add("c", prompts[0])
    while batcher.busy:
        outputs.update(batcher.step())
    reference = _alone(loaded, [prompts[1], prompts[3], prompts[0]], params)
    assert [outputs[k].token_ids for k in "abc"] == [o.token_ids for o in reference]
    assert batcher.stats.admitted_while_decoding == 2


def test_next_turn_reuses_the_finished_rows_kv(loaded):
    tok = loaded.tokenizer
    params = SamplingParams(max_new_tokens=8)
    cache = PrefixCache(max_bytes=64 << 20)
    batcher = ContinuousBatcher(loaded.model, tok, params, max_rows=4, prefix_cache=cache)
    first = _prompts(tok, QUESTIONS[:2])
    turn1 = batcher.run(first)
    assert len(cache) >= 2  # each finished row stored prompt + completion
    second = [p + o.text + "<|im_end|>\n" + _prompts(tok, [f"observation {i}: ok"])[0]
              for i, (p, o) in enumerate(zip(first, turn1))]
    before = batcher.stats.reused_prompt_tokens
    turn2 = batcher.run(second)
    assert batcher.stats.reused_prompt_tokens - before >= sum(o.prompt_tokens for o in turn1)
    assert [o.token_ids for o in turn2] == [o.token_ids for o in _alone(loaded, second, params)]


def test_each_row_samples_with_its_own_settings_and_seed(loaded):
    tok = loaded.tokenizer
    prompts = _prompts(tok)
    seeded = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=0.9, seed=7)
    greedy = SamplingParams(max_new_tokens=5)
    alone = ContinuousBatcher(loaded.model, tok, seeded).run([prompts[1]])[0]
    batcher = ContinuousBatcher(loaded.model, tok, greedy, max_rows=4)
    batcher.add("greedy", prompts[0])
    batcher.add("seeded", prompts[1], seeded)
    batcher.add("other", prompts[2], SamplingParams(max_new_tokens=8, temperature=1.0, seed=8))
    outputs = {}
    while batcher.busy:
        outputs.update(batcher.step())
    # the seeded row drew from its own generator: same tokens as when it ran alone
    assert outputs["seeded"].token_ids == alone.token_ids
    assert outputs["greedy"].token_ids == _alone(loaded, [prompts[0]], greedy)[0].token_ids
    assert len(outputs["greedy"].token_ids) <= 5 and len(outputs["other"].token_ids) <= 8
    with pytest.raises(ValueError, match="max_new_tokens"):
        batcher.add("bad", prompts[0], SamplingParams(max_new_tokens=0))


def test_unsupported_models_are_refused_with_the_reason(tiny_checkpoint):
    eager = load_checkpoint(tiny_checkpoint, device="cpu", attn_implementation="eager")
    ok, why = continuous_batching_supported(eager.model)
    assert not ok and "eager" in why
    with pytest.raises(ValueError, match="not supported.*eager"):
        ContinuousBatcher(eager.model, eager.tokenizer)
    from unified.inference.hf import HFPolicy

    assert not HFPolicy(str(tiny_checkpoint), loaded=eager).supports_continuous_batching
    with pytest.raises(ValueError, match="eager"):
        HFPolicy(str(tiny_checkpoint), loaded=eager, continuous=True)


class StreamingScriptedPolicy(ChatModel):
    """A streaming policy without a model: a thread of its own "decodes" every 0.02 s, and request
    ``k`` of task ``echo_n`` ends after ``latency(n)`` steps with a fixed script (call ``echo`` once,
    then answer), so the schedule is observable."""

    name = "streaming_scripted"
    supports_continuous_batching = True

    def __init__(self, latency):
        super().__init__("streaming_scripted")
        self.latency, self.polls, self.inflight, self.log = latency, 0, {}, []
        self.lock, self.stopped = threading.Lock(), threading.Event()
        threading.Thread(target=self._engine, daemon=True).start()

    def submit(self, request, *, continuous=None):
        n = int(request.messages[1]["content"].rsplit(" ", 1)[-1].rstrip("."))
        turn = sum(m["role"] == "assistant" for m in request.messages)
        future = Future()
        with self.lock:
            self.inflight[future] = (self.polls + self.latency(n), n, turn)
            self.log.append(("submit", n, turn, self.polls))
        return future

    def _engine(self):
        while not self.stopped.wait(0.02):  # one "decode step" (the environment threads run meanwhile)
            with self.lock:
                self.polls += 1
                try:
                    for future, output in self.step():
                        future.set_result(output)
                except Exception as exc:  # the engine lost what it held: every waiter gets the error
                    for future in self.inflight:
                        future.set_exception(exc)
                    self.inflight.clear()

    def step(self):
        done = []
        for future, (due, n, turn) in list(self.inflight.items()):
            if self.polls >= due:
                del self.inflight[future]
                text = (f'<tool_call>{{"name": "echo", "arguments": {{"text": "{n}"}}}}</tool_call>' if turn == 0
                        else "finished")
                done.append((future, PolicyOutput(text=text, completion_tokens=3, seconds=0.01)))
                self.log.append(("done", n, turn, self.polls))
        return done

    def close(self):
        self.stopped.set()


def test_loop_schedules_continuously_without_waiting_for_slow_episodes():
    adapter = FixtureAdapter(n=3)
    # echo_0 answers in 1 poll, echo_1 in 2, echo_2 in 20
    policy = StreamingScriptedPolicy(lambda n: {0: 1, 1: 2, 2: 20}[n])
    results = AgentLoop(adapter, policy, max_in_flight=3).run([Job(t) for t in adapter.tasks()])
    assert all(r.passed for r in results) and len(results) == 3
    finished_fast = max(p for kind, n, turn, p in policy.log if kind == "done" and n == 0 and turn == 1)
    first_slow = min(p for kind, n, turn, p in policy.log if kind == "done" and n == 2)
    assert finished_fast < first_slow  # rounds would have held echo_0's second turn until echo_2's first ended
    # rounds on the same task set: the loop refuses continuous for a policy without it
    with pytest.raises(ValueError, match="continuous"):
        AgentLoop(adapter, make_rounds_only_policy(), scheduling="continuous").run([Job(adapter.tasks()[0])])


def make_rounds_only_policy():
    from fixture_eval_bench import EchoModel

    return EchoModel()


def test_loop_records_a_failing_engine_per_episode_and_goes_on():
    adapter = FixtureAdapter(n=2)

    class Failing(StreamingScriptedPolicy):
        failed = False

        def step(self):
            if self.inflight and not self.failed:  # the first step with work in it
                self.failed = True
                raise RuntimeError("engine fell over")
            return super().step()

    episodes = []
    results = AgentLoop(adapter, Failing(lambda n: 1), max_in_flight=1,
                        on_result=lambda r, e: episodes.append(e)).run([Job(t) for t in adapter.tasks()])
    by_id = {r.task_id: r for r in results}
    assert "engine fell over" in by_id["echo_0"].error and by_id["echo_1"].passed


@pytest.mark.slow
def test_hf_policy_continuous_equals_rounds(tiny_checkpoint, loaded):
    from unified.inference.hf import HFPolicy

    def run(scheduling):
        policy = HFPolicy(str(tiny_checkpoint), SamplingConfig(max_new_tokens=8, thinking=False),
                          loaded=loaded, max_batch_size=3)
        episodes = {}
        AgentLoop(FixtureAdapter(n=4), policy, limits=AgentLimits(max_turns=3), max_in_flight=3, scheduling=scheduling,
                  on_result=lambda r, e: episodes.__setitem__(e.task_id, e)).run(
            [Job(t) for t in FixtureAdapter(n=4).tasks()])
        return policy, {k: [s.completion_token_ids for s in e.steps] for k, e in episodes.items()}

    continuous_policy, continuous = run("auto")
    assert continuous_policy.supports_continuous_batching
    assert isinstance(continuous_policy.stats, ContinuousStats) and continuous_policy.stats.decode_steps > 0
    _, rounds = run("rounds")
    assert continuous == rounds and len(continuous) == 4
    assert all(len(turns) >= 1 and all(turns) for turns in continuous.values())


def test_row_attention_matches_padded_sdpa(loaded):
    """One decode step: per-row attention over unpadded KV equals the padded batch's logits."""
    tok, model = loaded.tokenizer, loaded.model
    prompts = _prompts(tok)
    batcher = ContinuousBatcher(model, tok, SamplingParams(max_new_tokens=1), max_rows=4)
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    rows = [batcher._admit(i, row) for i, row in enumerate(ids)]
    from unified.models.continuous import RowKVCache

    tokens = torch.tensor([[r.next_token] for r in rows])
    positions = torch.tensor([[r.length] for r in rows])
    mask = torch.ones((len(rows), 1, 1, 1), dtype=torch.bool)
    with torch.no_grad():
        rowwise = model(input_ids=tokens, position_ids=positions, attention_mask=mask, cache=RowKVCache(rows),
                        logits_to_keep=1).logits[:, -1]
        for i, row_ids in enumerate(ids):
            alone = model(input_ids=torch.tensor([row_ids])).logits[0, -1]
            assert torch.allclose(rowwise[i], alone, atol=1e-4, rtol=1e-4)


def test_generate_all_keeps_order_with_more_prompts_than_rows(loaded, tiny_checkpoint):
    from unified.models.continuous import generate_all

    params = SamplingParams(max_new_tokens=6)
    prompts = _prompts(loaded.tokenizer) * 2
    outputs = generate_all(loaded.model, loaded.tokenizer, prompts, params, max_batch_size=3)
    assert [o.token_ids for o in outputs] == [o.token_ids for o in _alone(loaded, prompts, params)]
    eager = load_checkpoint(tiny_checkpoint, device="cpu", attn_implementation="eager")  # falls back to rounds
    assert len(generate_all(eager.model, eager.tokenizer, prompts[:2], params)) == 2
