"""Checkpoints of an agentic GSPO run (:mod:`unified.warmup.agentic`): save ``checkpoint-N``, resume at N + 1.

``<output_dir>/checkpoint-N/`` holds what step N + 1 needs to go on exactly as an uninterrupted run would:

- the weights (``save_pretrained``: a Hugging Face directory, with the tokenizer, that the eval loads);
- ``optimizer.pt``: AdamW's state (moments and step counts of the trainable parameters, in order);
- ``rng.pt``: the torch (CPU and every CUDA device), Python and numpy generators' states (the ``hf``
  engine samples from torch's global generator);
- ``trainer_state.json``, written last: ``global_step`` = N, the steps' metrics rows so far, the
  training tasks each step used (the task cursor is ``N x agentic.tasks_per_step``), and the held-out
  eval already done (``before``), so a resumed run neither retrains nor re-measures.

A directory whose ``trainer_state.json`` is missing or records another step (a run killed while saving)
is not complete and is skipped (:func:`unified.warmup.trainer.last_complete_checkpoint`, the single-turn
warmup's rule). On resume, ``metrics.jsonl`` rows of steps after N (taken by the killed run, but not
checkpointed) are dropped, so the file holds one row a step of the weights that go on.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from unified.store import json_line, read_jsonl, repair_tail, write_bytes_atomic, write_json_atomic
from unified.warmup.trainer import last_complete_checkpoint

STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"


@dataclass
class AgenticState:
    """Where an agentic run stands after ``global_step`` steps."""

    global_step: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    """The metrics rows (``StepStats``) of steps 1..global_step."""
    tasks_used: list[list[str]] = field(default_factory=list)
    """The training task ids of each step."""
    before: dict[str, Any] | None = None
    """The held-out eval before training (``agentic.eval_before_after``), once measured."""
    rng: dict[str, Any] | None = None
    """The generators' states saved with the checkpoint (:func:`set_rng_state` them just before step N + 1)."""


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(out: Path, loaded, optimizer, state: AgenticState, *, keep: int | None = None) -> Path:
    """``out/checkpoint-N`` (N = ``state.global_step``), its state file last; then only the ``keep`` newest
    complete checkpoints are kept (None: all)."""
    path = out / f"checkpoint-{state.global_step}"
    if path.exists():  # an incomplete one left by a killed run
        shutil.rmtree(path)
    loaded.model.save_pretrained(path)
    loaded.tokenizer.save_pretrained(path)
    torch.save(optimizer.state_dict(), path / OPTIMIZER_FILE)
    torch.save(rng_state(), path / RNG_FILE)
    write_json_atomic(path / STATE_FILE, {"global_step": state.global_step, "steps": state.steps,
                                          "tasks_used": state.tasks_used, "before": state.before})
    if keep is not None:
        older = sorted((p for p in out.glob("checkpoint-*") if p.is_dir() and p != path
                        and p.name.removeprefix("checkpoint-").isdigit()),
                       key=lambda p: int(p.name.removeprefix("checkpoint-")))
        for stale in older[:max(0, len(older) - (keep - 1))]:
            shutil.rmtree(stale, ignore_errors=True)
    return path


def resume_point(cfg) -> Path | None:
    """The checkpoint ``cfg.resume`` names: ``auto`` the last complete one of ``output_dir``, ``never`` none."""
    if cfg.resume == "never":
        return None
    if cfg.resume == "auto":
        return last_complete_checkpoint(cfg.output_dir)
    path = Path(cfg.resume)
    if not (path / STATE_FILE).is_file() or not (path / OPTIMIZER_FILE).is_file():
        raise ValueError(f"resume: {path} is not a checkpoint of an agentic run (no {STATE_FILE} and {OPTIMIZER_FILE})")
    return path


def load_checkpoint_into(path: Path, loaded, optimizer) -> AgenticState:
    """Weights and optimizer state of ``path`` into the run; returns its :class:`AgenticState` (with the RNG
    states, for the caller to set just before the next step: loading and evaluating may draw from them)."""
    data = json.loads((path / STATE_FILE).read_text())
    restored = type(loaded.model).from_pretrained(path, dtype=next(loaded.model.parameters()).dtype)
    loaded.model.load_state_dict(restored.state_dict())
    del restored
    optimizer.load_state_dict(torch.load(path / OPTIMIZER_FILE, map_location="cpu", weights_only=False))
    return AgenticState(global_step=int(data["global_step"]), steps=list(data.get("steps") or []),
                        tasks_used=list(data.get("tasks_used") or []), before=data.get("before"),
                        rng=torch.load(path / RNG_FILE, map_location="cpu", weights_only=False))


def keep_metrics_up_to(metrics: Path, step: int) -> None:
    """Drop ``metrics.jsonl`` rows of steps after ``step`` (steps a killed run took but did not checkpoint)."""
    if not metrics.exists():
        return
    repair_tail(metrics)  # a line torn by the kill
    rows = read_jsonl(metrics)
    kept = [r for r in rows if int(r.get("step", 0)) <= step]
    if len(kept) != len(rows):
        write_bytes_atomic(metrics, b"".join(json_line(r) for r in kept))


def seed_all(seed: int) -> None:
    """The generators of a fresh run, seeded just before step 1 (what loading the model drew is not counted)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


__all__ = ["AgenticState", "keep_metrics_up_to", "load_checkpoint_into", "resume_point", "save_checkpoint", "seed_all",
           "set_rng_state"]
