"""The output parser: what part of a world model's completion the judge and verifiers see.

1. Drop reasoning: every closed ``<think>...</think>`` block, and everything before a stray
   ``</think>`` (templates often put the opening tag in the prompt). An unclosed ``<think>``
   swallows the rest of the text (the model never finished thinking: nothing to judge).
2. If a ``<predicted_observation>...</predicted_observation>`` block remains, keep the content
   of the *last* one; an opened but unclosed last block keeps what follows the tag.
3. Otherwise keep the cleaned text. Surrounding whitespace is stripped.

So self-praise in the reasoning, or anything outside the answer tags, never reaches a judge.
"""

from __future__ import annotations

import re

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_ANSWER_BLOCK = re.compile(r"<predicted_observation>(.*?)</predicted_observation>", re.DOTALL)
_OPEN_ANSWER = "<predicted_observation>"


def strip_reasoning(text: str) -> str:
    """Remove ``<think>`` blocks (see the module docstring for the edge cases)."""
    text = _THINK_BLOCK.sub("", text or "")
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text


def parse_observation(completion: str) -> str:
    """The predicted observation a judge should see, from a raw completion."""
    text = strip_reasoning(completion)
    blocks = _ANSWER_BLOCK.findall(text)
    if blocks:
        tail = text.rsplit("</predicted_observation>", 1)[1]
        if _OPEN_ANSWER in tail:  # a later block was opened and never closed
            return tail.split(_OPEN_ANSWER, 1)[1].strip()
        return blocks[-1].strip()
    if _OPEN_ANSWER in text:
        return text.rsplit(_OPEN_ANSWER, 1)[1].strip()
    return text.strip()


def completion_text(completion) -> str:
    """TRL completions are strings or lists of chat messages; return the assistant text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, (list, tuple)):
        parts = [m.get("content") or "" for m in completion if isinstance(m, dict) and m.get("role", "assistant")
                 == "assistant"]
        return "".join(str(p) for p in parts)
    return "" if completion is None else str(completion)
