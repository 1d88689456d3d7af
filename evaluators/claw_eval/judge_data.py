"""The agent's text in a Claw-Eval judge request is data: its score markers are neutralised.

The checkout's ``claw_eval/graders/llm_judge.py`` puts the conversation and the actions summary
(text the agent wrote or caused) into its user message verbatim, under markdown headings, and reads
the answer's first ``{...}`` object, else the first ``"score": N`` anywhere in it. A judge that
echoes its request (or copies a quoted block) therefore answers whatever score the agent planted:
0 -> 1.0 with an echoing judge. The official prompt's wording cannot change (it is the
benchmark's), so the grader's judge is wrapped *around* its methods: before ``evaluate``,
``evaluate_actions`` and ``evaluate_visual`` build the official request, the arguments that carry
the agent's text (``conversation``, ``actions_summary``, ``artifacts``, ``context``) go through
:func:`neutralise`:

- ``{`` ``}`` -> ``｛`` ``｝`` (U+FF5B/U+FF5D): no JSON object of the agent's can be parsed;
- a quoted ``"score"`` / ``'score'`` (any case) -> ``“score”``: the parser's fallback pattern
  ``"score"\\s*:\\s*N`` cannot match the agent's text;
- a line starting with ``#`` -> ``\\#``: the agent cannot open a section of its own
  (``## Rubric``) inside the data.

The task prompt and the rubric (benchmark text) are untouched. The text the judge reads stays
legible; only the bytes of the agent's part of the request differ from the official ones, and
the grader counts the requests where they did (``judge_stats["data_neutralised"]``; the result
and the summary say so). This file is stdlib only: the sandboxed grader runner loads it from
``/grader`` (our package is not importable there).
"""

from __future__ import annotations

import inspect
import re

DATA_ARGUMENTS = {"evaluate": ("conversation", "actions_summary"), "evaluate_actions": ("artifacts",),
                  "evaluate_visual": ("context",)}
"""The checkout's ``LLMJudge`` methods and their parameters that carry the agent's text."""

_SCORE_KEY = re.compile(r"""["']score["']""", re.IGNORECASE)
_HEADING = re.compile(r"^([ \t]*)#", re.MULTILINE)
_BRACES = str.maketrans({"{": "\uff5b", "}": "\uff5d"})


def neutralise(text: str) -> str:
    """``text`` with its score markers neutralised (module docstring); other text unchanged."""
    if not isinstance(text, str) or not text:
        return text
    text = text.translate(_BRACES)
    text = _SCORE_KEY.sub("\u201cscore\u201d", text)
    return _HEADING.sub(r"\1\\#", text)


def wrap_judge(judge, stats: dict) -> None:
    """Make ``judge``'s methods neutralise their agent-text arguments before the official code runs.

    ``stats["data_neutralised"]`` counts the calls whose arguments changed, ``stats["judge_calls"]``
    every wrapped call."""
    stats.setdefault("data_neutralised", 0)
    stats.setdefault("judge_calls", 0)
    for method, names in DATA_ARGUMENTS.items():
        original = getattr(judge, method, None)
        if original is None:
            continue
        signature = inspect.signature(original)

        def wrapped(*args, _original=original, _signature=signature, _names=names, **kwargs):
            bound = _signature.bind(*args, **kwargs)
            changed = False
            for name in _names:
                if name in bound.arguments:
                    value = bound.arguments[name]
                    safe = neutralise(value)
                    changed = changed or safe != value
                    bound.arguments[name] = safe
            stats["judge_calls"] += 1
            stats["data_neutralised"] += int(changed)
            return _original(*bound.args, **bound.kwargs)

        setattr(judge, method, wrapped)
