"""Tiny random mixture-of-experts models and a locally trained tokenizer, for fast unit tests.

Three architectures, the MoE families the library targets:

- ``qwen3_moe``: ``Qwen3MoeForCausalLM`` (full attention, top-k routed experts);
- ``qwen3_5_moe``: ``Qwen3_5MoeForCausalLM`` (the Qwen3.5-35B-A3B text stack: gated-DeltaNet
  linear attention interleaved with full attention, routed experts plus a shared expert);
- ``qwen3_5_moe_vl``: ``Qwen3_5MoeForConditionalGeneration``, the class and directory layout of the
  published Qwen3.5-35B-A3B checkpoint (vision tower, text stack with 3 linear-attention layers to
  one full-attention layer, experts; the published ``config.json`` keys, the vision special tokens
  and the image/video processor files), see :func:`save_tiny_checkpoint`.

The tokenizer is a byte-level BPE trained in well under a second on a small built-in corpus,
with the chat special tokens (``<|im_start|>``, ``<|im_end|>``, ``<think>``, ``<tool_call>`` ...)
and the library's Qwen3.5-style chat template, so tests exercise the same prompt code as a
real checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch

from unified.models.tiny_qwen35 import save_tiny_qwen35_checkpoint
from unified.models.tiny_tokenizer import train_tiny_tokenizer

TinyArch = Literal["qwen3_moe", "qwen3_5_moe", "qwen3_5_moe_vl"]

def tiny_moe_config(arch: TinyArch = "qwen3_moe", vocab_size: int = 512, *, num_experts: int = 4,
                    top_k: int = 2, hidden_size: int = 64, num_layers: int = 2, **overrides):
    """A config small enough for a forward+backward in milliseconds on CPU.

    ``overrides`` replace any other config field (e.g. ``num_attention_heads``, ``head_dim``,
    ``moe_intermediate_size``): the same code then builds the larger random models of
    :mod:`measurements.scale_bench`.
    """
    if arch == "qwen3_moe":
        from transformers import Qwen3MoeConfig

        return Qwen3MoeConfig(**{**dict(
            vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
            moe_intermediate_size=hidden_size, num_hidden_layers=num_layers, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_experts=num_experts, num_experts_per_tok=top_k,
            decoder_sparse_step=1, norm_topk_prob=True, max_position_embeddings=1024,
            output_router_logits=False, router_aux_loss_coef=0.01, tie_word_embeddings=False,
            eos_token_id=2, pad_token_id=0,
        ), **overrides})
    if arch == "qwen3_5_moe":
        from transformers import Qwen3_5MoeTextConfig

        return Qwen3_5MoeTextConfig(**{**dict(
            vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=max(num_layers, 2),
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_conv_kernel_dim=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
            moe_intermediate_size=hidden_size, shared_expert_intermediate_size=hidden_size,
            num_experts=num_experts, num_experts_per_tok=top_k, max_position_embeddings=1024,
            layer_types=["linear_attention", "full_attention"] * (max(num_layers, 2) // 2),
            router_aux_loss_coef=0.01, eos_token_id=2, pad_token_id=0,
        ), **overrides})
    if arch == "qwen3_5_moe_vl":
        raise ValueError("qwen3_5_moe_vl is a whole checkpoint directory in the published layout: "
                         "save_tiny_checkpoint(DIR, 'qwen3_5_moe_vl') (unified.models.tiny_qwen35)")
    raise ValueError(f"unknown tiny architecture {arch!r}; valid: qwen3_moe, qwen3_5_moe, qwen3_5_moe_vl")


def tiny_moe_model(arch: TinyArch = "qwen3_moe", *, seed: int = 0, vocab_size: int = 512,
                   experts_implementation: str = "eager", attn_implementation: str = "sdpa", **kwargs):
    """A randomly initialised tiny MoE causal LM (fp32, CPU)."""
    from transformers import AutoModelForCausalLM

    config = tiny_moe_config(arch, vocab_size, **kwargs)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(
        config, attn_implementation=attn_implementation, experts_implementation=experts_implementation,
        dtype=torch.float32,
    )


def save_tiny_checkpoint(directory: str | Path, arch: TinyArch = "qwen3_moe", *, seed: int = 0,
                         **config_kwargs) -> Path:
    """Write a tiny MoE model + tokenizer as a HF directory (what ``load_checkpoint`` reads).

    ``config_kwargs`` go to :func:`tiny_moe_config` (sizes, any config field); ``qwen3_5_moe_vl`` is
    :func:`unified.models.tiny_qwen35.save_tiny_qwen35_checkpoint` (fixed sizes)."""
    if arch == "qwen3_5_moe_vl":
        return save_tiny_qwen35_checkpoint(directory, seed=seed, **config_kwargs)
    directory = Path(directory)
    tokenizer = train_tiny_tokenizer()
    model = tiny_moe_model(arch, seed=seed, vocab_size=len(tokenizer), **config_kwargs)
    model.config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
