"""Choice of attention and MoE-experts implementations, and parity checks between them.

``select_kernels(device, dtype)`` returns a :class:`KernelChoice` that
``unified.models.load_checkpoint`` passes to transformers as ``attn_implementation`` and
``experts_implementation``:

- attention: FlashAttention 3 (``flash_attn_interface``, Hopper) or 2 (``flash_attn``) when
  importable on CUDA, otherwise PyTorch SDPA;
- experts: ``grouped_mm`` (one grouped GEMM over all experts: ``torch.nn.functional.grouped_mm``)
  where it runs for the device and dtype, otherwise the ``eager`` per-expert loop.

``experts_parity`` checks that grouped_mm and eager agree on a tiny MoE, outputs and gradients.

The choice itself lives in :mod:`unified.models.kernel_choice` (the checkpoint loader needs it,
and the parity checks need the tiny models of :mod:`unified.models`: ``kernels`` sits above
``models``); it is re-exported here.
"""

from unified.kernels.parity import ParityReport, attention_parity, experts_parity
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
    "ATTENTION_CHOICES", "EXPERTS_CHOICES", "KernelChoice", "ParityReport", "attention_parity",
    "experts_parity", "grouped_mm_available", "select_attention", "select_experts", "select_kernels",
]
