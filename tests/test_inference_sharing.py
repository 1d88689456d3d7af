"""One copy of a model per process, shared by policy, judge, simulated user and search; thread safety;
per-request max_tokens; log-probs from every in-process path and the local server."""

import threading

import pytest
import torch

from unified.inference import PolicyRequest, SamplingConfig, make_chat_model, shared_chat_model, shared_checkpoint
from unified.inference import shared as shared_module
from unified.inference.endpoints import resolve_endpoint, stop_local_servers


@pytest.fixture()
def fresh_registry():
    """Each test starts with no model loaded in the process registry."""
    stop_local_servers()
    shared_module.clear()
    yield shared_module
    stop_local_servers()
    shared_module.clear()


def _loads(registry) -> int:
    return sum(registry.LOAD_COUNTS.values())


def test_policy_judge_user_search_and_world_model_load_the_model_once(tiny_checkpoint, fresh_registry):
    from evaluators.widesearch.search import SimulatedSearch
    from unified.inference.judge import make_judge
    from unified.lwm.evaluation import WorldModel

    before = _loads(fresh_registry)
    spec = str(tiny_checkpoint)
    policy = make_chat_model(spec, SamplingConfig(max_new_tokens=4))
    judge = make_judge(spec, max_tokens=5)
    user = resolve_endpoint(spec)  # an HTTP endpoint (what a sandboxed grader or a checkout's client needs)
    judge_endpoint = resolve_endpoint(spec)
    search = SimulatedSearch(spec, max_tokens=6)
    world_model = WorldModel(spec, max_new_tokens=4)
    lwm_judge = make_judge(spec, max_tokens=4, batch_size=4)
    # every caller really generates
    out = policy.generate([PolicyRequest(messages=[{"role": "user", "content": "hi"}])])[0]
    assert out.completion_tokens >= 1
    assert all(isinstance(a, str) for a, _cached in judge.complete([[{"role": "user", "content": "score it"}]]))
    reply = user.client.chat([{"role": "user", "content": "hello"}], max_tokens=3, temperature=0.7)
    assert reply.completion_tokens <= 3 and reply.prompt_tokens > 0
    assert judge_endpoint.config.base_url == user.config.base_url  # one server for judge and user
    assert search.search("query").startswith("[simulated]")
    assert not isinstance(world_model.predict([[{"role": "user", "content": "predict"}]])[0], Exception)
    assert isinstance(lwm_judge.complete([[{"role": "user", "content": "judge"}]])[0][0], str)
    # one load, one set of weights
    assert _loads(fresh_registry) - before == 1
    weights = {id(policy.loaded.model), id(judge.loaded.model), id(search.chat_model.loaded.model),
               id(world_model.loaded.model), id(lwm_judge.loaded.model)}
    assert weights == {id(shared_checkpoint(spec).model)}


def test_concurrent_chat_calls_from_threads_are_safe_and_deterministic(tiny_checkpoint, fresh_registry):
    """Greedy answers from 8 threads at once (each with its own max_tokens, some through the local
    server) are exactly the answers of the same calls made one after another."""
    before = _loads(fresh_registry)
    spec = str(tiny_checkpoint)
    model = shared_chat_model(spec)
    endpoint = resolve_endpoint(spec)
    prompts = [[{"role": "user", "content": f"question number {i} about the workspace"}] for i in range(8)]
    budgets = [2 + i for i in range(8)]

    def call(i):
        if i % 2:
            result = endpoint.client.chat(prompts[i], max_tokens=budgets[i], temperature=0)
            return result.text, result.completion_tokens
        policy_out = model.generate([PolicyRequest(messages=prompts[i], max_new_tokens=budgets[i], temperature=0.0,
                                                   thinking=False)])[0]
        return model.chat(prompts[i], max_tokens=budgets[i]), policy_out.completion_tokens

    sequential = [call(i) for i in range(8)]
    results: dict[int, object] = {}

    def worker(i):
        try:
            results[i] = call(i)
        except Exception as exc:  # reported below
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert [results[i] for i in range(8)] == sequential
    assert all(tokens <= budget for (_, tokens), budget in zip(sequential, budgets))
    assert _loads(fresh_registry) - before == 1


def test_one_server_serves_every_max_tokens(tiny_checkpoint, fresh_registry):
    endpoint = resolve_endpoint(str(tiny_checkpoint))
    client = endpoint.client
    lengths = {}
    for budget in (1, 3, 12):
        result = client.chat([{"role": "user", "content": "write a long story"}], max_tokens=budget, temperature=0)
        lengths[budget] = result.completion_tokens
        assert result.completion_tokens <= budget
    assert lengths[1] == 1 and max(lengths.values()) > 1  # the random model runs past 1 token


# ------------------------------------------------------------------------------------------ log-probs


def _recomputed(loaded, prompt_ids, token_ids, temperature=0.0):
    """log softmax(logits / T) of each generated token from one forward pass over prompt + completion."""
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    with torch.no_grad():
        logits = loaded.model(input_ids=ids).logits[0].float()  # (n + k, V)
    n = len(prompt_ids)
    rows = logits[n - 1:n - 1 + len(token_ids)]  # the logits that predicted each generated token
    if temperature > 0:
        rows = rows / temperature
    logp = torch.log_softmax(rows, dim=-1)
    return [float(logp[t, tok]) for t, tok in enumerate(token_ids)]


@pytest.mark.parametrize("continuous", [False, True])
def test_greedy_logprobs_equal_a_forward_pass_over_prompt_and_completion(tiny_checkpoint, fresh_registry, continuous):
    policy = make_chat_model(str(tiny_checkpoint), SamplingConfig(max_new_tokens=10), continuous=continuous)
    requests = [PolicyRequest(messages=[{"role": "user", "content": text}])
                for text in ("hello there", "list the files of the workspace please")]
    if continuous:
        outputs = [future.result() for future in [policy.submit(request) for request in requests]]
    else:
        outputs = policy.generate(requests)
    for out in outputs:
        assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids) >= 1
        expected = _recomputed(policy.loaded, out.prompt_token_ids, out.token_ids)
        assert out.logprobs == pytest.approx(expected, abs=1e-4)
        assert all(lp <= 0 for lp in out.logprobs)


def test_sampled_logprobs_are_under_the_tempered_distribution(tiny_checkpoint, fresh_registry):
    policy = make_chat_model(str(tiny_checkpoint), SamplingConfig(max_new_tokens=8, temperature=0.7, seed=3),
                             continuous=True)
    out = policy.submit(PolicyRequest(messages=[{"role": "user", "content": "sample something"}])).result()
    expected = _recomputed(policy.loaded, out.prompt_token_ids, out.token_ids, temperature=0.7)
    assert out.logprobs == pytest.approx(expected, abs=1e-4)


def test_local_server_returns_logprobs_when_asked(tiny_checkpoint, fresh_registry, monkeypatch):
    spec = str(tiny_checkpoint)
    local = make_chat_model(spec, SamplingConfig(max_new_tokens=6, thinking=False))
    request = PolicyRequest(messages=[{"role": "user", "content": "hello"}])
    reference = local.generate([request])[0]
    endpoint = resolve_endpoint(spec)
    monkeypatch.setenv("OPENAI_API_KEY", endpoint.config.api_key)  # the server's token, as a plain spec's client sends it
    remote = make_chat_model(endpoint.config and f"openai:{endpoint.config.base_url}#{endpoint.config.model}",
                             SamplingConfig(max_new_tokens=6, thinking=False), logprobs=True)
    served = remote.generate([request])[0]
    assert served.logprobs == pytest.approx(reference.logprobs, abs=1e-4)
    assert len(served.logprobs) == served.completion_tokens
    plain = make_chat_model(remote.model, SamplingConfig(max_new_tokens=6, thinking=False))
    assert plain.generate([request])[0].logprobs is None  # only when asked
