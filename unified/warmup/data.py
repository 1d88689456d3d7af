"""The warmup's prompts and rewards, from the recipe: :mod:`unified.lwm` and :mod:`unified.rewards`.

A training row (columns of :func:`unified.lwm.rl_dataset`):

- ``prompt``: chat messages: system (domain task, action space, initial state), then alternating
  user (action) / assistant (observation) turns up to t-1, then the user action at turn t;
- ``reference``: the environment's real observation at turn t (what the rewards compare to);
- ``domain``, ``sample_id``, ``turn_idx``: bookkeeping, passed to the reward functions.

Exactly one turn t is sampled per trajectory (seeded), as in the Qwen-AgentWorld warmup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple

from unified.warmup.config import WarmupConfig
from unified.lwm import rl_dataset
from unified.rewards import build_rewards

REQUIRED_COLUMNS = ("prompt", "reference")


def _paths(items: list[str]) -> list[str]:
    missing = [p for p in items if not Path(p).exists()]
    if missing:
        raise FileNotFoundError(f"data: not found: {', '.join(missing)} (relative paths are read from {Path.cwd()})")
    return items


def _rl_dataset(paths: list[str], *, seed: int, tokenizer, max_prompt_tokens: int | None):
    source: Any = paths[0] if len(paths) == 1 else paths
    if max_prompt_tokens is None:  # the tokenizer is only needed to measure prompts against the limit
        tokenizer = None
    return rl_dataset(source, seed=seed, tokenizer=tokenizer, max_prompt_tokens=max_prompt_tokens)


def check_columns(dataset, where: str = "dataset") -> None:
    """A training set must carry the conversational ``prompt`` and the ``reference`` observation."""
    missing = [c for c in REQUIRED_COLUMNS if c not in dataset.column_names]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing}; got {dataset.column_names}")


def split_heldout(dataset, size: int, seed: int, *, field: str = "data.heldout_size"):
    """Seeded split of ``size`` rows (distinct trajectories) off ``dataset``: ``(train, heldout)``."""
    if size <= 0:
        return dataset, None
    if size >= len(dataset):
        raise ValueError(f"{field}={size} leaves no training rows (dataset has {len(dataset)})")
    shuffled = dataset.shuffle(seed=seed)
    return shuffled.select(range(size, len(shuffled))), shuffled.select(range(size))


class Splits(NamedTuple):
    """The recipe's rows: ``train`` (what GSPO samples), ``heldout`` (the before/after score) and
    ``validation`` (the collapse guard's probe); the last two are None when the recipe asks for none.
    The three are disjoint trajectories; the held-out split is the same whatever ``validation_size``."""

    train: Any
    heldout: Any
    validation: Any


def load_splits(cfg: WarmupConfig, tokenizer=None) -> Splits:
    """The recipe's :class:`Splits` (``heldout``/``validation`` None when none is asked for)."""
    d = cfg.data
    full = _rl_dataset(_paths(d.train), seed=d.seed, tokenizer=tokenizer, max_prompt_tokens=d.max_prompt_tokens)
    check_columns(full, f"data.train {d.train}")
    if d.heldout:
        heldout = _rl_dataset(_paths(d.heldout), seed=d.seed, tokenizer=tokenizer,
                              max_prompt_tokens=d.max_prompt_tokens)
        check_columns(heldout, f"data.heldout {d.heldout}")
        if d.heldout_size:
            heldout = heldout.shuffle(seed=d.seed).select(range(min(d.heldout_size, len(heldout))))
        train = full
    else:
        train, heldout = split_heldout(full, d.heldout_size, d.seed)
    # a different shuffle from the held-out one; taken after it, so the held-out rows never move
    train, validation = split_heldout(train, d.validation_size, d.seed + 1, field="data.validation_size")
    if d.limit is not None:
        train = train.select(range(min(d.limit, len(train))))
    if len(train) == 0:
        raise ValueError(f"data.train {d.train}: no samples left (max_prompt_tokens={d.max_prompt_tokens}, "
                         f"limit={d.limit})")
    return Splits(train, heldout, validation)


def load_rewards(cfg: WarmupConfig, *, training: bool = True) -> tuple[list[Callable], list[float]]:
    """The TRL reward callables of ``cfg.rewards`` and their weights, in list order (rubric:rule 9:1 by
    default; :func:`unified.rewards.build_rewards`).

    ``training``: also the ``training_only`` entries (shaping terms such as a repetition penalty); a
    held-out score passes ``False`` so that it measures the recipe's scored rewards alone."""
    return build_rewards(cfg.rewards, training=training)
