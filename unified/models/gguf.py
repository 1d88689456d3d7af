"""Reading a GGUF file and a tokenizer: the loaders that both the generic checkpoint loader
(:mod:`unified.models.checkpoint`) and the embedded model's build (:mod:`unified.models.embedded`, which
upcycles the dense GGUF) use, below both of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from unified.models.kernel_choice import KernelChoice


def is_moe_config(config: Any) -> bool:
    """True for configs with routed experts (Mixtral, Qwen3-MoE, Qwen3.5-MoE, ...)."""
    text_config = getattr(config, "text_config", None) or config
    return any(getattr(text_config, key, 0) for key in ("num_local_experts", "num_experts"))


def load_tokenizer(source: str, *, gguf_file: str | None = None, local_files_only: bool = False):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(source, gguf_file=gguf_file, local_files_only=local_files_only)


def load_gguf(path: Path, *, dtype: torch.dtype, kernels: KernelChoice):
    """Dequantise a GGUF file and copy it into a fresh, saveable model of the same architecture."""
    from transformers import AutoConfig, AutoModelForCausalLM

    directory, name = str(path.parent), path.name
    quantised = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(directory, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    moe = is_moe_config(config)
    extra = {"experts_implementation": kernels.experts} if moe else {}
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=kernels.attention, **extra)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"{path}: GGUF weights do not fit {type(model).__name__}: "
                           f"missing={missing[:5]} unexpected={unexpected[:5]}")
    if config.tie_word_embeddings:
        model.tie_weights()
    del quantised
    return model.to(dtype)
