"""Whether an agentic run can do what its recipe says (light: read by the preflight before anything loads).

- :func:`unapplied_settings` and :func:`ignored_settings`: the agentic trainer (:mod:`unified.warmup.agentic`)
  is its own loop, not TRL's GRPOTrainer, and applies only :data:`AGENTIC_APPLIED` of a recipe's settings.
  Any other setting given a value other than its default is named, never silently dropped: refused where it
  would change what is trained or how (a KL ``beta``, another loss or advantage scaling, ``precision: bf16``,
  ``moe.routing_replay``, a multi-node ``launch``, a sampling knob the episodes would not use), listed as not
  applied where it only concerns the single-turn trainer's data, batching and monitors (:data:`ONLY_LISTED`),
  so a single-turn recipe plus a ``benchmark`` entry still runs;
- :func:`backend_problems`: the ``generation.backend`` combinations the engines
  (:mod:`unified.warmup.agentic_backends`) refuse.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from unified.config import ConfigError
from unified.warmup.config import WarmupConfig, is_agentic

AGENTIC_APPLIED: dict[str, frozenset[str]] = {
    "model": frozenset({"name_or_path", "attn_implementation", "experts_implementation", "trainable_layers",
                        "trust_remote_code"}),
    "gspo": frozenset({"epsilon", "epsilon_high", "num_generations", "num_iterations",
                       "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min"}),
    "monitor": frozenset({"max_dropped_share", "max_zero_variance_share", "patience_batches"}),
    "generation": frozenset({"backend", "max_completion_length", "temperature", "top_p", "thinking",
                             "vllm_server_host", "vllm_server_port", "vllm_server_timeout_s",
                             "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_max_model_length"}),
    "train": frozenset({"max_steps", "learning_rate", "weight_decay", "max_grad_norm", "save_steps",
                        "save_total_limit", "seed"}),
}
"""Per recipe section, the settings the agentic trainer applies; the ``agentic`` section is all its own, and
``logging`` is not checked (the trainer writes ``metrics.jsonl``; :func:`unified.warmup.config.describe` says
it logs nothing to wandb)."""
UNAPPLIED_WHY: dict[str, str] = {
    "model": "it loads the checkpoint in fp32 with no gradient checkpointing and adds no router loss",
    "data": "its tasks come from the benchmark entry (rewards: limit, split, heldout_size)",
    "gspo": ("its loss is GSPO's sequence ratio against the trainer's log-probs at the step's start with "
             "group-normalised advantages and token-level truncated IS for the sampler's gap: no KL, no TRL loss "
             "type or reward scaling, no other importance-sampling mode"),
    "monitor": ("of the fail-fast monitors it applies max_dropped_share, max_zero_variance_share and "
                "patience_batches (one step = one generation batch); the others watch the single-turn trainer's "
                "probe and rollouts"),
    "generation": "the episodes are sampled with temperature, top_p, max_completion_length and thinking only",
    "train": ("it takes one AdamW step a GSPO iteration over all the step's episodes at a constant learning "
              "rate, in one process"),
    "launch": "it runs in one process (no DDP, ZeRO, FSDP or several nodes)",
    "moe": "its loss does not replay the rollout's routes yet (and vLLM's chat API returns none)",
    "parity_probe": "the step-0 parity probe runs in the single-turn trainer only",
}
"""Why a section's other settings are not applied (the refusal's reason)."""
ONLY_LISTED: dict[str, frozenset[str] | None] = {
    "data": None, "monitor": None,
    "gspo": frozenset({"steps_per_generation"}),
    "generation": frozenset({"cpu_threads"}),
    "model": frozenset({"gradient_checkpointing"}),
    "train": frozenset({"per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps",
                        "dataloader_num_workers", "collective_timeout_s"}),
}
"""Settings not applied that only concern the single-turn trainer's data, batching and monitors (None: the whole
section): named by :func:`ignored_settings` (the dry run, the run's log and report), not refused."""
_UNCHECKED = frozenset({"output_dir", "resume", "rewards", "agentic", "logging"})


def _not_applied(cfg: WarmupConfig) -> list[tuple[str, str, object, object]]:
    """``(section, key, value, default)`` of each setting that differs from its default and that the agentic
    trainer does not apply; empty for a recipe that is not agentic."""
    if not is_agentic(cfg):
        return []
    default = WarmupConfig()
    out = []
    for section in dataclasses.fields(WarmupConfig):
        if section.name in _UNCHECKED:
            continue
        ours, theirs = getattr(cfg, section.name), getattr(default, section.name)
        applied = AGENTIC_APPLIED.get(section.name, frozenset())
        for item in dataclasses.fields(ours):
            value, plain = getattr(ours, item.name), getattr(theirs, item.name)
            if item.name not in applied and value != plain:
                out.append((section.name, item.name, value, plain))
    return out


def _only_listed(section: str, key: str) -> bool:
    keys = ONLY_LISTED.get(section, frozenset())
    return keys is None or key in keys


def unapplied_settings(cfg: WarmupConfig) -> list[str]:
    """One line for each setting of an agentic recipe that the agentic trainer would not apply and that changes
    what is trained or how (``section.key=value``, the reason, the default): the run is refused."""
    return [f"{section}.{key}={value!r}: the agentic trainer does not apply it ({UNAPPLIED_WHY[section]}); "
            f"leave it at its default {plain!r}"
            for section, key, value, plain in _not_applied(cfg) if not _only_listed(section, key)]


IGNORED_LINE = "not applied by the agentic trainer (single-turn data, batching or monitors): {}"
"""How the dry run and the run's log name each of :func:`ignored_settings`."""


def ignored_settings(cfg: WarmupConfig) -> list[str]:
    """``section.key=value`` of each setting of an agentic recipe that the agentic trainer does not apply and that
    only concerns the single-turn trainer (:data:`ONLY_LISTED`): said, not refused."""
    return [f"{section}.{key}={value!r}" for section, key, value, _ in _not_applied(cfg) if _only_listed(section, key)]


def cuda_trainer() -> bool:
    """Whether the trainer process has a CUDA device (weight sync to a vLLM server needs one)."""
    import torch

    return torch.cuda.is_available()


def agentic_problems(cfg: WarmupConfig) -> list[str]:
    """Every line of :func:`unapplied_settings` and :func:`backend_problems` (the preflight's agentic checks)."""
    return unapplied_settings(cfg) + backend_problems(cfg)


def backend_problems(cfg: WarmupConfig) -> list[str]:
    """One line for each reason the agentic run cannot sample on ``cfg.generation.backend``; empty when it can
    (and for a recipe that is not agentic)."""
    backend = cfg.generation.backend
    if backend == "hf" or not is_agentic(cfg):
        return []
    if backend == "vllm_colocate" and importlib.util.find_spec("vllm") is None:
        return ["generation.backend=vllm_colocate: vLLM is not installed in this environment (the gpu extra on a "
                "CUDA machine); use generation.backend=hf, or vllm_server with a rollout server"]
    if backend == "vllm_colocate" and cfg.generation.vllm_tensor_parallel_size > 1:
        return [f"generation.vllm_tensor_parallel_size={cfg.generation.vllm_tensor_parallel_size} with "
                "generation.backend=vllm_colocate: the agentic trainer is one process, so its colocated vLLM runs "
                "on one GPU (tensor parallel 1); use vllm_server for a larger engine"]
    if backend == "vllm_server" and cfg.train.max_steps > 1 and not cuda_trainer():
        return ["generation.backend=vllm_server on a trainer without CUDA: the weights reach the server over vLLM's NCCL "
                "weight-transfer engine (CUDA only), so every step after the first would sample the first step's "
                f"weights (train.max_steps={cfg.train.max_steps}); run on a GPU, or use generation.backend=hf"]
    return []


def refuse_agentic_problems(cfg: WarmupConfig) -> None:
    """Raise ConfigError naming the first of :func:`agentic_problems` (a setting the agentic trainer would not
    apply, or an engine it cannot sample on as configured); called before anything loads."""
    found = agentic_problems(cfg)
    if found:
        raise ConfigError(found[0])


__all__ = ["AGENTIC_APPLIED", "IGNORED_LINE", "ONLY_LISTED", "UNAPPLIED_WHY", "agentic_problems", "backend_problems", "cuda_trainer",
           "ignored_settings", "refuse_agentic_problems", "unapplied_settings"]
