"""The predicted observation in a world model's completion, and the assistant text of a TRL completion.

**Observation parsing**: what part of a world model's completion the judge and verifiers see
(:func:`parse_observation`):

1. Drop reasoning with :func:`unified.chatformat.reasoning.strip_reasoning`: everything before
   the first ``</think>`` (templates put the opening tag in the prompt), every later
   ``<think>...</think>`` block, and everything after an unclosed ``<think>`` (the model never
   finished thinking: nothing to judge).
2. If a ``<predicted_observation>...</predicted_observation>`` block remains, keep the content
   of the *last* one; an opened but unclosed last block keeps what follows the tag.
3. Otherwise keep the cleaned text. Surrounding whitespace is stripped.

So self-praise in the reasoning, or anything outside the answer tags, never reaches a judge.

:func:`completion_text`: TRL hands reward functions completions as strings or as lists of chat
messages; the assistant text is the string itself or the assistant messages' contents joined.
"""

from __future__ import annotations

from unified.chatformat.reasoning import strip_reasoning
from unified.chatformat.scan import tag_blocks

_OPEN_ANSWER, _CLOSE_ANSWER = "<predicted_observation>", "</predicted_observation>"


def parse_observation(completion: str) -> str:
    """The predicted observation a judge should see, from a raw completion."""
    text = strip_reasoning(completion)
    blocks = tag_blocks(text, _OPEN_ANSWER, _CLOSE_ANSWER)  # linear: a lazy regex is quadratic here
    if blocks:
        tail = text.rsplit(_CLOSE_ANSWER, 1)[1]
        if _OPEN_ANSWER in tail:  # a later block was opened and never closed
            return tail.split(_OPEN_ANSWER, 1)[1].strip()
        return text[blocks[-1].body_start:blocks[-1].body_end].strip()
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


__all__ = ["completion_text", "parse_observation"]
