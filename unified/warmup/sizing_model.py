"""The dimensions of a decoder the memory/time plan needs, and its parameter counts.

:class:`ModelDims` is read from a checkpoint's ``config.json`` (:func:`dims_from_config`; a
vision-language config's ``text_config`` is the text stack, its ``vision_config`` a frozen tower) or
taken from a named preset (:data:`PRESETS`). Nothing here imports torch or transformers: the plan
runs in ``--dry-run`` before anything heavy loads.

The ``qwen3.5-35b-a3b`` preset holds Qwen3.5-35B-A3B's published dimensions, the defaults of
transformers 5.24's ``Qwen3_5MoeTextConfig`` (whose docstring names that checkpoint; a test compares
them): 40 layers (30 Gated DeltaNet + 10 full attention, 3:1), hidden 2048, 16 query / 2 KV heads of
256 with an output gate, Gated DeltaNet 16 key / 32 value heads of 128 (conv kernel 4, fp32 SSM
state), 256 routed experts of width 512, top-8, one shared expert of 512, vocabulary 248,320, untied
LM head. The vision tower (frozen in the warmup) is 446.6M parameters (docs/checkpoints.md).

Parameter counts (``h`` hidden, ``V`` vocabulary, all bias-free as in these families):

- full attention: ``h*nq*d*(2 if gated else 1) + 2*h*nkv*d + nq*d*h`` (+ ``2*d`` with q/k norms);
- Gated DeltaNet: ``in_proj_qkv h*(2*Kd+Vd)``, ``in_proj_z h*Vd``, ``in_proj_b/a 2*h*nv``,
  ``conv (2*Kd+Vd)*kernel``, ``A_log, dt_bias 2*nv``, norm ``dv``, ``out_proj Vd*h``
  (``Kd = nk*dk``, ``Vd = nv*dv``);
- MoE block: router ``h*E`` + experts ``E*3*h*I`` + shared expert ``3*h*Is + h`` (its sigmoid gate);
  a dense MLP ``3*h*I``;
- two RMSNorms a layer (``2h``), the final norm, embeddings ``V*h``, LM head ``V*h`` unless tied.

Per token a forward touches the *active* parameters: attention, router, ``k`` of the ``E`` experts,
the shared expert and the LM head (the embedding is a lookup, no matmul).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelDims:
    """A decoder-only (optionally MoE, optionally hybrid linear-attention) text stack."""

    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    full_attention_layers: int
    """Layers with softmax attention (a KV cache); the rest are Gated DeltaNet layers."""
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    attn_output_gate: bool = False
    qk_norm: bool = False
    """Per-head RMSNorm of q and k (Qwen3, Qwen3.5)."""
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 4
    ssm_state_bytes: int = 4
    """Bytes of one element of the recurrent state (``mamba_ssm_dtype: float32`` -> 4)."""
    dense_intermediate: int = 0
    """MLP width of a dense layer (0: every layer is MoE)."""
    num_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    tie_word_embeddings: bool = False
    frozen_extra_params: int = 0
    """Parameters outside the text stack that are loaded but never trained (a vision tower)."""

    @property
    def linear_attention_layers(self) -> int:
        return self.num_layers - self.full_attention_layers

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    # ---- parameter counts ------------------------------------------------------------------------
    def full_attention_params(self) -> int:
        h, nq, nkv, d = self.hidden_size, self.num_attention_heads, self.num_kv_heads, self.head_dim
        return h * nq * d * (2 if self.attn_output_gate else 1) + 2 * h * nkv * d + nq * d * h + \
            (2 * d if self.qk_norm else 0)

    def linear_attention_params(self) -> int:
        h, nv = self.hidden_size, self.linear_num_value_heads
        return (h * self.linear_conv_dim + h * self.linear_value_dim + 2 * h * nv
                + self.linear_conv_dim * self.linear_conv_kernel + 2 * nv + self.linear_value_head_dim
                + self.linear_value_dim * h)

    def mlp_params(self) -> int:
        """One layer's MoE block (router, every expert, shared expert) or dense MLP."""
        h = self.hidden_size
        if not self.is_moe:
            return 3 * h * self.dense_intermediate
        shared = 3 * h * self.shared_expert_intermediate + h if self.shared_expert_intermediate else 0
        return h * self.num_experts + self.num_experts * 3 * h * self.expert_intermediate + shared

    def active_mlp_params(self) -> int:
        """The MLP parameters one token's forward multiplies with."""
        h = self.hidden_size
        if not self.is_moe:
            return self.mlp_params()
        shared = 3 * h * self.shared_expert_intermediate + h if self.shared_expert_intermediate else 0
        return h * self.num_experts + self.experts_per_token * 3 * h * self.expert_intermediate + shared

    def attention_params(self) -> int:
        """All layers' token mixers (full attention + Gated DeltaNet)."""
        return (self.full_attention_layers * self.full_attention_params()
                + self.linear_attention_layers * self.linear_attention_params())

    def layer_params(self) -> int:
        """The largest decoder layer's parameters (its token mixer, MLP/MoE block and norms)."""
        mixer = max(self.full_attention_params(), self.linear_attention_params() if self.linear_attention_layers else 0)
        return mixer + self.mlp_params() + 2 * self.hidden_size

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def text_params(self) -> int:
        """Every parameter of the text stack (embeddings and LM head included)."""
        return (self.attention_params() + self.num_layers * (self.mlp_params() + 2 * self.hidden_size)
                + self.hidden_size + self.embedding_params())

    def total_params(self) -> int:
        return self.text_params() + self.frozen_extra_params

    def active_params(self) -> int:
        """Parameters a token's forward multiplies with (the LM head once; no embedding matmul)."""
        return (self.attention_params() + self.num_layers * self.active_mlp_params()
                + self.vocab_size * self.hidden_size)


QWEN35_35B_A3B = ModelDims(
    name="qwen3.5-35b-a3b", vocab_size=248320, hidden_size=2048, num_layers=40, full_attention_layers=10,
    num_attention_heads=16, num_kv_heads=2, head_dim=256, attn_output_gate=True, qk_norm=True,
    linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel=4, ssm_state_bytes=4, num_experts=256, experts_per_token=8, expert_intermediate=512,
    shared_expert_intermediate=512, tie_word_embeddings=False, frozen_extra_params=446_600_000)
"""Qwen3.5-35B-A3B (module docstring; ``frozen_extra_params`` = its vision tower)."""

PRESETS: dict[str, ModelDims] = {"qwen3.5-35b-a3b": QWEN35_35B_A3B}
"""Named model presets; a hub id whose name matches one (``Qwen/Qwen3.5-35B-A3B``) uses it."""


def preset_for(name_or_path: str) -> ModelDims | None:
    """The preset a model spec names (``qwen3.5-35b-a3b``, ``Qwen/Qwen3.5-35B-A3B``), else None."""
    key = name_or_path.strip().lower().rsplit("/", 1)[-1]
    return PRESETS.get(key)


def _vision_params(vision: dict) -> int:
    """Approximate parameters of a Qwen-VL-style vision tower (biases left out: 453.24M vs 453.65M built
    from transformers' default ``Qwen3_5MoeVisionConfig``):
    ``depth x (4 w^2 + 2 w I)`` blocks + patch embedding + position table + the 2x2 merger MLP."""
    w = int(vision.get("hidden_size", 0))
    if not w:
        return 0
    inter = int(vision.get("intermediate_size", 4 * w))
    depth = int(vision.get("depth", vision.get("num_hidden_layers", 0)))
    patch = int(vision.get("patch_size", 14))
    merge = int(vision.get("spatial_merge_size", 2)) ** 2
    out = int(vision.get("out_hidden_size", w))
    blocks = depth * (4 * w * w + 2 * w * inter)
    embed = int(vision.get("in_channels", 3)) * int(vision.get("temporal_patch_size", 2)) * patch * patch * w
    positions = int(vision.get("num_position_embeddings", 0)) * w
    merger = (w * merge) ** 2 + w * merge * out
    return blocks + embed + positions + merger


_QK_NORM_TYPES = ("qwen3",)
"""Model types with per-head q/k RMSNorms (Qwen3, Qwen3-MoE, Qwen3.5, Qwen3-Next)."""
_GATED_TYPES = ("qwen3_5", "qwen3_next")
"""Model types whose full attention always has the sigmoid output gate (q_proj twice as wide)."""


def dims_from_config(config: dict, name: str = "checkpoint") -> ModelDims:
    """:class:`ModelDims` of a ``config.json`` (Qwen3.5-MoE, Qwen3-MoE, Mixtral, Llama-style dense).

    Raises ``ValueError`` naming the missing key when the config lacks one the plan needs.
    """
    text = config.get("text_config") or config
    vision = config.get("vision_config") if "text_config" in config else None

    def need(key: str, *alts: str):
        for k in (key, *alts):
            if text.get(k) is not None:
                return text[k]
        raise ValueError(f"{name}: config.json has no {key!r} (needed by the memory plan)")

    h = int(need("hidden_size"))
    layers = int(need("num_hidden_layers"))
    heads = int(need("num_attention_heads"))
    layer_types = text.get("layer_types") or ["full_attention"] * layers
    experts = int(text.get("num_experts") or text.get("num_local_experts") or 0)
    moe_width = int(text.get("moe_intermediate_size") or (text.get("intermediate_size") if experts else 0) or 0)
    return ModelDims(
        name=name, vocab_size=int(need("vocab_size")), hidden_size=h, num_layers=layers,
        full_attention_layers=sum(1 for t in layer_types if t != "linear_attention"),
        num_attention_heads=heads, num_kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or h // heads),
        attn_output_gate=bool(text.get("attn_output_gate", str(text.get("model_type", "")).startswith(_GATED_TYPES))),
        qk_norm=str(text.get("model_type", "")).startswith(_QK_NORM_TYPES),
        linear_num_key_heads=int(text.get("linear_num_key_heads") or 0),
        linear_num_value_heads=int(text.get("linear_num_value_heads") or 0),
        linear_key_head_dim=int(text.get("linear_key_head_dim") or 0),
        linear_value_head_dim=int(text.get("linear_value_head_dim") or 0),
        linear_conv_kernel=int(text.get("linear_conv_kernel_dim") or 4),
        ssm_state_bytes=2 if str(text.get("mamba_ssm_dtype", "float32")) in ("bfloat16", "float16") else 4,
        dense_intermediate=0 if experts else int(text.get("intermediate_size") or 0),
        num_experts=experts, experts_per_token=int(text.get("num_experts_per_tok") or 0) if experts else 0,
        expert_intermediate=moe_width if experts else 0,
        shared_expert_intermediate=int(text.get("shared_expert_intermediate_size") or 0),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        frozen_extra_params=_vision_params(vision) if vision else 0,
    )


def dims_from_checkpoint(directory: str | Path) -> ModelDims:
    """:class:`ModelDims` of a checkpoint directory's ``config.json``."""
    path = Path(directory) / "config.json"
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the model config for the memory plan ({exc})") from exc
    return dims_from_config(config, name=str(directory))

