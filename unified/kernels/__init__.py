"""Choice of attention and MoE-experts implementations, and parity checks between them.

``select_kernels(device, dtype)`` returns a :class:`KernelChoice` that
``unified.models.load_checkpoint`` passes to transformers as ``attn_implementation`` and
``experts_implementation``:

- attention: FlashAttention 3 (``flash_attn_interface``, Hopper) or 2 (``flash_attn``) when
  importable on CUDA, otherwise PyTorch SDPA;
- experts: ``grouped_mm`` (one grouped GEMM over all experts: ``torch.nn.functional.grouped_mm``)
  where it runs for the device and dtype, otherwise the ``eager`` per-expert loop;
- linear attention (Qwen3.5's Gated DeltaNet layers): ``fla`` (flash-linear-attention's delta rule and
  causal-conv1d) on CUDA where both import, otherwise ``torch`` (transformers' reference chunked loop);
  :mod:`unified.models.linear_attention` applies the choice to the modeling module.

``experts_parity`` checks that grouped_mm and eager agree on a tiny MoE, outputs and gradients.

The choice itself lives in :mod:`unified.models.kernel_choice` (the checkpoint loader needs it,
and the parity checks need the tiny models of :mod:`unified.models`: ``kernels`` sits above
``models``); it is re-exported here.
"""

from unified.kernels.parity import ParityReport, attention_parity, experts_parity
from unified.models.linear_attention import (
    LINEAR_ATTENTION_CHOICES,
    apply_linear_attention,
    gated_deltanet_modules,
    select_linear_attention,
)
from unified.models.kernel_choice import (
    ATTENTION_CHOICES,
    EXPERTS_CHOICES,
    KernelChoice,
    grouped_mm_available,
    select_attention,
    select_experts,
    select_kernels,
)

__all__ = [
    "ATTENTION_CHOICES", "EXPERTS_CHOICES", "LINEAR_ATTENTION_CHOICES", "KernelChoice", "ParityReport",
    "apply_linear_attention", "attention_parity", "experts_parity", "gated_deltanet_modules", "grouped_mm_available",
    "select_attention", "select_experts", "select_kernels", "select_linear_attention",
]
