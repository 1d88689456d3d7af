"""Degenerate completions: repetition loops of any unit, and truncation at the length limit.

A policy that collapses during the warmup answers with loops such as ``"#\\n\\n#\\n\\n#..."``,
``"```\\n\\n```..."``, ``"<think>\\n\\n<think>..."`` or one sentence repeated until the length
limit. Their similarity reward (about 0) is no lower than that of most wrong answers, so the
reward alone does not show them; this module names them, for the per-step logs
(:class:`DegenerateMonitor`, :mod:`unified.warmup.guard`) and the before/after benchmark.

A completion is a **loop** when one of its unit sequences ``u_1..u_n`` (characters, token ids,
non-empty lines, sentences) ends in a periodic tail: the largest ``L`` such that
``u_i = u_{i-p}`` for the last ``L`` units, for some period ``p``, holds at least ``min_repeats``
copies of the unit (``L + p >= min_repeats * p``) and covers at least ``min_coverage`` of the
sequence (``(L + p) / n``, in characters for character/token units). Lines and sentences also
count as a loop when the most frequent one occurs at least ``min_repeats`` times and makes up
``min_coverage`` of them. A truncated completion hit ``max_completion_length`` without an EOS.
Normal prose, JSON or a directory listing has no periodic tail covering half of it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Loop:
    """A detected repetition loop: which unit repeats, the repeated unit, how many copies."""

    unit: str
    """``chars``, ``tokens``, ``lines`` or ``sentences``."""
    pattern: str
    repeats: int
    coverage: float


def periodic_tail(seq: Sequence[Any], max_period: int) -> tuple[int, int]:
    """``(p, L)`` of the longest periodic tail: ``seq[i] == seq[i - p]`` for the last ``L`` items.

    The tail then holds ``(L + p) / p`` copies of the unit ``seq[-p:]`` (the last copy may be cut
    short). Ties go to the shortest period. ``(0, 0)`` for a sequence of fewer than 2 items."""
    n = len(seq)
    best = (0, 0)
    for p in range(1, min(max_period, n // 2) + 1):
        run = 0
        i = n - 1
        while i - p >= 0 and seq[i] == seq[i - p]:
            run += 1
            i -= 1
        if run > best[1]:
            best = (p, run)
    return best


def _periodic_loop(seq: Sequence[Any], unit: str, *, min_repeats: int, min_coverage: float, max_period: int,
                   min_chars: int, render) -> Loop | None:
    p, run = periodic_tail(seq, max_period)
    if p == 0:
        return None
    span = run + p
    repeats = span // p
    coverage = span / len(seq)
    if repeats < min_repeats or coverage < min_coverage:
        return None
    pattern = render(seq[len(seq) - p:])
    if len(render(seq[len(seq) - span:])) < min_chars or not pattern.strip():
        return None
    return Loop(unit, pattern, repeats, round(coverage, 3))


def _frequent_loop(items: list[str], unit: str, *, min_repeats: int, min_coverage: float) -> Loop | None:
    if len(items) < min_repeats:
        return None
    item, count = Counter(items).most_common(1)[0]
    if count >= min_repeats and count / len(items) >= min_coverage:
        return Loop(unit, item, count, round(count / len(items), 3))
    return None


def find_loop(text: str, token_ids: Sequence[int] | None = None, *, min_repeats: int = 3,
              min_coverage: float = 0.5, max_period: int = 200, min_chars: int = 8) -> Loop | None:
    """The repetition loop of a completion, or ``None`` for a completion that is not one.

    ``token_ids``: the completion's ids (without padding), checked as a unit sequence too.
    ``min_chars``: a loop spans at least this many characters (``"..."`` or ``"----"`` alone is no loop).
    """
    if not text.strip():
        return None
    kw = dict(min_repeats=min_repeats, min_coverage=min_coverage)
    found = _periodic_loop(text, "chars", max_period=max_period, min_chars=min_chars, render="".join, **kw)
    if found:
        return found
    if token_ids:
        ids = list(token_ids)
        found = _periodic_loop(ids, "tokens", max_period=max_period, min_chars=0,
                               render=lambda s: " ".join(map(str, s)), **kw)
        if found:
            return found
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found = _periodic_loop(lines, "lines", max_period=max_period, min_chars=min_chars, render="\n".join, **kw) or \
        _frequent_loop(lines, "lines", **kw)
    if found:
        return found
    sentences = [s.strip() for s in _SENTENCE.split(text) if len(s.strip().split()) >= 2]
    return _periodic_loop(sentences, "sentences", max_period=max_period, min_chars=min_chars, render=" ".join,
                          **kw) or _frequent_loop(sentences, "sentences", **kw)


def is_truncated(token_ids: Sequence[int], max_length: int, eos_token_id: int | Sequence[int] | None) -> bool:
    """The completion used the whole ``max_length`` without ending in an EOS token."""
    eos = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id or ())
    ids = list(token_ids)
    return len(ids) >= max_length and not (ids and ids[-1] in eos)


def loop_count(texts: Sequence[str]) -> int:
    """How many of ``texts`` are repetition loops (:func:`find_loop`)."""
    return sum(find_loop(t) is not None for t in texts)


def _text(completion) -> str:
    if isinstance(completion, list):  # conversational: the assistant message(s)
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


class DegenerateMonitor:
    """A TRL reward function of weight 0 that measures the rollouts: 1.0 for a loop, else 0.0.

    Its weight is 0, so the training reward is unchanged; TRL logs its mean per step as
    ``rewards/degenerate/mean`` (the share of loops among the step's completions), and it
    reports through TRL's ``log_metric`` ``degenerate/loop_share``, ``degenerate/truncated_share``
    (ids of length ``max_length`` without EOS) and ``degenerate/share`` (loop or truncated).
    ``last`` keeps the last batch's figures for the collapse guard.
    """

    __name__ = "degenerate"

    def __init__(self, max_length: int, eos_token_id: int | Sequence[int] | None):
        self.max_length = max_length
        self.eos_token_id = eos_token_id
        self.last: dict[str, float] = {}

    def __call__(self, completions, completion_ids=None, log_metric=None, **kwargs) -> list[float]:
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        loops = [find_loop(_text(c), i) is not None for c, i in zip(completions, ids, strict=True)]
        cut = [i is not None and is_truncated(i, self.max_length, self.eos_token_id) for i in ids]
        n = max(len(loops), 1)
        self.last = {"degenerate/loop_share": sum(loops) / n, "degenerate/truncated_share": sum(cut) / n,
                     "degenerate/share": sum(a or b for a, b in zip(loops, cut)) / n}
        if log_metric is not None:
            for key, value in self.last.items():
                log_metric(key, value)
        return [1.0 if loop else 0.0 for loop in loops]
