"""Tiny random MoEs for the routing-replay and parity-probe tests: the embedded model's class (Mixtral) and
the Qwen3.5-MoE text stack, with routers sharp enough that choices are not ties, and a perturbed copy."""

from __future__ import annotations

import copy

import torch

from unified.models.routing_replay import moe_routers


def tiny_model(arch: str, seed: int = 0):
    """A tiny random MoE of the class ``arch`` (fp32, CPU, eager experts)."""
    from transformers import AutoModelForCausalLM, MixtralConfig

    if arch == "mixtral":  # the embedded checkpoint's class (unified.models.embedded), tiny sizes
        config = MixtralConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                               num_experts_per_tok=2, max_position_embeddings=256, router_jitter_noise=0.0,
                               pad_token_id=0, eos_token_id=1, bos_token_id=None)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, experts_implementation="eager",
                                                 attn_implementation="sdpa")
    else:
        from unified.models.tiny import tiny_moe_model

        model = tiny_moe_model(arch, seed=seed, vocab_size=96, hidden_size=32)
    for router in moe_routers(model):  # sharper routing than the 0.02-std init, so choices are not ties
        torch.nn.init.normal_(router.weight, std=0.5, generator=torch.Generator().manual_seed(seed + 7))
    return model.eval()


def perturbed(model, scale: float = 0.6, seed: int = 1):
    """A copy of ``model`` whose routers' weights are moved by noise: a rollout engine that routes otherwise."""
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for router in moe_routers(other):
            router.weight.add_(torch.randn(router.weight.shape, generator=gen) * scale)
    return other
