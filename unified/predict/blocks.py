"""The explicit prediction block: find it, strip it, keep where it was.

A predict-then-act agent writes, before each tool call, what it expects the environment to
return::

    <predicted_observation>
    {"temperature": 21, "unit": "celsius"}
    </predicted_observation>
    <tool_call>...

The tag is the one the world-model warmup trains (``unified.lwm``: the model answers inside
``<predicted_observation>`` tags), so a warmed-up checkpoint already knows the format.
``<prediction>`` is accepted as a shorter synonym. A block that is opened but never closed
(a small model often forgets the closing tag) runs until the next ``<tool_call>``,
``</think>``, blank line or the end of the text.

This module only handles text; it has no dependency on the agent loop or on ``unified.trace``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from unified.chatformat.scan import NextMatch

PREDICTION_TAG = "predicted_observation"
"""The tag a prompting module asks for."""

PREDICTION_TAGS = (PREDICTION_TAG, "prediction")
"""Every tag recognised as an explicit prediction block."""

_TAGS = "|".join(PREDICTION_TAGS)
_OPEN = re.compile(rf"<(?P<tag>{_TAGS})(?P<attrs>(?:\s+[a-zA-Z_]+\s*=\s*\"[^\"]*\")*)\s*>", re.IGNORECASE)
_ATTR = re.compile(r"([a-zA-Z_]+)\s*=\s*\"([^\"]*)\"")
_UNCLOSED_END = re.compile(r"<tool_call>|</think>|<\|im_end\|>|\n[ \t]*\n", re.IGNORECASE)
_SPACES = re.compile(r"\s*")


@dataclass(frozen=True)
class PredictionBlock:
    """One explicit block found in a text; ``start``/``end`` delimit the whole block (tags included)."""

    text: str
    """The prediction, stripped of surrounding whitespace."""
    start: int
    """Offset of the opening ``<`` in the searched text."""
    end: int
    """Offset just past the closing tag (or past the block's last character when unclosed)."""
    tag: str
    """The tag used (``predicted_observation`` or ``prediction``)."""
    closed: bool
    """False when the closing tag was missing."""
    call: str | None = None
    """The ``call="NAME"`` attribute, when the model named the tool it predicts for."""


def find_blocks(text: str) -> list[PredictionBlock]:
    """Every explicit prediction block of ``text``, in order of position (linear time: each search
    below moves forward only, so many openers without closers cost one pass, not one pass each)."""
    blocks: list[PredictionBlock] = []
    opens, unclosed_ends = NextMatch(_OPEN, text), NextMatch(_UNCLOSED_END, text)
    closes = {tag: NextMatch(re.compile(rf"</{tag}\s*>", re.IGNORECASE), text) for tag in PREDICTION_TAGS}
    pos = 0
    while True:
        m = opens.search(pos)
        if m is None:
            return blocks
        tag = m.group("tag").lower()
        attrs = dict(_ATTR.findall(m.group("attrs") or ""))
        close = closes[tag].search(m.end())
        # A block closed only after another block opens is treated as unclosed.
        next_open = opens.search(m.end())
        if close is not None and (next_open is None or close.start() < next_open.start()):
            body, end, closed = text[m.end():close.start()], close.end(), True
        else:
            body_from = _SPACES.match(text, m.end()).end()
            stop = unclosed_ends.search(body_from)
            limit = min(stop.start() if stop else len(text), next_open.start() if next_open else len(text))
            body, end, closed = text[m.end():limit], limit, False
        blocks.append(PredictionBlock(text=body.strip(), start=m.start(), end=end, tag=tag,
                                      closed=closed, call=attrs.get("call") or attrs.get("name")))
        pos = max(end, m.end())


def strip_blocks(text: str) -> str:
    """``text`` without its prediction blocks (what tool parsing and scoring must see).

    Whitespace left around a removed block is collapsed to at most one blank line so the
    visible answer reads as if the block had never been written.
    """
    blocks = find_blocks(text)
    if not blocks:
        return text
    out, pos = [], 0
    for block in blocks:
        out.append(text[pos:block.start])
        pos = block.end
    out.append(text[pos:])
    joined = "".join(out)
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", joined)
