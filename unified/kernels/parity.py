"""Parity checks between kernel implementations, with timings.

``experts_parity`` runs the same tiny MoE with the ``eager`` experts loop and a candidate
implementation (``grouped_mm`` by default) on the same input and compares

- outputs: ``max |logits_eager - logits_candidate|`` over (batch, seq, vocab);
- gradients: ``max |grad_eager - grad_candidate|`` over every parameter, for the loss
  ``sum(logits * probe)`` with a fixed random probe tensor of the logits' shape;

and reports the median wall time of forward+backward for each (the ratio is what the
foundation issue asks to report). ``attention_parity`` does the same for attention
implementations (FlashAttention vs SDPA on CUDA).
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import asdict, dataclass

import torch


@dataclass
class ParityReport:
    """Result of comparing a candidate kernel with the reference one."""

    reference: str
    candidate: str
    max_abs_output_diff: float
    max_abs_grad_diff: float
    tolerance: float
    passed: bool
    reference_seconds: float
    """Median forward+backward wall time with the reference implementation."""
    candidate_seconds: float
    """Median forward+backward wall time with the candidate implementation."""

    @property
    def speedup(self) -> float:
        """reference time / candidate time (>1 means the candidate is faster)."""
        return self.reference_seconds / max(self.candidate_seconds, 1e-12)

    def to_dict(self) -> dict:
        return {**asdict(self), "speedup": self.speedup}


def _forward_backward(model, input_ids, probe):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=input_ids).logits
    (logits.float() * probe).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def _time(model, input_ids, probe, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        _forward_backward(model, input_ids, probe)
        if input_ids.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _compare(ref_model, cand_model, ref_name, cand_name, *, batch, seq_len, tolerance, repeats, seed, device):
    gen = torch.Generator().manual_seed(seed)
    vocab = ref_model.config.vocab_size
    input_ids = torch.randint(0, vocab, (batch, seq_len), generator=gen).to(device)
    probe = torch.randn(batch, seq_len, vocab, generator=gen).to(device)
    ref_logits, ref_grads = _forward_backward(ref_model, input_ids, probe)
    cand_logits, cand_grads = _forward_backward(cand_model, input_ids, probe)
    if set(ref_grads) != set(cand_grads):
        raise AssertionError(f"parameters with gradients differ: {sorted(set(ref_grads) ^ set(cand_grads))}")
    out_diff = (ref_logits.float() - cand_logits.float()).abs().max().item()
    grad_diff = max((ref_grads[n].float() - cand_grads[n].float()).abs().max().item() for n in ref_grads)
    ref_s = _time(ref_model, input_ids, probe, repeats) if repeats else 0.0
    cand_s = _time(cand_model, input_ids, probe, repeats) if repeats else 0.0
    return ParityReport(ref_name, cand_name, out_diff, grad_diff, tolerance,
                        out_diff <= tolerance and grad_diff <= tolerance, ref_s, cand_s)


def experts_parity(candidate: str = "grouped_mm", *, arch: str = "qwen3_moe", device: str = "cpu",
                   dtype: torch.dtype = torch.float32, batch: int = 2, seq_len: int = 32, tolerance: float = 1e-4,
                   repeats: int = 3, seed: int = 0, model_kwargs: dict | None = None) -> ParityReport:
    """Compare the ``eager`` experts loop with ``candidate`` on a tiny random MoE."""
    from unified.models.tiny import tiny_moe_model

    reference = tiny_moe_model(arch, seed=seed, experts_implementation="eager", **(model_kwargs or {}))
    reference = reference.to(device=device, dtype=dtype)
    cand_model = copy.deepcopy(reference)
    cand_model.set_experts_implementation(candidate)
    return _compare(reference, cand_model, "eager", candidate, batch=batch, seq_len=seq_len, tolerance=tolerance,
                    repeats=repeats, seed=seed, device=device)


def attention_parity(candidate: str = "flash_attention_2", *, reference: str = "sdpa", arch: str = "qwen3_moe",
                     device: str = "cuda", dtype: torch.dtype = torch.bfloat16, batch: int = 2, seq_len: int = 128,
                     tolerance: float = 5e-2, repeats: int = 3, seed: int = 0) -> ParityReport:
    """Compare two attention implementations on a tiny random MoE (CUDA for FlashAttention)."""
    from unified.models.tiny import tiny_moe_model

    ref_model = tiny_moe_model(arch, seed=seed, attn_implementation=reference).to(device=device, dtype=dtype)
    cand_model = copy.deepcopy(ref_model)
    cand_model.set_attn_implementation(candidate)
    return _compare(ref_model, cand_model, reference, candidate, batch=batch, seq_len=seq_len, tolerance=tolerance,
                    repeats=repeats, seed=seed, device=device)
