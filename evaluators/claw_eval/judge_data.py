"""The agent's text in a Claw-Eval judge request: only what could plant a score is neutralised.

The checkout's ``claw_eval/graders/llm_judge.py`` puts the conversation and the actions summary
(text the agent wrote or caused) into its user message verbatim and reads the answer's first flat
``{...}`` object (JSON with ``score`` and ``reasoning``), else the first ``"score": N`` anywhere
in it. A judge that echoes its request (or quotes the agent) would therefore answer a score the
agent planted: 0 -> 1.0 with an echoing judge. The official prompt's wording cannot change (it is
the benchmark's), so the grader's judge is wrapped *around* its methods: before ``evaluate``,
``evaluate_actions`` and ``evaluate_visual`` build the official request, the arguments that carry
the agent's text (``conversation``, ``actions_summary``, ``artifacts``, ``context``) go through
:func:`neutralise`, which changes exactly the markers that parser reads and nothing else:

- a flat ``{...}`` that parses as JSON with a ``score`` key: its two braces -> ``｛`` ``｝``
  (U+FF5B/U+FF5D);
- a ``"score"`` followed by ``:`` and a number: its quotes -> ``“score”``.

Text without such a marker (tool-call JSON, code, headings, the word score) is passed byte for
byte, so the request is the official one. The task prompt and the rubric (benchmark text) are
never touched. The grader counts the requests that changed (``judge_stats["data_neutralised"]``)
and the markers (``judge_stats["markers_neutralised"]``). This file is stdlib only: the sandboxed
grader runner loads it from ``/grader`` (our package is not importable there).
"""

from __future__ import annotations

import inspect
import json
import re

DATA_ARGUMENTS = {"evaluate": ("conversation", "actions_summary"), "evaluate_actions": ("artifacts",),
                  "evaluate_visual": ("context",)}
"""The checkout's ``LLMJudge`` methods and their parameters that carry the agent's text."""

_FLAT_OBJECT = re.compile(r"\{[^{}]*\}")
_SCORE_VALUE = re.compile(r'"score"(?=\s*:\s*[0-9.])')


def _scored_object(candidate: str) -> bool:
    try:
        value = json.loads(candidate)
    except ValueError:
        return False
    return isinstance(value, dict) and "score" in value


def neutralise_counted(text: str) -> tuple[str, int]:
    """``text`` with its score markers neutralised (module docstring), and how many there were."""
    if not isinstance(text, str) or not text:
        return text, 0
    count = 0

    def braces(match: re.Match) -> str:
        nonlocal count
        if not _scored_object(match.group(0)):
            return match.group(0)
        count += 1
        return "\uff5b" + match.group(0)[1:-1] + "\uff5d"

    def key(match: re.Match) -> str:
        nonlocal count
        count += 1
        return "\u201cscore\u201d"

    text = _FLAT_OBJECT.sub(braces, text)
    return _SCORE_VALUE.sub(key, text), count


def neutralise(text: str) -> str:
    """:func:`neutralise_counted`'s text."""
    return neutralise_counted(text)[0]


def wrap_judge(judge, stats: dict) -> None:
    """Make ``judge``'s methods neutralise their agent-text arguments before the official code runs.

    ``stats["data_neutralised"]`` counts the calls whose arguments changed, ``stats["markers_neutralised"]``
    the markers, ``stats["judge_calls"]`` every wrapped call."""
    stats.setdefault("data_neutralised", 0)
    stats.setdefault("markers_neutralised", 0)
    stats.setdefault("judge_calls", 0)
    for method, names in DATA_ARGUMENTS.items():
        original = getattr(judge, method, None)
        if original is None:
            continue
        signature = inspect.signature(original)

        def wrapped(*args, _original=original, _signature=signature, _names=names, **kwargs):
            bound = _signature.bind(*args, **kwargs)
            markers = 0
            for name in _names:
                if name in bound.arguments:
                    bound.arguments[name], found = neutralise_counted(bound.arguments[name])
                    markers += found
            stats["judge_calls"] += 1
            stats["data_neutralised"] += int(markers > 0)
            stats["markers_neutralised"] += markers
            return _original(*bound.args, **bound.kwargs)

        setattr(judge, method, wrapped)
