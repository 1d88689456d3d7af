"""Checkpoints: loading (local dir, hub id, GGUF, ``embedded``), the embedded default MoE,
tiny random MoE models for tests, and the Qwen3.5-style chat template."""

from unified.models.chat_template import CHAT_SPECIAL_TOKENS, install_chat_template, qwen35_chat_template
from unified.models.checkpoint import (
    CheckpointNotFoundError,
    HubUnreachableError,
    LoadedCheckpoint,
    default_dtype,
    is_moe_config,
    load_checkpoint,
    resolve_spec,
)
from unified.models.embedded import UpcycleSpec, cache_dir, embedded_checkpoint_dir, ensure_embedded_checkpoint

__all__ = [
    "CHAT_SPECIAL_TOKENS", "CheckpointNotFoundError", "HubUnreachableError", "LoadedCheckpoint", "UpcycleSpec",
    "cache_dir", "default_dtype", "embedded_checkpoint_dir", "ensure_embedded_checkpoint", "install_chat_template",
    "is_moe_config", "load_checkpoint", "qwen35_chat_template", "resolve_spec",
]
