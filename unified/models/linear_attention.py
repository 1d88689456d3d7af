"""The kernels of Gated DeltaNet (Qwen3.5's linear-attention layers): choose, report and apply them.

Qwen3.5-MoE interleaves Gated DeltaNet layers (30 of Qwen3.5-35B-A3B's 40) with full attention. Each
runs two ops that transformers resolves *once, when its modeling module is imported*:

- the gated delta rule, ``torch_chunk_gated_delta_rule`` (prefill/training: a loop over 64-token chunks,
  ``ceil(T / 64)`` sequential steps per layer in the reference) and ``torch_recurrent_gated_delta_rule``
  (one-token decode), taken from flash-linear-attention (``fla.ops.gated_delta_rule``, Triton) when it is
  importable;
- the short causal depthwise convolution, ``causal_conv1d_fn`` / ``causal_conv1d_update``, taken from
  causal-conv1d (CUDA) when importable;

and otherwise their PyTorch reference. ``select_linear_attention(device)`` says which ones should run
here and why: ``"fla"`` (both packages, on CUDA) or ``"torch"`` (the reference: on CPU, or on CUDA
without them). ``apply_linear_attention(impl, modules)`` makes the modeling modules match the choice:
for ``"torch"`` it swaps the kernel-backed functions of a module for their reference (so a CPU run with
the packages installed, or a benchmark "without kernels", really runs the reference); for ``"fla"`` it
checks that transformers did bind the kernels. The swap is process-wide: every model of that class in
the process runs the chosen ops.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import logging
import sys
from collections.abc import Callable, Iterable

import torch

log = logging.getLogger(__name__)

LINEAR_ATTENTION_CHOICES = ("fla", "torch")
# transformers' names of the Gated DeltaNet ops in a modeling module -> (package, kernel path)
GATED_DELTANET_OPS = {
    "torch_chunk_gated_delta_rule": ("fla", "ops.gated_delta_rule.chunk_gated_delta_rule"),
    "torch_recurrent_gated_delta_rule": ("fla", "ops.gated_delta_rule.fused_recurrent_gated_delta_rule"),
    "causal_conv1d_fn": ("causal_conv1d", "causal_conv1d_fn"),
    "causal_conv1d_update": ("causal_conv1d", "causal_conv1d_update"),
}
_DISTRIBUTION = {"fla": "flash-linear-attention", "causal_conv1d": "causal-conv1d"}
_ORIGINALS: dict[tuple[str, str], Callable] = {}


def _kernel(package: str, path: str) -> Callable | None:
    """The kernel function ``package.path`` when it imports, else None."""
    module_path, _, name = f"{package}.{path}".rpartition(".")
    try:
        return getattr(importlib.import_module(module_path), name, None)
    except Exception:  # an import that fails (no CUDA, a Triton/torch mismatch) means "not here"
        return None


def kernel_packages() -> dict[str, str | None]:
    """``{distribution: version or None}`` for flash-linear-attention and causal-conv1d (no import)."""
    found = {}
    for dist in _DISTRIBUTION.values():
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    return found


def select_linear_attention(device: str | torch.device | None = None,
                            requested: str | None = None) -> tuple[str, str]:
    """Return ``(implementation, reason)`` for the Gated DeltaNet ops on ``device``."""
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested is not None and requested not in LINEAR_ATTENTION_CHOICES:
        raise ValueError(f"unknown linear attention implementation {requested!r}; "
                         f"valid: {', '.join(LINEAR_ATTENTION_CHOICES)}")
    if requested == "torch":
        return "torch", "requested (transformers' reference delta rule and conv1d)"
    if dev.type != "cuda":
        if requested == "fla":
            raise ValueError(f"linear attention 'fla' needs a CUDA device, got {dev}")
        return "torch", (f"{dev.type} device: flash-linear-attention and causal-conv1d are CUDA/Triton kernels, so "
                         "Gated DeltaNet runs transformers' reference (a loop over 64-token chunks)")
    missing = sorted({_DISTRIBUTION[pkg] for pkg, path in GATED_DELTANET_OPS.values() if _kernel(pkg, path) is None})
    if missing:
        why = (f"CUDA without an importable {' and '.join(missing)} (install the locked GPU stack: make gpu), so "
               "Gated DeltaNet runs transformers' reference (a loop over 64-token chunks)")
        if requested == "fla":
            raise ValueError(f"linear attention 'fla' requested, but: {why}")
        return "torch", why
    versions = kernel_packages()
    return "fla", ("requested" if requested else "CUDA") + (
        f" with flash-linear-attention {versions['flash-linear-attention']} (chunk/fused_recurrent gated delta "
        f"rule) and causal-conv1d {versions['causal-conv1d']}")


def uses_kernel(fn: Callable) -> bool | None:
    """Whether a transformers Gated DeltaNet op was bound to its package's kernel (None: cannot tell)."""
    try:
        bound = inspect.getclosurevars(fn).nonlocals
    except TypeError:
        return None
    flag = bound.get("is_new_implementation")
    return flag if isinstance(flag, bool) else None


def _reference(original: Callable, name: str) -> Callable:
    """The PyTorch reference behind a kernel-backed op, called as transformers calls the op."""
    reference = inspect.unwrap(original)
    params = inspect.signature(reference).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    @functools.wraps(reference)
    def call(*args, **kwargs):
        if kwargs.get("cu_seqlens") is not None or kwargs.get("seq_idx") is not None:
            raise ValueError(f"{name}: the reference cannot keep packed sequences apart (linear attention 'torch')")
        if not takes_any:
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        return reference(*args, **kwargs)

    call.unified_reference = True
    return call


def gated_deltanet_modules(model: torch.nn.Module) -> dict[str, int]:
    """``{modeling module name: number of Gated DeltaNet layers}`` of a model (empty: none)."""
    counts: dict[str, int] = {}
    for module in model.modules():
        if type(module).__name__.endswith("GatedDeltaNet"):
            counts[type(module).__module__] = counts.get(type(module).__module__, 0) + 1
    return counts


def linear_attention_in_use(model: torch.nn.Module) -> str:
    """What a model's Gated DeltaNet layers run now: ``fla``, ``torch``, or ``none`` (no such layers)."""
    modules = gated_deltanet_modules(model)
    if not modules:
        return "none"
    ops = [getattr(sys.modules[name], op, None) for name in modules for op in GATED_DELTANET_OPS]
    ops = [fn for fn in ops if fn is not None]
    kernel = ops and all(not getattr(fn, "unified_reference", False) and uses_kernel(fn) for fn in ops)
    return "fla" if kernel else "torch"


def modeling_module_for(model_type: str) -> str:
    """The transformers modeling module of a ``config.model_type`` (``qwen3_5_moe_text`` -> ``qwen3_5_moe``)."""
    base = model_type.removesuffix("_text")
    return f"transformers.models.{base}.modeling_{base}"


def apply_linear_attention(implementation: str, modules: Iterable[str]) -> dict[str, str]:
    """Make the Gated DeltaNet ops of each modeling module run ``implementation``.

    Returns ``{"module.op": "kernel" | "reference"}`` for the ops found (``"unknown"``: an op whose
    binding cannot be read, left as transformers made it). ``"fla"`` raises RuntimeError
    when transformers bound an op to its reference (the package was not importable when the module was
    imported: import order, or a broken install).
    """
    if implementation not in LINEAR_ATTENTION_CHOICES:
        raise ValueError(f"unknown linear attention implementation {implementation!r}")
    applied: dict[str, str] = {}
    for module_name in modules:
        module = sys.modules.get(module_name)
        if module is None:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        for op in GATED_DELTANET_OPS:
            current = getattr(module, op, None)
            if current is None:
                continue
            original = _ORIGINALS.setdefault((module_name, op), current)
            kernel = uses_kernel(original)
            if implementation == "fla":
                if kernel is not True:
                    raise RuntimeError(f"{module_name}.{op} runs its PyTorch reference: "
                                       f"{_DISTRIBUTION[GATED_DELTANET_OPS[op][0]]} was not importable when "
                                       f"{module_name} was imported")
                setattr(module, op, original)
                applied[f"{module_name}.{op}"] = "kernel"
            else:
                setattr(module, op, _reference(original, op) if kernel else original)
                applied[f"{module_name}.{op}"] = "reference" if kernel is not None else "unknown"
    if applied:
        log.info("linear attention %s: %s", implementation, applied)
    return applied
