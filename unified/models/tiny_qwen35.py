"""A tiny random checkpoint in the published Qwen3.5-35B-A3B layout (``Qwen3_5MoeForConditionalGeneration``).

The paper's SFT checkpoint is a Qwen3.5-35B-A3B fine-tune, and that checkpoint's class is the
vision-language ``Qwen3_5MoeForConditionalGeneration``: a vision tower (``model.visual``) in front of
the text stack (``model.language_model``: 40 layers, 30 gated-DeltaNet linear attention and 10 full
attention, 3:1; 256 routed experts, top-8, plus a shared expert). :func:`save_tiny_qwen35_checkpoint`
writes the same thing at a size that trains in a fraction of a second on a CPU:

- ``config.json`` with the published keys, nested the published way: the outer
  ``architectures``/``model_type``/vision token ids/``tie_word_embeddings``, a ``text_config``
  (``model_type: qwen3_5_moe_text``, ``layer_types`` 3 linear : 1 full with ``full_attention_interval``,
  ``attn_output_gate``, the ``linear_*`` widths, ``mamba_ssm_dtype``, the experts, the ``mtp_*`` keys,
  ``rope_parameters`` with interleaved M-RoPE over a quarter of the head) and a ``vision_config``
  (``model_type: qwen3_5_moe_vision``, patch 16, spatial merge 2, temporal patch 2,
  ``out_hidden_size`` = the text width). Values are tiny; :data:`PUBLISHED_TEXT_SIZES` and
  :data:`PUBLISHED_VISION_SIZES` name the real ones it shrinks;
- sharded safetensors with ``model.safetensors.index.json`` under the published tensor names
  (``model.language_model.*``, ``model.visual.*``, ``lm_head.weight``);
- ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``, ``chat_template.jinja``
  (the library's tiny BPE tokenizer plus the four vision special tokens, whose ids the config names);
- ``preprocessor_config.json`` and ``video_preprocessor_config.json`` (Qwen3-VL's image and video
  processors: what vLLM loads to start this class).

- the multi-token-prediction head (``mtp_num_hidden_layers: 1``) as ``mtp.*`` tensors in a shard of their own:
  ``mtp.fc`` (2 x width -> width), its three norms and ``mtp.layers.0.*``, one full-attention decoder layer
  (a copy of layer 3's tensors). Transformers does not load them (docs/checkpoints.md).

Not reproduced: the slow tokenizer's ``vocab.json``/``merges.txt`` (the fast ``tokenizer.json`` is what
every reader uses).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from unified.models.tiny_tokenizer import train_tiny_tokenizer

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Special tokens of the Qwen3-VL processor; the config's ``vision_start_token_id`` ...
``video_token_id`` are their ids in the tokenizer."""

PUBLISHED_TEXT_SIZES = dict(
    hidden_size=2048, num_hidden_layers=40, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
    linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
    num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512, shared_expert_intermediate_size=512,
    vocab_size=248320, max_position_embeddings=262144, mtp_num_hidden_layers=1,
)
"""Qwen3.5-35B-A3B's ``text_config`` sizes (what the tiny ``text_config`` shrinks)."""
PUBLISHED_VISION_SIZES = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                              num_position_embeddings=2304, out_hidden_size=2048)
"""Its ``vision_config`` sizes (patch 16, merge 2, temporal patch 2 are kept as published)."""

TINY_IMAGE_PIXELS = {"shortest_edge": 32 * 32, "longest_edge": 128 * 128}
"""Image/video pixel bounds of the tiny processors: at most 64 patches (16 merged tokens) an image,
so vLLM's start-up profile of the vision tower stays small (the published bounds allow 16M pixels)."""


def tiny_qwen35_config_dict(vocab_size: int, token_ids: dict[str, int], *, eos_token_id: int,
                            pad_token_id: int | None) -> dict:
    """The ``config.json`` of the tiny checkpoint, keys and nesting as in the published one."""
    layers = 4
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "bos_token_id": None,
        "dtype": "float32", "eos_token_id": eos_token_id, "full_attention_interval": 4, "head_dim": 32,
        "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
        "layer_types": ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)],
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144, "model_type": "qwen3_5_moe_text", "moe_intermediate_size": 32,
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False, "num_attention_heads": 2,
        "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": layers, "num_key_value_heads": 1,
        "output_router_logits": False, "pad_token_id": pad_token_id, "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-6,
        # a quarter of the 32-wide head rotates: 8 dims, 4 frequencies split over (t, h, w)
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.25,
                            "rope_theta": 10000000, "rope_type": "default"},
        "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 32, "tie_word_embeddings": False,
        "use_cache": True, "vocab_size": vocab_size,
    }
    vision = {
        "deepstack_visual_indexes": [], "depth": 1, "dtype": "float32", "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 64, "in_channels": 3, "initializer_range": 0.02, "intermediate_size": 128,
        "model_type": "qwen3_5_moe_vision", "num_heads": 2, "num_position_embeddings": 64,
        "out_hidden_size": text["hidden_size"], "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
    }
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "dtype": "float32",
        "image_token_id": token_ids["<|image_pad|>"], "model_type": "qwen3_5_moe", "text_config": text,
        "tie_word_embeddings": False, "video_token_id": token_ids["<|video_pad|>"], "vision_config": vision,
        "vision_end_token_id": token_ids["<|vision_end|>"], "vision_start_token_id": token_ids["<|vision_start|>"],
    }


def _processor_files(vision: dict) -> dict[str, dict]:
    """Qwen3-VL's image and video processor configs, sized for the tiny vision tower."""
    common = {"size": dict(TINY_IMAGE_PIXELS), "patch_size": vision["patch_size"],
              "temporal_patch_size": vision["temporal_patch_size"], "merge_size": vision["spatial_merge_size"],
              "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}
    return {"preprocessor_config.json": {**common, "image_processor_type": "Qwen2VLImageProcessorFast"},
            "video_preprocessor_config.json": {**common, "video_processor_type": "Qwen3VLVideoProcessor"}}


def save_tiny_qwen35_checkpoint(directory: str | Path, *, seed: int = 0, max_shard_size: str = "300KB") -> Path:
    """Write the tiny ``Qwen3_5MoeForConditionalGeneration`` checkpoint (module docstring) to ``directory``."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)},
                                 replace_extra_special_tokens=False)
    token_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    published = tiny_qwen35_config_dict(len(tokenizer), token_ids, pad_token_id=tokenizer.pad_token_id,
                                        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"))
    (directory / "config.json").write_text(json.dumps(published, indent=2) + "\n")
    config = AutoConfig.from_pretrained(directory)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = published["text_config"]["eos_token_id"]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory, max_shard_size=max_shard_size)
    _add_mtp_shard(directory, published["text_config"])
    # save_pretrained writes transformers' own form of the config: put the published form back
    (directory / "config.json").write_text(json.dumps(published, indent=2) + "\n")
    tokenizer.save_pretrained(directory)
    for name, content in _processor_files(published["vision_config"]).items():
        (directory / name).write_text(json.dumps(content, indent=2) + "\n")
    return directory


def _add_mtp_shard(directory: Path, text: dict) -> None:
    """The ``mtp.*`` tensors (module docstring) as ``model-mtp.safetensors``, listed in the index."""
    from safetensors.torch import load_file, save_file

    index_path = directory / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    full = text["layer_types"].index("full_attention")
    prefix = f"model.language_model.layers.{full}."
    mtp: dict[str, torch.Tensor] = {}
    for shard in sorted(set(index["weight_map"].values())):
        for name, tensor in load_file(directory / shard).items():
            if name.startswith(prefix):
                mtp["mtp.layers.0." + name[len(prefix):]] = tensor.clone()
    width = text["hidden_size"]
    generator = torch.Generator().manual_seed(1)
    mtp["mtp.fc.weight"] = torch.randn(width, 2 * width, generator=generator) * 0.02
    for norm in ("mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"):
        mtp[norm] = torch.zeros(width)  # Qwen3.5's RMSNorm scales by 1 + weight
    save_file(mtp, str(directory / "model-mtp.safetensors"), metadata={"format": "pt"})
    index["weight_map"].update({name: "model-mtp.safetensors" for name in mtp})
    index["weight_map"] = dict(sorted(index["weight_map"].items()))
    index_path.write_text(json.dumps(index, indent=2) + "\n")
