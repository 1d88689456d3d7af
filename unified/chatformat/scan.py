"""Linear-time scans for tagged blocks in untrusted text (model completions, judge answers).

A lazy regex such as ``<think>.*?</think>`` is quadratic on a text of many openers and no
closer: every opener scans to the end of the text before the match fails, so 32,000 repeated
``<think>`` tags take close to a minute and stall the agent loop. The scans here give the
same matches as those regexes in time linear in the text:

- :class:`NextMatch` answers "the first match of a pattern at or after ``pos``" for
  non-decreasing ``pos`` and remembers the answer, so each part of the text is searched once;
- :func:`tag_blocks` is ``re.finditer(OPEN + "(.*?)" + CLOSE, re.DOTALL)`` for literal tags.

Used by the reasoning split, the tool-call parser, the prediction-block finder and the judges'
answer readers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class NextMatch:
    """The first match of ``pattern`` in ``text`` at or after a position, for positions that never
    decrease between calls (each character is searched at most once over all calls, as long as
    the pattern's own matches are bounded)."""

    def __init__(self, pattern: str | re.Pattern[str], text: str, flags: int = 0):
        self.pattern = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern), flags)
        self.text = text
        self._from = -1  # the position of the last real search
        self._match: re.Match[str] | None = None

    def search(self, pos: int) -> re.Match[str] | None:
        """The first match starting at or after ``pos`` (None when there is none)."""
        if self._from >= 0 and self._from <= pos and (self._match is None or self._match.start() >= pos):
            return self._match  # none after an earlier point means none after this one, too
        self._from = pos
        self._match = self.pattern.search(self.text, pos)
        return self._match

    def find(self, pos: int) -> int:
        """``str.find`` form of :meth:`search`: the match's start, or -1."""
        match = self.search(pos)
        return -1 if match is None else match.start()


@dataclass(frozen=True)
class TagBlock:
    """One ``OPEN body CLOSE`` block: offsets into the searched text."""

    start: int
    """Offset of the opening tag."""
    body_start: int
    body_end: int
    end: int
    """Offset just past the closing tag."""


def tag_blocks(text: str, open_tag: str, close_tag: str, flags: int = 0) -> list[TagBlock]:
    """Every ``open_tag ... close_tag`` block of ``text`` (shortest body, left to right, no overlap):
    the matches of ``re.finditer(re.escape(open_tag) + "(.*?)" + re.escape(close_tag), re.DOTALL | flags)``,
    found in linear time. ``flags`` may hold ``re.IGNORECASE``."""
    opens, closes = NextMatch(open_tag, text, flags), NextMatch(close_tag, text, flags)
    blocks: list[TagBlock] = []
    pos = 0
    while (opened := opens.search(pos)) is not None:
        closed = closes.search(opened.end())
        if closed is None:  # no closer after this opener, so none after any later one either
            break
        blocks.append(TagBlock(opened.start(), opened.end(), closed.start(), closed.end()))
        pos = closed.end()
    return blocks


def remove_tag_blocks(text: str, open_tag: str, close_tag: str, flags: int = 0) -> str:
    """``text`` without its :func:`tag_blocks` (``re.sub(OPEN.*?CLOSE, "", text, flags=re.DOTALL)``)."""
    out: list[str] = []
    pos = 0
    for block in tag_blocks(text, open_tag, close_tag, flags):
        out.append(text[pos:block.start])
        pos = block.end
    out.append(text[pos:])
    return "".join(out)


__all__ = ["NextMatch", "TagBlock", "remove_tag_blocks", "tag_blocks"]
