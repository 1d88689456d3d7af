"""Routing replay (unified.models.routing_replay) on tiny random MoEs: the embedded model's class
(Mixtral) and the Qwen3.5-MoE text stack (gated DeltaNet + routed and shared experts)."""

from __future__ import annotations

import copy

import pytest
import torch

from unified.models.routing_replay import (
    NO_ROUTE, RouteLayout, RoutingReplay, moe_routers, pad_routes, route_dtype, routes_from_generation,
    routes_from_vllm, share_prompt_routes,
)

from _moe_support import perturbed, tiny_model

ARCHS = ("mixtral", "qwen3_5_moe")


def token_logps(model, ids: torch.Tensor) -> torch.Tensor:
    """(B, T-1) log-probs of ids[:, 1:] from one full forward."""
    logits = model(input_ids=ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def reference_with_decisions_of(trainer, rollout):
    """An independent reference: a copy of ``trainer`` whose every router picks its top-k from the
    ``rollout``'s router logits and weighs them with its own softmax (the replay rule, written out)."""
    ref = copy.deepcopy(trainer)
    for mine, theirs in zip(moe_routers(ref), moe_routers(rollout), strict=True):
        def forward(h, mine=mine, theirs=theirs):
            h = h.reshape(-1, mine.hidden_dim)
            logits = torch.nn.functional.linear(h, mine.weight)
            pick = torch.topk(torch.nn.functional.linear(h, theirs.weight).float().softmax(-1), mine.top_k).indices
            probs = logits.float().softmax(-1).gather(-1, pick)
            return logits, (probs / probs.sum(-1, keepdim=True)).to(logits.dtype if "Qwen" in type(mine).__name__
                                                                   else torch.float32), pick
        mine.forward = forward
    return ref


@pytest.mark.parametrize("arch", ARCHS)
def test_forced_routes_reproduce_the_rollout_routing_exactly(arch):
    trainer = tiny_model(arch)
    rollout = perturbed(trainer)
    ids = torch.randint(2, 96, (2, 12), generator=torch.Generator().manual_seed(3))
    recorder = RoutingReplay(rollout)
    with torch.no_grad(), recorder.recording():
        rollout(input_ids=ids)
    routes = recorder.recorded_routes()
    layout = RouteLayout.of(trainer)
    assert routes.shape == (2, 12, layout.layers, layout.top_k) and routes.dtype == torch.int8

    replay = RoutingReplay(trainer)
    with torch.no_grad():
        live = token_logps(trainer, ids)
        with replay.replaying(routes):
            replayed = token_logps(trainer, ids)
        expected = token_logps(reference_with_decisions_of(trainer, rollout), ids)
    assert torch.allclose(replayed, expected, atol=1e-6, rtol=0), (replayed - expected).abs().max()
    # the perturbed rollout router chose other experts: the metric shows it and live log-probs differ
    assert 0 < replay.agreement.share < 1
    assert replay.agreement.total == 2 * 12 * layout.layers
    assert (live - replayed).abs().max() > 1e-4
    # replaying the trainer's own routes is the identity
    own = RoutingReplay(trainer)
    with torch.no_grad(), own.recording():
        trainer(input_ids=ids)
    with torch.no_grad(), own.replaying(own.recorded_routes()):
        again = token_logps(trainer, ids)
    assert own.agreement.share == 1.0
    assert torch.equal(again, live)


@pytest.mark.parametrize("arch", ARCHS)
def test_router_gradient_flows_through_the_live_logits_under_replay(arch):
    trainer = tiny_model(arch).train()
    rollout = perturbed(trainer)
    ids = torch.randint(2, 96, (2, 10), generator=torch.Generator().manual_seed(4))
    recorder = RoutingReplay(rollout)
    with torch.no_grad(), recorder.recording():
        rollout(input_ids=ids)
    replay = RoutingReplay(trainer)
    with replay.replaying(recorder.recorded_routes()):
        token_logps(trainer, ids).sum().backward()
    for router in moe_routers(trainer):
        assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_routes_recorded_during_generation_replay_in_the_trainers_layout(arch):
    """generate (left-padded prompts, KV-cache decoding) -> per-sample routes -> TRL's padded layout ->
    a full forward under replay: with the same weights the trainer agrees everywhere and its log-probs are
    its live ones; with a perturbed rollout router it follows the rollout's routes."""
    trainer = tiny_model(arch)
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    att = (ids != 0).long()
    for engine, same in ((trainer, True), (perturbed(trainer), False)):
        recorder = RoutingReplay(engine)
        with torch.no_grad(), recorder.recording():
            out = engine.generate(input_ids=ids, attention_mask=att, max_new_tokens=4, do_sample=False,
                                  pad_token_id=0, eos_token_id=None)
        completions = [row.tolist() for row in out[:, width:]]
        per_sample = routes_from_generation(recorder.recorded_routes(), [len(p) for p in prompts],
                                            [len(c) for c in completions])
        assert [r.shape[0] for r in per_sample] == [len(p) + 4 for p in prompts]
        assert (per_sample[0][-1] == NO_ROUTE).all() and (per_sample[0][:-1] >= 0).all()
        routes = pad_routes(per_sample, [len(p) for p in prompts], width, 4)
        full = torch.cat([ids, torch.tensor(completions)], dim=1)
        full_att = torch.cat([att, torch.ones(2, 4, dtype=torch.long)], dim=1)
        replay = RoutingReplay(trainer)
        with torch.no_grad():
            live = trainer(input_ids=full, attention_mask=full_att).logits
            with replay.replaying(routes):
                replayed = trainer(input_ids=full, attention_mask=full_att).logits
        real = full_att.bool()
        assert replay.agreement.total == (int(real.sum()) - 2) * RouteLayout.of(trainer).layers  # last tokens
        if same:
            assert replay.agreement.share == 1.0
            assert torch.allclose(live[real], replayed[real], atol=1e-5)
        else:
            assert replay.agreement.share < 1.0
            assert (live[real] - replayed[real]).abs().max() > 1e-4


def test_a_groups_completions_share_the_prompts_routes():
    a = torch.arange(5 * 2 * 2, dtype=torch.int8).reshape(5, 2, 2)
    b = a.clone()
    b[:3] = 0  # the same prompt, recomputed otherwise
    c = a.clone()
    shared = share_prompt_routes([a, b, c], [[1, 2, 3], [1, 2, 3], [4, 5]])
    assert torch.equal(shared[1][:3], a[:3]) and torch.equal(shared[1][3:], b[3:])
    assert torch.equal(shared[2], c)  # another prompt keeps its own


def test_route_memory_per_token_is_layers_times_top_k_times_the_id_width():
    for arch in ARCHS:
        model = tiny_model(arch)
        layout = RouteLayout.of(model)
        recorder = RoutingReplay(model)
        with torch.no_grad(), recorder.recording():
            model(input_ids=torch.ones(3, 7, dtype=torch.long))
        routes = recorder.recorded_routes()
        assert routes.element_size() * routes[0, 0].numel() == layout.bytes_per_token == layout.layers * 2 * 1
    assert RouteLayout(layers=40, top_k=8, num_experts=256).bytes_per_token == 640  # Qwen3.5-35B-A3B
    assert RouteLayout(layers=30, top_k=2, num_experts=4).bytes_per_token == 60  # the embedded Mixtral
    assert route_dtype(127) == torch.int8 and route_dtype(128) == torch.int16


def test_vllm_routed_experts_parse_and_are_checked():
    import numpy as np

    raw = np.array([[[0, 3], [1, 2]], [[2, 3], [0, 1]]], dtype=np.int32)  # (T=2, L=2, k=2)
    routes = routes_from_vllm(raw, num_experts=4, length=3)
    assert routes.dtype == torch.int8 and routes.shape == (3, 2, 2) and (routes[2] == NO_ROUTE).all()
    with pytest.raises(ValueError, match="outside"):
        routes_from_vllm(raw, num_experts=3)
    with pytest.raises(ValueError, match="tokens, layers, top_k"):
        routes_from_vllm(raw[0], num_experts=4)


def test_replay_refuses_routes_of_another_shape():
    model = tiny_model("mixtral")
    replay = RoutingReplay(model)
    with pytest.raises(ValueError, match="expected"):
        replay.set_routes(torch.zeros(1, 4, 3, 2, dtype=torch.int8))
    with pytest.raises(RuntimeError, match="routes for"), replay.replaying(torch.zeros(1, 4, 2, 2, dtype=torch.int8)):
        model(input_ids=torch.ones(1, 5, dtype=torch.long))
