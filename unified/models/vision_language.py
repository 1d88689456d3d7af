"""Checkpoints whose class is a vision-language model: Qwen3.5-MoE's ``Qwen3_5MoeForConditionalGeneration``.

The published Qwen3.5 checkpoints (and SFT checkpoints made from them) name a vision-language class
in ``config.json`` (``architectures``, a ``vision_config`` next to the ``text_config``). Loading such a
checkpoint with ``AutoModelForCausalLM`` gives the text-only ``Qwen3_5MoeForCausalLM`` and drops the
vision tower without an error; a checkpoint saved from it is text-only too, and no longer the class,
tensor names or files its base model has. So :func:`model_auto_class` picks
``AutoModelForImageTextToText`` for these configs (the class named in the checkpoint, vision tower
included), and the warmup, which trains on text only:

- freezes the vision tower (:func:`freeze_vision_tower`): no gradient and no optimizer state for it,
  so its weights are written back byte for byte;
- writes the image and video processor files next to the weights (:func:`copy_processor_files`),
  which vLLM needs to start this class (it builds the model's multimodal processor at start-up), and
  the source's tensors transformers does not model, the multi-token-prediction head ``mtp.*``
  (:func:`copy_unmodelled_tensors`), unchanged (:func:`copy_checkpoint_extras` does both).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

PROCESSOR_FILES = ("preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json")
"""The processor files a vision-language checkpoint ships (Qwen3.5: the first two)."""
UNMODELLED_PREFIXES = ("mtp.",)
"""Tensor-name prefixes of a checkpoint that transformers skips on load (Qwen3.5's multi-token-prediction head,
``_keys_to_ignore_on_load_unexpected``); vLLM reads them for MTP speculative decoding."""
UNMODELLED_FILE = "model-unmodelled.safetensors"
INDEX = "model.safetensors.index.json"


def is_vision_language_config(config: Any) -> bool:
    """True for a config whose model type transformers maps to an image-text-to-text class
    (it has a ``vision_config``; e.g. ``qwen3_5_moe``), False for text-only configs (``qwen3_5_moe_text``)."""
    if getattr(config, "vision_config", None) is None:
        return False
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return getattr(config, "model_type", None) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def model_auto_class(config: Any):
    """The transformers auto class that loads ``config``'s checkpoint as the class it names."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if is_vision_language_config(config) else AutoModelForCausalLM


def vision_tower(model: Any) -> torch.nn.Module | None:
    """The vision encoder of a vision-language model (``model.model.visual`` in Qwen-VL classes), else None."""
    inner = getattr(model, "model", None)
    for owner in (inner, model):
        tower = getattr(owner, "visual", None) if owner is not None else None
        if isinstance(tower, torch.nn.Module):
            return tower
    return None


def vision_parameter_names(model: Any) -> set[str]:
    """Names (as ``model.named_parameters()`` gives them) of the vision tower's parameters; empty without one."""
    tower = vision_tower(model)
    if tower is None:
        return set()
    ids = {id(p) for p in tower.parameters()}
    return {name for name, p in model.named_parameters() if id(p) in ids}


def freeze_vision_tower(model: Any) -> int:
    """``requires_grad=False`` on every vision-tower parameter; returns how many elements were frozen (0 without one).

    Call it before the optimizer is built: the HF Trainer gives the optimizer only parameters that
    require a gradient, so a frozen tower has no AdamW moments (2 x 4 bytes a weight in fp32).
    """
    tower = vision_tower(model)
    if tower is None:
        return 0
    frozen = 0
    for p in tower.parameters():
        p.requires_grad_(False)
        frozen += p.numel()
    log.info("vision tower frozen: %d parameters (the warmup trains on text only)", frozen)
    return frozen


def keep_used_weight_conversions(model: Any) -> int:
    """Forget the load-time weight conversions that matched no tensor; returns how many were dropped.

    ``save_pretrained`` reverses the conversions recorded at load (``model._weight_conversions``). The
    ordinary loader records only those that matched a checkpoint tensor; transformers' DeepSpeed ZeRO-3
    loader (5.24) records all of them, and reversing Qwen3.5's unused ``PrefixChange`` (which maps a
    multimodal checkpoint onto the text-only class) prefixes every text tensor again: ZeRO-3's ``final/``
    named ``model.language_model.model.language_model.*`` (measured on the tiny checkpoint), which
    transformers reads back but vLLM and the published layout do not. Call it before the first save.
    """
    conversions = getattr(model, "_weight_conversions", None)
    if not conversions:
        return 0
    used = [c for c in conversions if getattr(c, "was_used", lambda: True)()]
    model._weight_conversions = used
    return len(conversions) - len(used)


def copy_processor_files(source: str | Path, target: str | Path) -> list[str]:
    """Copy the processor files (:data:`PROCESSOR_FILES`) of checkpoint ``source`` into directory ``target``.

    ``source`` is a local checkpoint directory or a hub id (read from the local hub cache, or the hub
    when it is reachable). The files are copied byte for byte. Returns the names copied; a
    vision-language source without any is logged as a warning (vLLM cannot start such a checkpoint).
    """
    target = Path(target)
    copied = []
    for name in PROCESSOR_FILES:
        found = _source_file(source, name)
        if found is not None:
            shutil.copyfile(found, target / name)
            copied.append(name)
    if not copied:
        log.warning("%s has none of %s: %s cannot be served by vLLM as a vision-language model until they are "
                    "added", source, ", ".join(PROCESSOR_FILES), target)
    return copied


def copy_checkpoint_extras(source: str | Path, target: str | Path) -> dict[str, list[str]]:
    """:func:`copy_processor_files` and :func:`copy_unmodelled_tensors` from ``source`` into ``target``."""
    return {"processor_files": copy_processor_files(source, target),
            "unmodelled_tensors": copy_unmodelled_tensors(source, target)}


def copy_unmodelled_tensors(source: str | Path, target: str | Path,
                            prefixes: tuple[str, ...] = UNMODELLED_PREFIXES) -> list[str]:
    """Copy ``source``'s tensors named ``prefixes*`` (values unchanged) into ``target`` as :data:`UNMODELLED_FILE`
    and list them in ``target``'s safetensors index (written when ``target`` has a single ``model.safetensors``).
    Returns the tensor names copied (none: nothing is written)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    target = Path(target)
    found: dict[str, torch.Tensor] = {}
    for shard, names in _source_shards(source, prefixes).items():
        with safe_open(str(shard), framework="pt") as handle:
            found.update({n: handle.get_tensor(n) for n in names})
    if not found:
        return []
    save_file(found, str(target / UNMODELLED_FILE), metadata={"format": "pt"})
    index_path = target / INDEX
    if index_path.is_file():
        index = json.loads(index_path.read_text())
    else:
        with safe_open(str(target / "model.safetensors"), framework="pt") as handle:
            index = {"metadata": {}, "weight_map": {n: "model.safetensors" for n in handle.keys()}}
    index["weight_map"].update({n: UNMODELLED_FILE for n in found})
    index["weight_map"] = dict(sorted(index["weight_map"].items()))
    index_path.write_text(json.dumps(index, indent=2) + "\n")
    return sorted(found)


def _source_shards(source: str | Path, prefixes: tuple[str, ...]) -> dict[Path, list[str]]:
    """``{shard path: names}`` of checkpoint ``source``'s tensors named ``prefixes*`` (from its index, or its single
    ``model.safetensors``); only the shards that hold such tensors are looked up."""
    index = _source_file(source, INDEX)
    if index is not None:
        weight_map = json.loads(index.read_text())["weight_map"]
        by_file: dict[str, list[str]] = {}
        for name, file in weight_map.items():
            if name.startswith(prefixes):
                by_file.setdefault(file, []).append(name)
        shards = {}
        for file, names in by_file.items():
            path = _source_file(source, file)
            if path is not None:
                shards[path] = names
        return shards
    single = _source_file(source, "model.safetensors")
    if single is None:
        return {}
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as handle:
        names = [n for n in handle.keys() if n.startswith(prefixes)]
    return {single: names} if names else {}


def _source_file(source: str | Path, name: str) -> Path | None:
    local = Path(source).expanduser()
    if local.is_dir():
        return local / name if (local / name).is_file() else None
    from transformers.utils import cached_file

    try:
        found = cached_file(str(source), name, _raise_exceptions_for_missing_entries=False,
                            _raise_exceptions_for_connection_errors=False)
    except OSError:
        return None
    return Path(found) if found else None
