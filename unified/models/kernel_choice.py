"""Pick the attention and experts implementations for a device and dtype, and say why.

The checkpoint loader (:func:`unified.models.load_checkpoint`) uses it; :mod:`unified.kernels`
re-exports it next to the parity checks, which build tiny models of this package (so the choice
lives here, below both, and ``models`` never imports ``kernels``).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from dataclasses import dataclass

import torch
from unified.models.linear_attention import select_linear_attention

log = logging.getLogger(__name__)

ATTENTION_CHOICES = ("flash_attention_3", "flash_attention_2", "sdpa", "eager")
EXPERTS_CHOICES = ("grouped_mm", "batched_mm", "eager")


@dataclass(frozen=True)
class KernelChoice:
    """The implementations a model is loaded with."""

    attention: str
    """transformers ``attn_implementation``."""
    experts: str
    """transformers ``experts_implementation``."""
    reason: str
    """Why these were chosen (logged, and stored with run metadata)."""
    linear_attention: str = "torch"
    """Gated DeltaNet ops (Qwen3.5's linear attention): ``fla`` (flash-linear-attention + causal-conv1d)
    or ``torch`` (transformers' reference); see :mod:`unified.models.linear_attention`."""

    def facts(self) -> dict[str, str]:
        """The record stored with a run (run.json ``kernels``)."""
        return {"attention": self.attention, "experts": self.experts, "linear_attention": self.linear_attention,
                "reason": self.reason}


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _as_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def select_attention(device: str | torch.device | None = None, requested: str | None = None) -> tuple[str, str]:
    """Return ``(implementation, reason)``. A request is validated, not second-guessed."""
    dev = _as_device(device)
    if requested:
        if requested not in ATTENTION_CHOICES:
            raise ValueError(f"unknown attention implementation {requested!r}; valid: {', '.join(ATTENTION_CHOICES)}")
        if requested.startswith("flash_attention") and dev.type != "cuda":
            raise ValueError(f"{requested} needs a CUDA device, got {dev}")
        return requested, "requested"
    if dev.type == "cuda":
        major, _ = torch.cuda.get_device_capability(dev)
        if major == 9 and _has_module("flash_attn_interface"):
            return "flash_attention_3", "CUDA sm90 with flash_attn_interface (FlashAttention 3)"
        if major >= 8 and _has_module("flash_attn"):
            return "flash_attention_2", f"CUDA sm{major}x with flash_attn installed"
        return "sdpa", "CUDA without an importable flash-attn (install the `gpu` extra)"
    return "sdpa", f"{dev.type} device: FlashAttention needs CUDA"


@functools.lru_cache(maxsize=None)
def grouped_mm_available(device_type: str, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether ``grouped_mm`` runs here: a real 2-group call on the device, not a version check."""
    fn = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
    if fn is None:
        return False, f"torch {torch.__version__} has no grouped_mm"
    try:
        x = torch.randn(8, 16, device=device_type, dtype=dtype)
        w = torch.randn(2, 16, 8, device=device_type, dtype=dtype)
        offs = torch.tensor([3, 8], device=device_type, dtype=torch.int32)
        out = fn(x, w, offs=offs)
        ref = torch.cat([x[:3] @ w[0], x[3:] @ w[1]])
        if not torch.allclose(out.float(), ref.float(), atol=1e-1, rtol=1e-2):
            return False, "grouped_mm gave wrong results on this device"
    except Exception as exc:  # any kernel failure means "not here"
        return False, f"grouped_mm failed on {device_type}/{dtype}: {type(exc).__name__}: {exc}"
    return True, f"grouped_mm runs on {device_type}/{str(dtype).replace('torch.', '')}"


def select_experts(device: str | torch.device | None = None, dtype: torch.dtype = torch.float32,
                   requested: str | None = None) -> tuple[str, str]:
    """Return ``(implementation, reason)`` for the MoE experts."""
    dev = _as_device(device)
    if requested:
        if requested not in EXPERTS_CHOICES:
            raise ValueError(f"unknown experts implementation {requested!r}; valid: {', '.join(EXPERTS_CHOICES)}")
        return requested, "requested"
    ok, why = grouped_mm_available(dev.type, dtype)
    return ("grouped_mm", why) if ok else ("eager", why)


def select_kernels(device: str | torch.device | None = None, dtype: torch.dtype = torch.float32, *,
                   attention: str | None = None, experts: str | None = None,
                   linear_attention: str | None = None) -> KernelChoice:
    """Choose the attention, experts and linear-attention implementations and log the choice."""
    attn, attn_why = select_attention(device, attention)
    exp, exp_why = select_experts(device, dtype, experts)
    linear, linear_why = select_linear_attention(device, linear_attention)
    choice = KernelChoice(attention=attn, experts=exp, linear_attention=linear,
                          reason=f"attention: {attn_why}; experts: {exp_why}; linear attention: {linear_why}")
    log.info("kernels: attention=%s experts=%s linear_attention=%s (%s)", attn, exp, linear, choice.reason)
    return choice
