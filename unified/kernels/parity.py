"""Parity checks between kernel implementations, with timings.

``experts_parity`` runs the same tiny MoE with the ``eager`` experts loop and a candidate
implementation (``grouped_mm`` by default) on the same input and compares

- outputs: ``max |logits_eager - logits_candidate|`` over (batch, seq, vocab);
- gradients: ``max |grad_eager - grad_candidate|`` over every parameter, for the loss
  ``sum(logits * probe)`` with a fixed random probe tensor of the logits' shape;
- the same two as *relative* differences, ``max |a - b| / max |a|`` per tensor (the worst tensor
  for gradients). Pass/fail uses these: an absolute bound cannot fit every shape, since gradient
  magnitudes grow with batch x sequence (a 1e-2 relative bf16 rounding is an absolute 800 on a
  gradient of 8e4);
- in reduced precision (bf16), each implementation's relative error against an fp32 ``eager``
  run of the same weights. There the check passes when the candidate is about as accurate as the
  reference: ``err_cand <= max(2 * err_ref, tolerance)`` for outputs and for gradients (two bf16
  implementations that sum in different orders differ by about their own rounding error, which can
  exceed any fixed bound on a small-gradient tensor such as a norm weight); in fp32 it passes when
  both relative differences are within ``tolerance``;

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

from unified.models.tiny import tiny_moe_model


@dataclass
class ParityReport:
    """Result of comparing a candidate kernel with the reference one."""

    reference: str
    candidate: str
    max_abs_output_diff: float
    max_abs_grad_diff: float
    tolerance: float
    """Bound on the relative differences below."""
    passed: bool
    reference_seconds: float
    """Median forward+backward wall time with the reference implementation."""
    candidate_seconds: float
    """Median forward+backward wall time with the candidate implementation."""
    rel_output_diff: float = 0.0
    """``max |ref - cand| / max |ref|`` over the logits."""
    rel_grad_diff: float = 0.0
    """The worst parameter's ``max |ref - cand| / max |ref|``."""
    fp32_errors: dict | None = None
    """Reduced precision only: ``{"reference": {"output", "grad"}, "candidate": {...}}``, the relative
    error of each implementation against fp32 ``eager`` (None in fp32)."""

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


def _diffs(ref_logits, ref_grads, logits, grads) -> tuple[float, float, float, float]:
    """(max abs output diff, max abs grad diff, relative output diff, worst relative grad diff)."""
    if set(ref_grads) != set(grads):
        raise AssertionError(f"parameters with gradients differ: {sorted(set(ref_grads) ^ set(grads))}")

    def abs_and_rel(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
        diff = (a.float() - b.float()).abs().max().item()
        return diff, diff / max(a.float().abs().max().item(), 1e-30)

    out_abs, out_rel = abs_and_rel(ref_logits, logits)
    grad = [abs_and_rel(ref_grads[n], grads[n]) for n in ref_grads]
    return out_abs, max(g[0] for g in grad), out_rel, max(g[1] for g in grad)


def _compare(ref_model, cand_model, ref_name, cand_name, *, batch, seq_len, tolerance, repeats, seed, device,
             fp32_model=None):
    gen = torch.Generator().manual_seed(seed)
    vocab = ref_model.config.vocab_size
    input_ids = torch.randint(0, vocab, (batch, seq_len), generator=gen).to(device)
    probe = torch.randn(batch, seq_len, vocab, generator=gen).to(device)
    ref_logits, ref_grads = _forward_backward(ref_model, input_ids, probe)
    cand_logits, cand_grads = _forward_backward(cand_model, input_ids, probe)
    out_diff, grad_diff, rel_out, rel_grad = _diffs(ref_logits, ref_grads, cand_logits, cand_grads)
    fp32_errors = None
    if fp32_model is not None:
        exact_logits, exact_grads = _forward_backward(fp32_model, input_ids, probe)
        fp32_errors = {}
        for name, (logits, grads) in (("reference", (ref_logits, ref_grads)), ("candidate", (cand_logits, cand_grads))):
            _, _, out_err, grad_err = _diffs(exact_logits, exact_grads, logits, grads)
            fp32_errors[name] = {"output": out_err, "grad": grad_err}
        del exact_logits, exact_grads
    ref_s = _time(ref_model, input_ids, probe, repeats) if repeats else 0.0
    cand_s = _time(cand_model, input_ids, probe, repeats) if repeats else 0.0
    if fp32_errors is None:
        passed = rel_out <= tolerance and rel_grad <= tolerance
    else:
        ref_err, cand_err = fp32_errors["reference"], fp32_errors["candidate"]
        passed = all(cand_err[k] <= max(2 * ref_err[k], tolerance) for k in ("output", "grad"))
    return ParityReport(ref_name, cand_name, out_diff, grad_diff, tolerance, passed, ref_s, cand_s,
                        rel_output_diff=rel_out, rel_grad_diff=rel_grad, fp32_errors=fp32_errors)


def experts_parity(candidate: str = "grouped_mm", *, arch: str = "qwen3_moe", device: str = "cpu",
                   dtype: torch.dtype = torch.float32, batch: int = 2, seq_len: int = 32, tolerance: float = 1e-4,
                   repeats: int = 3, seed: int = 0, model_kwargs: dict | None = None) -> ParityReport:
    """Compare the ``eager`` experts loop with ``candidate`` on a tiny random MoE."""
    fp32 = tiny_moe_model(arch, seed=seed, experts_implementation="eager", **(model_kwargs or {})).to(device)
    reference = copy.deepcopy(fp32).to(dtype=dtype)
    cand_model = copy.deepcopy(reference)
    cand_model.set_experts_implementation(candidate)
    return _compare(reference, cand_model, "eager", candidate, batch=batch, seq_len=seq_len, tolerance=tolerance,
                    repeats=repeats, seed=seed, device=device, fp32_model=fp32 if dtype != torch.float32 else None)


def attention_parity(candidate: str = "flash_attention_2", *, reference: str = "sdpa", arch: str = "qwen3_moe",
                     device: str = "cuda", dtype: torch.dtype = torch.bfloat16, batch: int = 2, seq_len: int = 128,
                     tolerance: float = 5e-2, repeats: int = 3, seed: int = 0,
                     model_kwargs: dict | None = None) -> ParityReport:
    """Compare two attention implementations on a tiny random MoE (CUDA for FlashAttention); ``model_kwargs``
    size it (e.g. ``head_dim=256``, Qwen3.5's full-attention head size)."""
    ref_model = tiny_moe_model(arch, seed=seed, attn_implementation=reference,
                               **(model_kwargs or {})).to(device=device, dtype=dtype)
    cand_model = copy.deepcopy(ref_model)
    cand_model.set_attn_implementation(candidate)
    return _compare(ref_model, cand_model, reference, candidate, batch=batch, seq_len=seq_len, tolerance=tolerance,
                    repeats=repeats, seed=seed, device=device)
