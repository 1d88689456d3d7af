"""Rule-based scoring of a prediction against the observation that followed.

Deterministic content must match; runtime metadata need not. Both texts are first
normalised by :func:`unified.text.normalise_runtime` (``fold=True``; the same rules as the
rewards' verifiers): timestamps, dates, durations, PIDs, UUIDs, hex ids/hashes, addresses and
temporary paths become placeholders, case and whitespace are folded. Then, in order, the first check that applies
decides (``method`` records which):

1. ``rule:json``  - the claim and the observation both parse as JSON: the score is the share
   of the claim's leaves (path, value) found with an equal value in the observation, after
   metadata normalisation; a claimed key that is absent counts as a miss.
2. ``rule:facts`` - the claim holds checkable facts (quoted strings, numbers, file names and
   paths, ``key: value`` / ``key=value`` values, identifiers with ``_`` or ``.``): the score is
   the share of facts found in the observation (numbers compare as numbers).
3. ``rule:words`` - otherwise, content words of the claim (stop words and the vocabulary of
   expectation such as "return", "should", "output" removed): the share found in the observation.
4. ``rule:status`` - a claim with no facts and no content words can still say "it will fail"
   or "it will succeed"; that status is compared with the observation's.

Whatever the method, a claimed status (error vs success, "empty") that contradicts the
observation makes the prediction wrong. ``correct = score >= threshold`` (default 0.5); a
claim with nothing to check is ``unverifiable`` (``correct is None``).

Score, for a claim with facts F and observation o::

    score = |{f in F : f found in norm(o)}| / |F|        in [0, 1]
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from unified.text import normalise_runtime
from unified.predict.extract import Prediction

_STOP = set("""a an the and or but if then else of to in on at by for with from as is are was were be been being
it its this that these those there here i we you he she they them our your my me us what which who whom whose
when where why how all any some no not only so than too very can could will would should may might must shall
do does did done have has had having just also into over under about after before again further once up down out
off more most other such own same each few both let lets let's i'll we'll it'll it's that's
without within never ever any
""".split())
_EXPECTATION_WORDS = set("""return returns returned returning output outputs print prints show shows showing give gives
list lists yield yields contain contains containing produce produces respond responds reply replies display displays
report reports result results response responses observation expect expected expecting expectation predict
prediction probably likely call calls called tool function command query request see get gets got should
will would might going something value values include includes including information info data answer
""".split())
_ERROR_CLAIM = re.compile(r"\b(?:error|errors|fail|fails|failed|failure|exception|traceback|not found|"
                          r"no such|invalid|denied|forbidden|unauthori[sz]ed|refuse[sd]?|crash|raise)\b", re.I)
_ERROR_NEGATED = re.compile(r"\b(?:no|without|not|never|won't|shouldn't|doesn't|don't)\s+(?:\w+\s+)?"
                            r"(?:error|errors|fail|failure|exception)", re.I)
_SUCCESS_CLAIM = re.compile(r"\b(?:succeed|succeeds|success|successful|successfully|ok|works?)\b", re.I)
_EMPTY_CLAIM = re.compile(r"\b(?:be empty|empty (?:list|result|output|response)|nothing|no (?:results|output|"
                          r"matches|files|entries))\b", re.I)
_ERROR_OBS = re.compile(r"\b(?:error|exception|traceback|not found|no such|invalid|denied|failed|failure|"
                        r"forbidden|unauthori[sz]ed)\b", re.I)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)?(?![\w])")
_QUOTED = re.compile(r"\"([^\"\n]{1,200})\"|'([^'\n]{1,200})'|`([^`\n]{1,200})`")
_PATHLIKE = re.compile(r"(?<![\w/])(?:[\w.-]*/[\w./-]+|[\w-]+\.[a-z][a-z0-9]{0,4})(?![\w/])", re.I)
_IDENT = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b", re.I)
_KEYVAL = re.compile(r"\b[\w-]+\s*[:=]\s*([\w.@/+-]+)")
_WORD = re.compile(r"[a-z][a-z0-9_'-]{2,}", re.I)


@dataclass
class RuleVerdict:
    """Outcome of the rule-based match."""

    correct: bool | None
    """True/False, or None when the claim had nothing checkable."""
    score: float | None
    """Share of checked items found, in [0, 1] (None when unverifiable)."""
    method: str
    """``rule:json``, ``rule:facts``, ``rule:words``, ``rule:status`` or ``unverifiable``."""
    found: list[str] = field(default_factory=list)
    """Checked items present in the observation."""
    missing: list[str] = field(default_factory=list)
    """Checked items absent from it."""
    note: str = ""
    """A status contradiction, if any."""

    @property
    def detail(self) -> str:
        parts = [f"found={self.found}", f"missing={self.missing}"]
        if self.note:
            parts.append(self.note)
        return "; ".join(parts)


def normalise(text: str) -> str:
    """:func:`unified.text.normalise_runtime` with ``fold=True`` (placeholders, lower case, one space)."""
    return normalise_runtime(text, fold=True)


def _numbers(text: str) -> set[float]:
    out = set()
    for m in _NUMBER.finditer(text):
        try:
            out.add(float(m.group(0).replace(",", "")))
        except ValueError:
            pass
    return out


def _json(text: str) -> Any:
    text = text.strip()
    if not text or text[0] not in "[{":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _leaves(value: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, f"{path}.{k}")] or [(path, {})]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{path}[{i}]")] or [(path, [])]
    return [(path, value)]


def _leaf_value(value: Any, path: str) -> tuple[bool, Any]:
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        key, index = part
        if key:
            if not isinstance(value, dict) or key not in value:
                return False, None
            value = value[key]
        else:
            if not isinstance(value, list) or int(index) >= len(value):
                return False, None
            value = value[int(index)]
    return True, value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return normalise(json.dumps(a, sort_keys=True)) == normalise(json.dumps(b, sort_keys=True))


def facts(claim: str, ignore: tuple[str, ...] = ()) -> list[str]:
    """The checkable facts of a claim (deduplicated, in order of appearance); ``ignore``: names to skip."""
    items: list[str] = []
    for m in _QUOTED.finditer(claim):
        items.append(next(g for g in m.groups() if g is not None))
    rest = _QUOTED.sub(" ", claim)
    for m in _KEYVAL.finditer(rest):
        items.append(m.group(1).rstrip(".,"))
    items += [m.group(0).rstrip(".,") for m in _PATHLIKE.finditer(rest)]
    items += [m.group(0) for m in _IDENT.finditer(rest)]
    items += [m.group(0) for m in _NUMBER.finditer(rest)]
    seen, out = {normalise(name) for name in ignore if name}, []
    for item in items:
        norm = normalise(item)
        if norm and norm not in seen and not norm.startswith("<"):
            seen.add(norm)
            out.append(item)
    return out


def _fact_found(fact: str, obs_norm: str, obs_numbers: set[float]) -> bool:
    norm = normalise(fact)
    if _NUMBER.fullmatch(fact.strip()):
        try:
            return float(fact.replace(",", "")) in obs_numbers
        except ValueError:
            return norm in obs_norm
    return norm in obs_norm


def _status(claim: str) -> str | None:
    if _ERROR_NEGATED.search(claim):
        return "success"
    if _ERROR_CLAIM.search(claim):
        return "error"
    if _EMPTY_CLAIM.search(claim):
        return "empty"
    if _SUCCESS_CLAIM.search(claim):
        return "success"
    return None


def _observed_status(observation: str, is_error: bool | None) -> str:
    if is_error or _ERROR_OBS.search(observation[:400]):
        return "error"
    if observation.strip() in ("", "[]", "{}", "null", "None", '""'):
        return "empty"
    return "success"


def rule_match(claim: str, observation: str, *, is_error: bool | None = None, threshold: float = 0.5,
               ignore: tuple[str, ...] = ()) -> RuleVerdict:
    """Score ``claim`` against ``observation`` by rule (see the module docstring).

    ``ignore``: names never counted as facts (the called tool's own name).
    """
    obs_norm = normalise(observation)
    claimed, observed = _status(claim), _observed_status(observation, is_error)
    contradiction = claimed is not None and claimed != observed and not (claimed == "success" and observed == "empty")
    note = f"claimed {claimed}, observed {observed}" if contradiction else ""

    claim_json, obs_json = _json(claim), _json(observation)
    if claim_json is not None and obs_json is not None:
        found, missing = [], []
        for path, value in _leaves(claim_json):
            ok, actual = _leaf_value(obs_json, path)
            (found if ok and _same(value, actual) else missing).append(f"{path or '$'}={json.dumps(value)}")
        score = len(found) / max(len(found) + len(missing), 1)
        return RuleVerdict(score >= threshold and not contradiction, score, "rule:json", found, missing, note)

    items, method = facts(claim, ignore), "rule:facts"
    if not items:
        items = [w for w in dict.fromkeys(w.lower() for w in _WORD.findall(claim))
                 if w not in _STOP and w not in _EXPECTATION_WORDS and not _ERROR_CLAIM.fullmatch(w)
                 and not _SUCCESS_CLAIM.fullmatch(w) and w not in {n.lower() for n in ignore if n}]
        method = "rule:words"
    if items:
        numbers = _numbers(obs_norm)
        found = [f for f in items if _fact_found(f, obs_norm, numbers)]
        missing = [f for f in items if f not in found]
        score = len(found) / len(items)
        return RuleVerdict(score >= threshold and not contradiction, score, method, found, missing, note)
    if claimed is not None:
        return RuleVerdict(not contradiction, 0.0 if contradiction else 1.0, "rule:status",
                           [] if contradiction else [claimed], [claimed] if contradiction else [], note)
    return RuleVerdict(None, None, "unverifiable")


def score_prediction(pred: Prediction, *, threshold: float = 0.5) -> Prediction:
    """Fill ``pred``'s verdict by rule (in place; also returned).

    Unaligned (``call_index is None``) stays unscored as ``unaligned``; aligned without an
    observation to compare (missing, or not executed) as ``unverifiable``; ``detail`` then
    repeats ``pred.reason``.
    """
    if pred.call_index is None or pred.observation is None:
        method = "unaligned" if pred.call_index is None else "unverifiable"
        pred.correct, pred.score, pred.method, pred.detail = None, None, method, pred.reason
        return pred
    verdict = rule_match(pred.claim, pred.observation, is_error=pred.observation_is_error, threshold=threshold,
                         ignore=(pred.call_name or "",))
    pred.correct, pred.score, pred.method, pred.detail = verdict.correct, verdict.score, verdict.method, verdict.detail
    return pred
