"""Training callbacks: metrics to an append-only JSONL file, and the run's memory high-water mark.

TRL's ``GRPOTrainer`` already computes what the warmup must log, per logging step:

- rewards and their breakdown: ``reward``, ``reward_std``, ``rewards/<function>/mean|std`` (one
  entry per reward function, e.g. the rubric judge and the rule verifier, plus whatever a
  reward function reports through TRL's ``log_metric``);
- completion lengths: ``completions/mean_length``, ``.../min_length``, ``.../max_length``,
  ``completions/clipped_ratio`` (share truncated at ``max_completion_length``);
- clip fraction: ``clip_ratio/region_mean`` (share of sequences whose ratio s_i left
  ``[1 - eps, 1 + eps_high]`` on the side where clipping binds), ``clip_ratio/low_mean``,
  ``clip_ratio/high_mean``;
- the MoE router's load-balancing loss: ``aux_loss`` (already weighted into ``loss``).

:class:`JsonlMetricsCallback` writes every such record to ``<output_dir>/metrics.jsonl`` as it
comes (one JSON object per line, flushed), so a run can be inspected or plotted without wandb
and a crashed run keeps everything it logged. :func:`peak_memory_gib` is what the trainer adds
as ``memory/peak_rss_gib`` and ``memory/peak_cuda_gib``.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from unified.store import append_jsonl, read_jsonl, repair_tail
from unified.types import ROW_SCHEMA, row_fields

METRICS_FILE = "metrics.jsonl"


def peak_memory_gib() -> dict[str, float]:
    """Peak resident set size of this process (and peak CUDA allocation when on GPU), in GiB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB, macOS bytes
    out = {"memory/peak_rss_gib": rss_bytes / 2**30}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["memory/peak_cuda_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    return value


class JsonlMetricsCallback(TrainerCallback):
    """Append each ``on_log`` record (with step and wall time) to a JSONL file, main process only."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._start = time.time()
        repair_tail(self.path)  # a line torn by a killed run is cut before a resumed run appends

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        record = {"schema": ROW_SCHEMA, "step": state.global_step, "time_s": round(time.time() - self._start, 3)}
        record.update({k: _jsonable(v) for k, v in logs.items()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path, record)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (a torn last line from a crash is ignored; a bad line
    elsewhere is an error naming file and line); each row's ``schema`` is checked and removed
    (:func:`unified.types.row_fields`: rows before versioning read as version 1)."""
    return [row_fields(row, f"{path}:{number}") for number, row in enumerate(read_jsonl(path), 1)]
