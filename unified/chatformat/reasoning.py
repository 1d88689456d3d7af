"""The one reasoning split/join for ``<think>`` text.

The rule (Qwen3.5-style templates open ``<think>`` in the generation prompt, so a completion
usually starts inside the reasoning):

- **split**: the reasoning is everything before the *first* ``</think>``, one leading
  ``<think>`` removed; the answer is everything after it. Both are stripped of surrounding
  whitespace. Without ``</think>``, a text that starts with ``<think>`` never closed its
  reasoning: it is all reasoning and the answer is empty, except that tool calls made after
  the unclosed tag (``<tool_call>`` ...) stay in the answer so that they are not lost; any
  other text is all answer, with no reasoning (``None``).
- **join**: ``join_reasoning(r, a)`` is ``"r\\n</think>\\n\\na"`` (the raw-completion shape every
  backend hands the agent loop; ``split_reasoning`` gives ``(r, a)`` back); no or empty
  reasoning gives ``a`` unchanged.
- **answer for a reader** (a judge, a world-model prediction under evaluation):
  :func:`strip_reasoning` is the split's answer with any further ``<think>...</think>`` blocks
  removed and an unclosed later ``<think>`` cutting the rest, so reasoning never reaches a
  judge or a verifier, wherever the model put it.

Used by the agent's completion parser, the OpenAI-compatible backend and client (servers that
split reasoning out as ``reasoning_content``), the local server (which splits it out the same
way), the lwm world model and parser, and the judges.
"""

from __future__ import annotations

from unified.chatformat.scan import remove_tag_blocks

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_TOOL_CALL = "<tool_call>"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``[<think>]R</think>A`` -> ``(R, A)``; see the module docstring for the rule."""
    text = text or ""
    if THINK_CLOSE in text:
        reasoning, answer = text.split(THINK_CLOSE, 1)
        return reasoning.replace(THINK_OPEN, "", 1).strip(), answer.strip()
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        body = stripped[len(THINK_OPEN):]
        if _TOOL_CALL in body:  # thinking never closed but calls were made: keep the calls visible
            reasoning, rest = body.split(_TOOL_CALL, 1)
            return reasoning.strip(), _TOOL_CALL + rest
        return body.strip(), ""
    return None, text.strip()


def join_reasoning(reasoning: str | None, answer: str) -> str:
    """The raw-completion text of ``reasoning`` and ``answer`` (inverse of :func:`split_reasoning`)."""
    answer = answer or ""
    if not reasoning:
        return answer
    return f"{reasoning}\n{THINK_CLOSE}\n\n{answer}"


def strip_reasoning(text: str) -> str:
    """The answer of ``text`` with every piece of reasoning removed (module docstring, third rule)."""
    _, answer = split_reasoning(text or "")
    answer = remove_tag_blocks(answer, THINK_OPEN, THINK_CLOSE)  # linear: a lazy regex is quadratic here
    if THINK_CLOSE in answer:  # a stray close: what came before it was reasoning
        answer = answer.rsplit(THINK_CLOSE, 1)[1]
    if THINK_OPEN in answer:  # opened and never closed: the model never finished thinking
        answer = answer.split(THINK_OPEN, 1)[0]
    return answer.strip()
