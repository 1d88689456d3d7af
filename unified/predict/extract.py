"""Find next-state predictions in a saved Episode, and the observation each one met.

Two kinds of prediction are extracted from every :class:`unified.types.Step`:

* **explicit**: a non-empty ``<predicted_observation>`` (or ``<prediction>``) block in the
  raw completion, as a predict-then-act prompting module asks for (``unified.predict.blocks``);
  ``start``/``end`` are offsets in ``Step.completion``.
* **implicit**: a sentence of the reasoning that states what a call will return, e.g.
  "This should return the list of files" or "I expect an error since the file is missing";
  ``start``/``end`` are offsets in ``Step.reasoning`` (or in ``Step.content`` when the step
  has no reasoning). A sentence is a prediction when it holds an expectation cue about the
  environment's answer (see ``_CUES``) whose subject is not the agent itself ("I will return
  the answer" is an action, not a prediction).

Alignment: each prediction is paired with one tool call of the same step and with that
call's observation. An explicit block goes to the call it names (``call="NAME"``), else to
the first call written after it, else to the last call before it. An implicit prediction goes
to the call whose name it mentions, else, in order, to the first, second, ... call of the step.
A prediction in a step without calls stays unaligned (``call_index is None``), and so does a
block beyond the step's calls when every call already has one; ``reason`` says which. A
prediction aligned with a call whose answer is missing, or that the environment did not
execute (``Observation.metadata["executed"] is False``, e.g. BFCL's single-turn categories),
keeps ``observation=None`` and a ``reason``: there is nothing to compare it with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from unified.predict.blocks import find_blocks
from unified.types import Episode, Observation, Record, Step, ToolCall


@dataclass
class Prediction(Record):
    """One next-state prediction, where it was, what it was compared with and how it scored."""

    episode: str
    """``benchmark/task_id#trial`` of the episode."""
    step: int
    """``Step.index`` of the turn the prediction was made in."""
    kind: str
    """``explicit`` (a tagged block) or ``implicit`` (a statement in the reasoning)."""
    source: str
    """Which text ``start``/``end`` index: ``completion``, ``reasoning`` or ``content``."""
    text: str
    """The block's body, or the whole sentence for an implicit prediction."""
    claim: str
    """The part compared with the observation (implicit: what follows the cue)."""
    start: int
    """Offset of the prediction in its source text."""
    end: int
    """Offset just past it."""
    position: float
    """``start / len(source text)``: 0 = the very beginning of the turn's text, 1 = its end."""
    cue: str = ""
    """The expectation cue that made an implicit sentence a prediction (empty for explicit)."""
    call_name: str | None = None
    """A tool named by the prediction (``call="..."`` attribute, or a called tool it mentions)."""
    call_index: int | None = None
    """Index in ``Step.tool_calls`` of the aligned call; None when unaligned."""
    call_id: str | None = None
    """``ToolCall.id`` of the aligned call."""
    observation: str | None = None
    """The content the aligned call actually returned."""
    observation_is_error: bool | None = None
    """``Observation.is_error`` of that answer."""
    correct: bool | None = None
    """Scoring verdict; None when not scored or not checkable."""
    score: float | None = None
    """Graded agreement in [0, 1] (rule: share of facts found; judge: normalised rubric mean)."""
    method: str = ""
    """How it was scored: ``rule:json``, ``rule:facts``, ``rule:words``, ``rule:status``,
    ``judge``, ``unverifiable`` or ``unaligned``."""
    detail: str = ""
    """What was checked (facts found/missing, judge text)."""
    reason: str = ""
    """Why the prediction has no observation to be scored against (empty when it has one)."""


def episode_key(episode: Episode) -> str:
    """The ``benchmark/task_id#trial`` key used to join Episodes, results and predictions."""
    return f"{episode.benchmark}/{episode.task_id}#{episode.trial}"


# --- implicit predictions -------------------------------------------------------------------

_OUTCOME_VERBS = (r"return|output|print|show|give|list|yield|contain|produce|respond|reply|fail|"
                  r"succeed|error|raise|throw|display|report|come back|be empty|be an? |be the |be \d|"
                  r"include|reveal|tell us|confirm")
_CUES = [
    # "I expect ...", "we predict ...", "my guess is the output ..."
    re.compile(r"\b(?:i|we)\s+(?:would\s+)?(?:expect|anticipate|predict|assume the (?:result|output))\b", re.I),
    re.compile(r"\b(?:expected|expecting|my prediction|my guess)\b", re.I),
    # "this should return ...", "the call will probably fail", "it'll print ..."
    re.compile(rf"\b(?P<subj>\w+)(?:'ll|\s+(?:should|will|would|might|may|is going to|is likely to|"
               rf"is expected to|ought to))\s+(?:\w+\s+){{0,2}}?(?:{_OUTCOME_VERBS})", re.I),
    # "the result/output/response should ..."
    re.compile(r"\b(?:result|output|response|answer|observation|reply)\s+(?:should|will|would|is likely to|"
               r"might|is going to|ought to)\b", re.I),
    re.compile(r"\bprobably\s+(?:returns?|outputs?|prints?|shows?|gives?|fails?|lists?|contains?)\b", re.I),
]
_AGENT_SUBJECTS = {"i", "we", "you", "me", "us", "let"}
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|\n|$)")


def _mask_blocks(text: str) -> str:
    """``text`` with explicit blocks blanked out (same length, so offsets stay valid)."""
    for block in find_blocks(text):
        text = text[:block.start] + " " * (block.end - block.start) + text[block.end:]
    return text


def _cue_in(sentence: str) -> re.Match | None:
    for pattern in _CUES:
        for m in pattern.finditer(sentence):
            subject = (m.groupdict().get("subj") or "").lower()
            if subject in _AGENT_SUBJECTS:
                continue
            return m
    return None


def implicit_predictions(text: str) -> list[tuple[int, int, str, int]]:
    """Sentences of ``text`` that state an expected outcome: ``(start, end, cue, cue_start)``.

    Offsets index ``text``; explicit blocks inside it are skipped.
    """
    masked = _mask_blocks(text)
    found = []
    for m in _SENTENCE.finditer(masked):
        sentence = m.group(0)
        if not sentence.strip():
            continue
        cue = _cue_in(sentence)
        if cue is None:
            continue
        lead = len(sentence) - len(sentence.lstrip())
        trail = len(sentence.rstrip())
        found.append((m.start() + lead, m.start() + trail, cue.group(0), m.start() + cue.start()))
    return found


# --- alignment ------------------------------------------------------------------------------

def _call_offsets(step: Step) -> list[int | None]:
    """Where each call's raw text starts in the completion (None when it can't be found)."""
    offsets: list[int | None] = []
    pos = 0
    for call in step.tool_calls:
        at = step.completion.find(call.raw, pos) if call.raw else -1
        offsets.append(at if at >= 0 else None)
        if at >= 0:
            pos = at + len(call.raw)
    return offsets


def _observation_for(step: Step, index: int, call: ToolCall) -> Observation | None:
    for obs in step.observations:
        if call.id and obs.call_id == call.id:
            return obs
    return step.observations[index] if index < len(step.observations) else None


def _named_call(text: str, calls: list[ToolCall], taken: set[int]) -> int | None:
    """Index of a not-yet-taken call whose function name occurs in ``text``."""
    for i, call in enumerate(calls):
        if i not in taken and call.name and re.search(rf"(?<![\w.]){re.escape(call.name)}(?!\w)", text):
            return i
    return None


NO_CALL = "no tool call in this turn"
EXTRA_BLOCK = "every call of this turn already has a prediction"


def _attach(pred: Prediction, step: Step, index: int) -> None:
    call = step.tool_calls[index]
    obs = _observation_for(step, index, call)
    pred.call_index, pred.call_id, pred.call_name = index, call.id or None, pred.call_name or call.name
    if obs is None:
        pred.reason = f"no observation came back for call {index} ({call.name})"
    elif obs.metadata.get("executed") is False:
        pred.reason = f"the environment did not execute call {index} ({call.name}): {_clip(obs.content)}"
    else:
        pred.observation, pred.observation_is_error = obs.content, obs.is_error


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def step_predictions(step: Step, key: str = "") -> list[Prediction]:
    """Every prediction of one step, aligned with the step's calls and observations."""
    calls = step.tool_calls
    offsets = _call_offsets(step)
    preds: list[Prediction] = []

    taken: set[int] = set()
    completion = step.completion or ""
    for block in find_blocks(completion):
        if not block.text:  # an empty block (e.g. a prefilled one closed at once) predicts nothing
            continue
        pred = Prediction(episode=key, step=step.index, kind="explicit", source="completion",
                          text=block.text, claim=block.text, start=block.start, end=block.end,
                          position=block.start / max(len(completion), 1), call_name=block.call)
        index = None
        if block.call:
            index = next((i for i, c in enumerate(calls) if c.name == block.call and i not in taken), None)
        if index is None:
            after = [i for i, at in enumerate(offsets) if at is not None and at >= block.end and i not in taken]
            before = [i for i, at in enumerate(offsets) if at is not None and at < block.start]
            free = [i for i in range(len(calls)) if i not in taken]
            index = after[0] if after else (before[-1] if before else (free[0] if free else None))
        if index is not None:
            taken.add(index)
            _attach(pred, step, index)
        else:
            pred.reason = EXTRA_BLOCK if calls else NO_CALL
        preds.append(pred)

    source, text = ("reasoning", step.reasoning) if step.reasoning else ("content", step.content or "")
    implicit_taken: set[int] = set()
    order = 0
    for start, end, cue, cue_start in implicit_predictions(text):
        sentence = text[start:end]
        pred = Prediction(episode=key, step=step.index, kind="implicit", source=source,
                          text=sentence, claim=text[cue_start + len(cue):end].strip(), start=start, end=end,
                          position=start / max(len(text), 1), cue=cue)
        index = _named_call(sentence, calls, implicit_taken)
        if index is None and calls:
            free = [i for i in range(len(calls)) if i not in implicit_taken]
            index = free[0] if free else min(order, len(calls) - 1)
            order += 1
        if index is not None:
            implicit_taken.add(index)
            _attach(pred, step, index)
        else:
            pred.reason = NO_CALL
        preds.append(pred)
    return preds


def episode_predictions(episode: Episode) -> list[Prediction]:
    """Every prediction of an Episode, step by step, aligned (not yet scored)."""
    key = episode_key(episode)
    return [pred for step in episode.steps for pred in step_predictions(step, key)]


# --- self-corrections -----------------------------------------------------------------------

SELF_CORRECTION = re.compile(
    r"\b(?:wait|actually|on second thought|let me reconsider|let me re-?check|i was wrong|"
    r"correction:|oops|hmm,? no|no,? that's (?:not right|wrong)|i made a mistake|scratch that)\b",
    re.I)
"""Markers of a self-correction in the reasoning ("wait", "actually", ...)."""


def self_corrections(step: Step) -> int:
    """How many self-correction markers the step's reasoning and visible text hold."""
    text = " ".join(t for t in (step.reasoning, step.content) if t)
    return len(SELF_CORRECTION.findall(_mask_blocks(text)))
