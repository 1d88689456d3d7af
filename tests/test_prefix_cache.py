"""KV prefix caching (unified.models.prefix_cache) in batched generation, on tiny real MoE models."""

import pytest
import torch

from unified.models import load_checkpoint
from unified.models.generation import GenerationStats, SamplingParams, batched_generate
from unified.models.prefix_cache import PrefixCache, common_prefix_length

SYSTEM = ("You are an agent with tools. The agent calls a tool and the environment answers with an observation. "
          "Predict the next observation of the environment given the history and the action. ") * 3


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint, device="cpu", experts_implementation="eager")


def _prompt(tok, messages):
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _snapshot(cache: PrefixCache):
    return {k: (e.ids.clone(), [t.clone() for t in e.keys], [t.clone() for t in e.values])
            for k, e in cache._entries.items()}


def test_common_prefix_length():
    a = torch.tensor([1, 2, 3, 4])
    assert common_prefix_length(a, torch.tensor([1, 2, 9])) == 2
    assert common_prefix_length(a, torch.tensor([1, 2])) == 2
    assert common_prefix_length(a, torch.tensor([5])) == 0
    assert common_prefix_length(a, a) == 4


def test_greedy_identical_with_cache_multi_turn_and_shared_prefix(loaded):
    tok, model = loaded.tokenizer, loaded.model
    params = SamplingParams(max_new_tokens=10)
    conversations = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "list the files"}],
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "predict the next observation please"}],
        [{"role": "user", "content": "hi"}],
    ]
    cache, stats = PrefixCache(max_bytes=64 << 20), GenerationStats()
    prompts = [_prompt(tok, c) for c in conversations]
    plain = batched_generate(model, tok, prompts, params)
    cached = batched_generate(model, tok, prompts, params, prefix_cache=cache, stats=stats)
    assert [o.token_ids for o in cached] == [o.token_ids for o in plain]
    # row 1 shares the long system prompt with row 0 of the same batch: its KV was reused
    shared = common_prefix_length(*(torch.tensor(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts[:2]))
    assert shared > 50 and stats.reused_prompt_tokens >= shared
    assert stats.prefill_seconds > 0 and stats.decode_seconds > 0 and stats.completion_tokens > 0

    # turn 2: each prompt extends turn 1's prompt + completion (raw ids, so the text boundary may retokenise)
    turn2 = [p + o.text + "<|im_end|>\n" + _prompt(tok, [{"role": "user", "content": f"observation {i}: ok"}])
             for i, (p, o) in enumerate(zip(prompts, plain))]
    before = stats.reused_prompt_tokens
    cached2 = batched_generate(model, tok, turn2, params, prefix_cache=cache, stats=stats)
    plain2 = batched_generate(model, tok, turn2, params)
    assert [o.token_ids for o in cached2] == [o.token_ids for o in plain2]
    # nearly all of every turn-2 prompt came from the cache (at least the turn-1 prompts)
    assert stats.reused_prompt_tokens - before >= sum(o.prompt_tokens for o in plain)
    # one at a time through the same cache: still identical (batch-1 path uses the cache too)
    alone = [batched_generate(model, tok, [p], params, prefix_cache=cache)[0] for p in turn2]
    assert [o.token_ids for o in alone] == [o.token_ids for o in plain2]


def test_cached_entries_are_never_mutated(loaded):
    tok, model = loaded.tokenizer, loaded.model
    params = SamplingParams(max_new_tokens=6)
    cache = PrefixCache(max_bytes=64 << 20)
    base = _prompt(tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "list"}])
    batched_generate(model, tok, [base], params, prefix_cache=cache)
    snap = _snapshot(cache)
    assert snap
    # two rows branch off the same cached entry in one batch, each with a different suffix
    branches = [base + "x<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n",
                base + "ls -la<|im_end|>\n<|im_start|>user\nerror<|im_end|>\n<|im_start|>assistant\n"]
    batched_generate(model, tok, branches, params, prefix_cache=cache)
    assert cache.stats.reused_tokens > 0 and set(snap) & set(cache._entries)
    for key, (ids, keys, values) in snap.items():
        if key in cache._entries:  # still stored (not subsumed): bit-identical
            entry = cache._entries[key]
            assert torch.equal(entry.ids, ids)
            assert all(torch.equal(a, b) for a, b in zip(entry.keys + entry.values, keys + values))


def test_eviction_bounds_memory_and_prefix_entries_are_subsumed(loaded):
    tok, model = loaded.tokenizer, loaded.model
    params = SamplingParams(max_new_tokens=4)
    prompts = [_prompt(tok, [{"role": "user", "content": f"task {i}: " + "list the files " * (i + 1)}])
               for i in range(6)]
    probe = PrefixCache(max_bytes=1 << 30)
    batched_generate(model, tok, prompts[:1], params, prefix_cache=probe)
    one_entry = probe.nbytes
    assert len(probe) == 1 and one_entry > 0  # the prompt entry was replaced by prompt + completion
    budget = int(one_entry * 2.5)
    cache = PrefixCache(max_bytes=budget)
    for p in prompts:
        batched_generate(model, tok, [p], params, prefix_cache=cache)
        assert cache.nbytes <= budget
    assert cache.stats.evicted > 0 and 1 <= len(cache) <= 2
    assert PrefixCache(max_bytes=1 << 30, max_entries=2).max_entries == 2
    counted = PrefixCache(max_bytes=1 << 30, max_entries=2)
    for p in prompts[:4]:
        batched_generate(model, tok, [p], params, prefix_cache=counted)
    assert len(counted) == 2
    off = PrefixCache(max_bytes=0)
    out = batched_generate(model, tok, prompts[:2], params, prefix_cache=off)
    assert len(off) == 0 and not off.enabled and len(out) == 2


def test_linear_attention_model_falls_back(tiny_tokenizer):
    from unified.models.tiny import tiny_moe_model

    tok = tiny_tokenizer
    model = tiny_moe_model("qwen3_5_moe", vocab_size=len(tok))
    model.generation_config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    prompts = [_prompt(tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": t}]) for t in ("a", "bb")]
    cache = PrefixCache(max_bytes=64 << 20)
    params = SamplingParams(max_new_tokens=5)
    with_cache = batched_generate(model, tok, prompts, params, prefix_cache=cache)
    without = batched_generate(model, tok, prompts, params, prefix_cache=None, prefill_separately=False)
    assert [o.token_ids for o in with_cache] == [o.token_ids for o in without]
    assert len(cache) == 0


def test_hf_policy_cache_switch(loaded, monkeypatch):
    from unified.inference.base import PolicyRequest, SamplingConfig
    from unified.inference.hf import HFPolicy

    sampling = SamplingConfig(max_new_tokens=5)
    on = HFPolicy("tiny", sampling, loaded=loaded)
    request = PolicyRequest(messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}])
    first = on.generate([request])[0]
    second = on.generate([request])[0]
    assert first.token_ids == second.token_ids and on.stats.reused_prompt_tokens >= first.prompt_tokens - 1
    monkeypatch.setenv("UNIFIED_PREFIX_CACHE_MB", "0")
    off = HFPolicy("tiny", sampling, loaded=loaded)
    assert off.generate([request])[0].token_ids == first.token_ids
    assert not off.prefix_cache.enabled and off.stats.reused_prompt_tokens == 0
    on.close()
    assert len(on.prefix_cache) == 0


def test_bench_batching_runs_real_bfcl_episodes(tiny_checkpoint, tmp_path, capsys):
    pytest.importorskip("bfcl_eval")
    from measurements.bench_batching import main

    import glob
    import tempfile

    def leftovers() -> set[str]:
        return set(glob.glob(f"{tempfile.gettempdir()}/unified-bench-batching-*"))

    before = leftovers()
    out = tmp_path / "bench.json"
    assert main(["--model", str(tiny_checkpoint), "--tasks", "2", "--categories", "simple_python",
                 "--max-new-tokens", "3", "--max-turns", "1", "--json", str(out)]) == 0
    assert leftovers() <= before, "bench_batching left its work directory behind"
    import json

    report = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert "batched / sequential" in printed and report["tasks"] == ["simple_python_0", "simple_python_1"]
    for mode, in_flight in (("batched", 2), ("sequential", 1)):
        figures = report["modes"][mode]
        assert figures["max_in_flight"] == in_flight and figures["episodes"] == 2 and figures["errors"] == 0
        assert figures["completion_tokens"] > 0 and figures["prefill_seconds"] > 0 and figures["decode_seconds"] > 0
    # environments open on worker threads, so continuous batching admits each episode when its
    # environment is ready: one or two admissions; they still decode together (checked below)
    assert report["modes"]["batched"]["policy_calls"] in (1, 2) and report["modes"]["sequential"]["policy_calls"] == 2
    assert report["speedup_episodes_per_s"] > 0 and report["episodes_with_identical_completions"] == 2
    # continuous batching (the default): both episodes decoded together, one at a time in the sequential mode
    assert report["scheduling"] == "auto" and report["modes"]["batched"]["mean_rows_per_decode_step"] > 1
    assert report["modes"]["sequential"]["mean_rows_per_decode_step"] == 1


def test_sampling_in_the_shrinking_batch_decode(loaded):
    tok, model = loaded.tokenizer, loaded.model
    prompts = [_prompt(tok, [{"role": "user", "content": t}]) for t in ("list the files", "hi")]
    seeded = SamplingParams(max_new_tokens=8, temperature=1.0, seed=3)
    first = batched_generate(model, tok, prompts, seeded)
    again = batched_generate(model, tok, prompts, seeded)
    assert [o.token_ids for o in first] == [o.token_ids for o in again]
    # a nucleus this small keeps only the most likely token: greedy
    narrow = batched_generate(model, tok, prompts, SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1e-6, seed=3))
    greedy = batched_generate(model, tok, prompts, SamplingParams(max_new_tokens=8))
    assert [o.token_ids for o in narrow] == [o.token_ids for o in greedy]
