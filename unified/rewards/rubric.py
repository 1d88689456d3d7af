"""The rubric judge: an LLM scores a predicted observation against the real one.

Qwen-AgentWorld's world-model reward. Five criteria, each an integer-or-decimal score
s_c in [1, 5]:

- format      — the observation has the form this environment produces;
- factuality  — deterministic content (computed values, command output, returned fields)
                agrees with the reference;
- consistency — it agrees with the earlier turns (state created or changed before);
- realism     — content the reference cannot pin down (pre-existing files, ids, timestamps)
                is plausible for this environment;
- quality     — complete, not truncated, no commentary or hallucinated extras.

    reward = 5 * mean_c(s_c)  in [5, 25]        (0 when the judge's answer cannot be parsed)
    eval score = (mean_c(s_c) - 1) / 4 * 100     in [0, 100]

Only the parsed answer (:func:`unified.chatformat.parse_observation`: no ``<think>``, the last
``<predicted_observation>`` block) reaches the judge, so nothing the policy writes outside
its answer can move the score; inside it, fence markers and ``<scores>`` tags are escaped, and
fenced data a judge echoes is dropped before its answer is read. The judge answers in a
``<scores>`` block (parsed by :func:`parse_judge_answer`, which never raises); an answer without one
scores nothing (dropped and counted by the reward, never read from the rest of the answer).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from unified.chatformat.scan import tag_blocks
from unified.chatformat.reasoning import strip_reasoning
from unified.text import DATA_RULE, fence_data, strip_fenced_data

CRITERIA = ("format", "factuality", "consistency", "realism", "quality")

_DOMAIN_GUIDE = {
    "mcp": ("Tool responses. Must match: the JSON structure and keys, status/error fields, values the tools "
            "compute from the arguments or from earlier calls (balances, lists of items created earlier, "
            "file contents written earlier). May differ if plausible: ids, timestamps, pre-existing data "
            "the history never showed."),
    "search": ("Search results or page text. Must match: the kind of result (result list vs page text), that "
               "results are about the query. May differ if plausible: exact titles, URLs, snippets and ranking."),
    "terminal": ("Shell output ending in '[exit code: N]'. Must match: the exit code, output the command "
                 "computes deterministically (echo, arithmetic, file contents created earlier, counts, error "
                 "messages). May differ if plausible: timestamps, sizes and inode numbers, PIDs, temp names."),
    "swe": ("Output of commands in a code repository ending in '[exit code: N]'. Must match: the exit code, test "
            "pass/fail outcomes, file contents and diffs implied by earlier edits, tracebacks' error types. "
            "May differ if plausible: timings, hashes, line numbers of files never shown."),
    "web": ("Browser page states. Must match: which page the action leads to and the elements the action "
            "changes. May differ if plausible: the rest of the page, element ids, advertising, layout detail."),
    "os": ("Desktop screen descriptions. Must match: the window or dialog the action opens, the text it shows, "
           "the effect of the action. May differ if plausible: unrelated windows, exact positions."),
    "android": ("Phone screen hierarchies. Must match: the screen the action leads to and the changed elements. "
                "May differ if plausible: status bar, bounds, unrelated elements."),
}

ANSWER_TAGS = ("scores",)
"""The judge's answer tags: neutralised in every fenced text (:func:`unified.text.neutralise_markers`)."""
ANSWER_FORMAT = ("Answer with exactly this block, each N a score from 1 to 5, and nothing after it:\n"
                 "<scores>\nformat: N\nfactuality: N\nconsistency: N\nrealism: N\nquality: N\n</scores>")

JUDGE_SYSTEM = (
    "You grade a world model. It was shown an agent's earlier actions and the environment's observations, "
    "then one new action, and it predicted the environment's next observation. You also get the real "
    "observation as the reference. Score the prediction on five criteria, each from 1 (bad) to 5 (perfect):\n"
    "- format: has the form this environment's observations have;\n"
    "- factuality: content that is determined by the action and the history agrees with the reference;\n"
    "- consistency: agrees with everything in the earlier turns;\n"
    "- realism: content the reference cannot determine is plausible for this environment;\n"
    "- quality: complete and clean, with no commentary, truncation or invented extras.\n"
    f"Do not reward length or confidence. {DATA_RULE}\n{ANSWER_FORMAT}"
)


def judge_messages(domain: str, history: list[tuple[str, str]], action: str, reference: str, prediction: str,
                   *, max_chars: int = 3000, max_history: int = 4) -> list[dict[str, str]]:
    """The chat messages sent to the judge (our own prompt; one guide per domain).

    Long texts are cut to ``max_chars`` (head and tail kept) and only the last ``max_history``
    earlier turns are shown. Every action, observation and the prediction is fenced as data
    (:func:`unified.text.fence_data`), with fence markers and ``<scores>`` tags in it escaped, and
    the answer format comes last, after all of them: a prediction can neither close its fence nor
    carry a ``<scores>`` block into the prompt, and the only real block is the template's.
    """
    guide = _DOMAIN_GUIDE.get(domain, "Judge what the action determines strictly and the rest for plausibility.")

    def fence(text: str, label: str) -> str:
        return fence_data(_cut(text, max_chars), label, answer_tags=ANSWER_TAGS)

    parts = [f"Domain: {domain or 'unknown'}. {guide}"]
    shown = history[-max_history:] if max_history > 0 else []
    if len(history) > len(shown):
        parts.append(f"({len(history) - len(shown)} earlier turns omitted)")
    for i, (a, o) in enumerate(shown, len(history) - len(shown) + 1):
        parts.append(f"### Turn {i} action\n{fence(a, f'turn-{i}-action')}\n"
                     f"### Turn {i} observation\n{fence(o, f'turn-{i}-observation')}")
    parts.append(f"### New action\n{fence(action, 'new-action')}")
    parts.append(f"### Reference observation (real)\n{fence(reference, 'reference')}")
    parts.append(f"### Predicted observation (to grade)\n{fence(prediction, 'prediction')}")
    parts.append(f"{DATA_RULE}\n{ANSWER_FORMAT}")
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def _cut(text: str, limit: int) -> str:
    text = text or ""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


@dataclass
class JudgeScores:
    """A parsed judge answer."""

    scores: dict[str, float]
    """criterion -> score in [1, 5]."""

    @property
    def mean(self) -> float:
        return sum(self.scores[c] for c in CRITERIA) / len(CRITERIA)

    @property
    def reward(self) -> float:
        """5 * mean, in [5, 25]."""
        return 5.0 * self.mean

    @property
    def normalised(self) -> float:
        """(mean - 1) / 4 * 100, in [0, 100]."""
        return (self.mean - 1.0) / 4.0 * 100.0


_NUMBER = r"(-?\d+(?:\.\d+)?)(?!\w|\.\d)"  # a whole number: "1e999" or "5e-1" is not read as 1 or 5


def parse_judge_answer(text: object) -> tuple[JudgeScores | None, str]:
    """(scores, "") or (None, why). Never raises, whatever ``text`` is.

    Reads the answer without its reasoning and without any fenced data it echoed
    (:func:`unified.text.strip_fenced_data`: a judge that copies the prediction into its answer
    copies no score), then its last ``<scores>`` block; within that block only, each criterion's last
    ``name: N`` (``=``, ``**``, ``N/5`` tolerated) or a JSON object. An answer without a ``<scores>``
    block is unparseable (None): reading ``name: N`` lines anywhere else would read scores the judge
    only quoted, e.g. a prediction echoed without its fence lines (issue 42, R7). Every criterion must
    be present with 1 <= N <= 5.
    """
    try:
        if not isinstance(text, str):
            return None, f"judge answer is {type(text).__name__}, not text"
        body = strip_fenced_data(strip_reasoning(text))  # an unclosed <think> means the judge never answered
        blocks = tag_blocks(body, "<scores>", "</scores>", re.IGNORECASE)  # linear, unlike a lazy regex
        if not blocks:
            return None, "no <scores> block in the judge's answer (scores outside one are never read)"
        body = body[blocks[-1].body_start:blocks[-1].body_end]
        found: dict[str, float] = {}
        obj = _json_object(body)
        if obj is not None:
            for c in CRITERIA:
                value = obj.get(c)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    found[c] = float(value)
        for c in CRITERIA:
            if c in found:
                continue
            hits = re.findall(rf"(?<![A-Za-z]){c}\**\s*[:=]\s*\**\s*{_NUMBER}(?:\s*/\s*5)?", body, re.IGNORECASE)
            if hits:
                found[c] = float(hits[-1])
        missing = [c for c in CRITERIA if c not in found]
        if missing:
            return None, f"no score for {', '.join(missing)}"
        bad = [f"{c}={found[c]:g}" for c in CRITERIA if not (1.0 <= found[c] <= 5.0) or math.isnan(found[c])]
        if bad:
            return None, f"scores outside 1..5: {', '.join(bad)}"
        return JudgeScores({c: found[c] for c in CRITERIA}), ""
    except Exception as exc:  # pragma: no cover - defensive: parsing must never raise
        return None, f"parser error {type(exc).__name__}: {exc}"


def _json_object(text: str) -> dict | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start:end + 1])
    except (json.JSONDecodeError, RecursionError):
        return None
    return {str(k).lower(): v for k, v in value.items()} if isinstance(value, dict) else None
