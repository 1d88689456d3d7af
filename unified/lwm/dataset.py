"""Records -> chat samples, seeded one-turn-per-trajectory sampling, and the RL dataset.

Chat sample of a record at turn t (``to_chat``)::

    [system: system_str (or the domain's default prompt)]
    [user: a_1] [assistant: o_1] ... [user: a_{t-1}] [assistant: o_{t-1}]
    [user: a_t]                                    -> target o_t  (the ``reference``)

Assistant turns of GUI domains are wrapped in ``<predicted_observation>`` tags, the format the
model is asked to answer in.

RL sampling (Qwen-AgentWorld's recipe): exactly one turn per trajectory, chosen uniformly with
a seeded generator that depends only on (seed, domain, trajectory id), so adding files or
reordering them never changes which turn a trajectory contributes.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from unified.lwm.prompts import domain_prompt, format_observation
from unified.lwm.records import AWBRecord, load_records


def to_chat(record: AWBRecord, *, max_history: int | None = None) -> list[dict[str, str]]:
    """The chat messages of ``record`` (system, history pairs, current action).

    ``max_history`` keeps only the last that many (action, observation) pairs.
    """
    system = record.system_str or domain_prompt(record.task)
    history = record.history
    if max_history is not None:
        history = history[len(history) - max_history:] if max_history > 0 else []
    messages = [{"role": "system", "content": system}]
    for action, observation in history:
        messages.append({"role": "user", "content": action})
        messages.append({"role": "assistant", "content": format_observation(record.task, observation)})
    messages.append({"role": "user", "content": record.action})
    return messages


def _stable_rng(seed: int, *parts: str) -> random.Random:
    digest = hashlib.sha256("\x1f".join([str(seed), *map(str, parts)]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def sample_one_turn_per_trajectory(records: Sequence[AWBRecord], seed: int) -> list[AWBRecord]:
    """One record per (domain, trajectory id), seeded; the result is shuffled with ``seed``.

    The turn is drawn among the records present for that trajectory.
    """
    groups: dict[tuple[str, str], list[AWBRecord]] = defaultdict(list)
    for r in records:
        groups[(r.task, str(r.id))].append(r)  # published ids are integers: str keeps mixed files sortable
    chosen = []
    for (task, traj), items in sorted(groups.items()):
        items = sorted(items, key=lambda r: r.turn_idx)
        chosen.append(_stable_rng(seed, task, traj).choice(items))
    _stable_rng(seed, "order").shuffle(chosen)
    return chosen


def _prompt_tokens(tokenizer, messages: list[dict[str, str]]) -> int:
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in recent transformers
        ids = ids["input_ids"]
    return len(ids)


def fit_prompt(record: AWBRecord, tokenizer=None, max_prompt_tokens: int | None = None) -> list[dict] | None:
    """``to_chat(record)``, dropping the oldest history pairs until it fits ``max_prompt_tokens``.

    Returns None when even the prompt without history is too long.
    """
    messages = to_chat(record)
    if tokenizer is None or max_prompt_tokens is None:
        return messages
    pairs = len(record.history)
    while True:
        if _prompt_tokens(tokenizer, messages) <= max_prompt_tokens:
            return messages
        if pairs == 0:
            return None
        pairs -= 1
        messages = to_chat(record, max_history=pairs)


def rl_rows(paths_or_dir, *, seed: int, limit: int | None = None, tokenizer=None,
            max_prompt_tokens: int | None = None) -> list[dict[str, Any]]:
    """The rows of :func:`rl_dataset` as plain dicts."""
    if (tokenizer is None) != (max_prompt_tokens is None):
        raise ValueError("rl_dataset: give both tokenizer and max_prompt_tokens, or neither")
    rows = []
    for record in sample_one_turn_per_trajectory(load_records(paths_or_dir), seed):
        prompt = fit_prompt(record, tokenizer, max_prompt_tokens)
        if prompt is None:
            continue
        rows.append({"prompt": prompt, "reference": record.target, "domain": record.task,
                     "sample_id": record.key, "turn_idx": record.turn_idx})
        if limit is not None and len(rows) >= limit:
            break
    return rows


def rl_dataset(paths_or_dir, *, seed: int, limit: int | None = None, tokenizer=None,
               max_prompt_tokens: int | None = None):
    """The GSPO warmup's dataset: one sampled turn per trajectory, as a ``datasets.Dataset``.

    Columns:
      - ``prompt``: list of chat messages {role, content}: system, alternating user (action) /
        assistant (observation) turns 1..t-1, then user (action t) — TRL's conversational format;
      - ``reference``: the ground-truth observation o_t (str);
      - ``domain``: mcp, search, terminal, swe, web, os or android;
      - ``sample_id``: ``domain/trajectory_id/t``;
      - ``turn_idx``: t (1-based).

    ``paths_or_dir`` is a JSONL file, a directory of them, or a list. With ``tokenizer`` and
    ``max_prompt_tokens``, the oldest history pairs are dropped until the rendered prompt
    (chat template + generation prompt) fits; samples that cannot fit are left out.
    ``limit`` caps the number of rows (after sampling and shuffling).
    """
    import datasets

    rows = rl_rows(paths_or_dir, seed=seed, limit=limit, tokenizer=tokenizer, max_prompt_tokens=max_prompt_tokens)
    features = datasets.Features({
        "prompt": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
        "reference": datasets.Value("string"),
        "domain": datasets.Value("string"),
        "sample_id": datasets.Value("string"),
        "turn_idx": datasets.Value("int64"),
    })
    return datasets.Dataset.from_list(rows, features=features)
