"""Rule verifiers: what a program can check about a predicted observation.

Two checks, both binary, scaled to {0, 25} (the range of the rubric reward) by the reward
functions:

- **Normalised exact match** (``exact_match``): prediction and reference agree after
  :func:`unified.text.normalise_runtime` (runtime metadata — ISO/RFC/``ls``-style timestamps
  and dates, clock times, durations, UUIDs, long hex ids, temp paths, ``pid`` numbers, memory
  addresses, epoch seconds — replaced by placeholders, blanks collapsed; the rules are listed
  there, shared with the trace analysis). Deterministic content (command output, computed
  values, file contents) must still match character for character.
- **JSON agreement** (``json_agreement``), for tool responses whose reference is JSON (a
  document, or one JSON value per line): the prediction must be well-formed JSON of the same
  shape — the same key set in every object, recursively, the same types, and the same list
  lengths — values themselves are not compared (the rubric judge weighs them).

``verify(prediction, reference, domain)`` picks JSON agreement when the reference is JSON and
exact match otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from unified.text import normalise_runtime

@dataclass
class Verdict:
    """A rule verifier's binary answer."""

    passed: bool
    check: str
    """``exact_match`` or ``json_agreement``."""
    message: str = ""


def exact_match(prediction: str, reference: str) -> Verdict:
    """Normalised exact match."""
    ok = normalise_runtime(prediction) == normalise_runtime(reference)
    return Verdict(ok, "exact_match", "match after normalisation" if ok else "differs after normalisation")


def parse_json_values(text: str) -> list[Any] | None:
    """The JSON values of ``text``: one document, or one value per non-empty line; None if not JSON."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return [json.loads(text)]
    except (json.JSONDecodeError, RecursionError):
        pass
    values = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError):
            return None
    return values or None


def _is_structured(values: list[Any] | None) -> bool:
    return values is not None and any(isinstance(v, (dict, list)) for v in values)


def _shape_diff(pred: Any, ref: Any, path: str = "$", depth: int = 0) -> str | None:
    """First difference in shape between two JSON values (keys, types, list lengths), or None."""
    if depth > 64:
        return None
    if isinstance(ref, dict):
        if not isinstance(pred, dict):
            return f"{path}: expected an object, got {type(pred).__name__}"
        if set(pred) != set(ref):
            missing, extra = sorted(set(ref) - set(pred)), sorted(set(pred) - set(ref))
            return f"{path}: keys differ (missing {missing[:5]}, unexpected {extra[:5]})"
        for key in ref:
            diff = _shape_diff(pred[key], ref[key], f"{path}.{key}", depth + 1)
            if diff:
                return diff
        return None
    if isinstance(ref, list):
        if not isinstance(pred, list):
            return f"{path}: expected a list, got {type(pred).__name__}"
        if len(pred) != len(ref):
            return f"{path}: expected {len(ref)} items, got {len(pred)}"
        for i, (p, r) in enumerate(zip(pred, ref)):
            diff = _shape_diff(p, r, f"{path}[{i}]", depth + 1)
            if diff:
                return diff
        return None
    if isinstance(ref, bool) or isinstance(pred, bool):
        return None if type(ref) is type(pred) else f"{path}: expected {type(ref).__name__}"
    if isinstance(ref, (int, float)) and isinstance(pred, (int, float)):
        return None
    if ref is None or pred is None:
        return None if ref is pred else f"{path}: expected {'null' if ref is None else type(ref).__name__}"
    return None if type(ref) is type(pred) else f"{path}: expected {type(ref).__name__}, got {type(pred).__name__}"


def json_agreement(prediction: str, reference: str) -> Verdict:
    """Well-formed JSON with the reference's shape (keys, types, list lengths)."""
    ref = parse_json_values(reference)
    if ref is None:
        return Verdict(False, "json_agreement", "reference is not JSON")
    pred = parse_json_values(prediction)
    if pred is None:
        return Verdict(False, "json_agreement", "prediction is not well-formed JSON")
    if len(pred) != len(ref):
        return Verdict(False, "json_agreement", f"expected {len(ref)} JSON values, got {len(pred)}")
    for i, (p, r) in enumerate(zip(pred, ref)):
        diff = _shape_diff(p, r, f"$[{i}]" if len(ref) > 1 else "$")
        if diff:
            return Verdict(False, "json_agreement", diff)
    return Verdict(True, "json_agreement", "same JSON shape")


def verify(prediction: str, reference: str, domain: str = "") -> Verdict:
    """JSON agreement when the reference is structured JSON, else normalised exact match."""
    try:
        if _is_structured(parse_json_values(reference)):
            return json_agreement(prediction, reference)
        return exact_match(prediction, reference)
    except Exception as exc:  # a verifier never raises into the trainer
        return Verdict(False, "error", f"{type(exc).__name__}: {exc}")
