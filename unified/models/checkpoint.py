"""``load_checkpoint(spec)``: one entry point for every way a model reaches the library.

A spec is one of

- ``embedded``: the embedded default SFT checkpoint (SmolLM2-135M-Instruct upcycled to a
  4-expert top-2 MoE; built once into the cache, see :mod:`unified.models.embedded`);
- a local Hugging Face directory (``config.json`` + weights + tokenizer), e.g. a warmup output;
- a ``.gguf`` file (dequantised; copied into a fresh model so it can be saved again);
- a hub id ``org/name`` (the real ``from_pretrained`` path; when the hub cannot be reached the
  error says so and how to proceed).

Dtype defaults to bf16 on CUDA and fp32 on CPU; attention and experts implementations come
from :func:`unified.kernels.select_kernels` unless given. A checkpoint whose ``config.json`` names a
vision-language class (Qwen3.5-MoE's published ``Qwen3_5MoeForConditionalGeneration``) loads as that
class, vision tower included (:mod:`unified.models.vision_language`); text-only ones as causal LMs.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from unified.models.gguf import is_moe_config, load_gguf, load_tokenizer
from unified.models.kernel_choice import KernelChoice, select_kernels
from unified.models.chat_template import install_chat_template
from unified.models.embedded import ensure_embedded_checkpoint
from unified.models.linear_attention import apply_linear_attention, gated_deltanet_modules
from unified.models.vision_language import model_auto_class

log = logging.getLogger(__name__)

SpecKind = Literal["embedded", "local", "gguf", "hub"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


class CheckpointNotFoundError(FileNotFoundError):
    """A spec that names a path that does not exist or is not a checkpoint."""


class HubUnreachableError(RuntimeError):
    """A hub id was given but the Hugging Face hub (or its cache) could not provide it."""


@dataclass
class LoadedCheckpoint:
    """A model with its tokenizer and the facts of how it was loaded."""

    model: Any
    """A transformers causal LM (or the vision-language class the checkpoint names), in eval mode, on ``device``."""
    tokenizer: Any
    """Its tokenizer, with a chat template."""
    spec: str
    """The spec as given."""
    kind: SpecKind
    """How the spec was resolved."""
    path: Path | None
    """Local directory or file it came from (None for a hub id not in the cache)."""
    kernels: KernelChoice
    """Attention/experts implementations used."""
    dtype: torch.dtype
    device: torch.device


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA, fp32 elsewhere (CPU kernels are fp32-first and tests compare logits)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def resolve_spec(spec: str | os.PathLike[str]) -> tuple[SpecKind, str]:
    """Classify a spec without loading anything; a missing local path is an error here."""
    text = str(spec)
    if text == "embedded":
        return "embedded", text
    path = Path(text).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise CheckpointNotFoundError(f"GGUF file not found: {path}")
        return "gguf", str(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise CheckpointNotFoundError(f"{path} is a directory but not a Hugging Face checkpoint (no config.json)")
        return "local", str(path)
    if path.exists():
        raise CheckpointNotFoundError(f"{path} is neither a checkpoint directory nor a .gguf file")
    looks_local = text.startswith((".", "/", "~")) or text.count("/") != 1 or os.sep in text.replace("/", "")
    if looks_local or not _HUB_ID.match(text):
        raise CheckpointNotFoundError(
            f"checkpoint not found: {text!r} is not a local directory, not a .gguf file, not 'embedded', "
            "and not a hub id of the form org/name")
    return "hub", text


def _hub_error(spec: str, exc: BaseException) -> HubUnreachableError:
    offline = os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0")
    why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub could not be reached"
    return HubUnreachableError(
        f"cannot load hub checkpoint {spec!r}: {why} and it is not in the local hub cache "
        f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). Download it where the hub is "
        f"reachable (e.g. `hf download {spec} --local-dir DIR`) and pass --model DIR.")


def _from_pretrained(source: str, config: Any, *, dtype: torch.dtype, kernels: KernelChoice, **kwargs):
    if is_moe_config(config):
        kwargs["experts_implementation"] = kernels.experts
    return model_auto_class(config).from_pretrained(source, dtype=dtype, attn_implementation=kernels.attention,
                                                    **kwargs)


def use_linear_attention(model, kernels: KernelChoice) -> dict[str, str]:
    """Make the model's Gated DeltaNet layers (if any) run ``kernels.linear_attention``."""
    modules = gated_deltanet_modules(model)
    return apply_linear_attention(kernels.linear_attention, modules) if modules else {}


def load_checkpoint(spec: str | os.PathLike[str], *, device: str | torch.device | None = None,
                    dtype: torch.dtype | None = None, attn_implementation: str | None = None,
                    experts_implementation: str | None = None, trust_remote_code: bool = False) -> LoadedCheckpoint:
    """Load a model and its tokenizer from ``spec`` (see the module docstring)."""
    kind, target = resolve_spec(spec)
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or default_dtype(dev)
    kernels = select_kernels(dev, dtype, attention=attn_implementation, experts=experts_implementation)
    path: Path | None = None

    if kind == "embedded":
        path = ensure_embedded_checkpoint()
        kind_loaded: SpecKind = "embedded"
        target, kind = str(path), "local"
    else:
        kind_loaded = kind

    if kind == "local":
        from transformers import AutoConfig

        path = Path(target)
        config = AutoConfig.from_pretrained(target, trust_remote_code=trust_remote_code)
        model = _from_pretrained(target, config, dtype=dtype, kernels=kernels, trust_remote_code=trust_remote_code)
        tokenizer = load_tokenizer(target)
    elif kind == "gguf":
        path = Path(target)
        model = load_gguf(path, dtype=dtype, kernels=kernels)
        tokenizer = load_tokenizer(str(path.parent), gguf_file=path.name)
    else:  # hub
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(target, trust_remote_code=trust_remote_code)
            tokenizer = load_tokenizer(target)
            model = _from_pretrained(target, config, dtype=dtype, kernels=kernels,
                                     trust_remote_code=trust_remote_code)
        except (OSError, ConnectionError, TimeoutError) as exc:
            raise _hub_error(target, exc) from exc

    model.to(dev)
    model.eval()
    use_linear_attention(model, kernels)
    if getattr(tokenizer, "chat_template", None) is None:
        log.warning("%s has no chat template; installing unified's Qwen3.5-style template", spec)
        install_chat_template(tokenizer)
    log.info("loaded %s (%s) on %s as %s; %s", spec, kind_loaded, dev, dtype, kernels.reason)
    return LoadedCheckpoint(model=model, tokenizer=tokenizer, spec=str(spec), kind=kind_loaded, path=path,
                            kernels=kernels, dtype=dtype, device=dev)
