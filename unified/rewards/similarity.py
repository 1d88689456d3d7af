"""Graded rule rewards: how much of the real observation a prediction got right, in [0, 1].

The binary verifiers of :mod:`unified.rewards.verifiers` answer pass/fail. On a small policy
nearly every completion fails, so all G completions of a GSPO group get the same reward, the
group-normalised advantage ``A_i = (r_i - mean(r)) / std(r)`` is zero, and no gradient flows.
A graded score separates "close" from "far" predictions and gives the group variance.

Both metrics compare token sequences after the verifiers' runtime normalisation
(:func:`unified.text.normalise_runtime`: timestamps, UUIDs, temp paths, pids... are
replaced by placeholders, whitespace collapsed), so runtime noise is neither rewarded nor
punished. :func:`tokens` splits the normalised text into words (``\\w+``, placeholders such as
``<uuid>`` kept whole) and single punctuation characters, so the format of an observation
(JSON braces, quotes, ``[exit code: 0]``) counts as well as its content.

With ``p`` the prediction's tokens (length ``n``) and ``g`` the reference's (length ``m``):

- **LCS F1** (:func:`lcs_f1`, ROUGE-L's F-measure; Lin 2004, "ROUGE: A Package for Automatic
  Evaluation of Summaries"): ``L = LCS(p, g)`` (longest common subsequence, order-aware),
  ``P = L / n``, ``R = L / m``, ``F = 2 P R / (P + R) = 2 L / (n + m)``.
- **Token F1** (:func:`token_f1`, SQuAD-style bag-of-tokens F1): ``C = sum_t min(#_p(t), #_g(t))``
  (multiset overlap, order-free), ``F = 2 C / (n + m)``.

Both are 1 when the normalised token sequences are equal (so a normalised exact match scores 1),
0 when they share no token, and 1 when both are empty (an empty observation predicted as
empty); one empty side scores 0. ``LCS <= C``, so ``lcs_f1 <= token_f1``.

The LCS length is computed with the bit-parallel algorithm of Crochemore, Iliopoulos, Pinzon
and Reid (2001), "A fast and practical bit-vector algorithm for the longest common subsequence
problem": one big-integer row ``V`` of ``m`` bits, for each prediction token ``b`` with match
mask ``M_b``: ``U = V & M_b``, ``V = (V + U) | (V - U)``; then ``L = m - popcount(V)``. That is
O(n * m / w) word operations instead of the O(n * m) table, so long tool outputs stay cheap.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

from unified.registry import Registry
from unified.text import normalise_runtime

_TOKEN = re.compile(r"<[a-z]+>|\w+|[^\w\s]")

SIMILARITY_METRICS: Registry[Callable[[str, str], float]] = Registry("similarity metric")
"""Graded prediction-vs-reference scores in [0, 1], by name (``rewards.similarity_metric``)."""


def tokens(text: str) -> list[str]:
    """Tokens of ``text`` after runtime normalisation: words, placeholders, single punctuation marks."""
    return _TOKEN.findall(normalise_runtime(text))


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token sequences (bit-parallel, see module doc)."""
    if len(a) < len(b):  # the row holds the longer sequence; the loop runs over the shorter
        a, b = b, a
    m = len(a)
    if m == 0 or not b:
        return 0
    masks: dict[str, int] = {}
    for i, tok in enumerate(a):
        masks[tok] = masks.get(tok, 0) | (1 << i)
    full = (1 << m) - 1
    row = full
    for tok in b:
        match = masks.get(tok)
        if match is None:
            continue
        u = row & match
        row = ((row + u) | (row - u)) & full
    return m - row.bit_count()


def _f_measure(common: int, n: int, m: int) -> float:
    if n == 0 and m == 0:
        return 1.0
    return 2.0 * common / (n + m)


@SIMILARITY_METRICS.register("lcs_f1")
def lcs_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1 of the normalised token sequences: ``2 LCS / (n + m)`` (order-aware)."""
    p, g = tokens(prediction), tokens(reference)
    return _f_measure(lcs_length(p, g), len(p), len(g))


@SIMILARITY_METRICS.register("token_f1")
def token_f1(prediction: str, reference: str) -> float:
    """Bag-of-tokens F1 of the normalised token sequences: ``2 C / (n + m)``, C the multiset overlap."""
    p, g = tokens(prediction), tokens(reference)
    common = sum((Counter(p) & Counter(g)).values())
    return _f_measure(common, len(p), len(g))


__all__ = ["SIMILARITY_METRICS", "lcs_f1", "lcs_length", "token_f1", "tokens"]
