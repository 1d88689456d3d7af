"""Predict-then-act prompting modules, for ``python -m unified.eval --prompting NAME``.

* ``act`` (registered by :mod:`unified.agent.prompting`): the plain agent, the baseline.
* ``predict_then_act``: the system prompt asks the agent to write, before each tool call, a
  ``<predicted_observation>`` block with what it expects the environment to return. The block
  is stripped from the completion before tool calls are parsed and before the benchmark
  scores; once the observations arrive, every prediction of the turn (the explicit blocks and
  the implicit statements of the reasoning, :mod:`unified.predict.extract`) is aligned with the observation
  that followed and scored by rule, and stored in ``Step.extras["predictions"]``.
* ``predict_then_act_reflect``: the same, and the next turn's prompt carries a short
  comparison of expectation and outcome (``<reflection>`` appended to the last tool answer of
  the rendered prompt; the recorded conversation is left as it was).

They change prompts and parsing only: an adapter never knows which one runs. Options come from
``--set prompting_options.KEY=VALUE``: ``instruction`` (replaces the default instruction text),
``threshold`` (rule score needed to count as correct, default 0.5), ``prefill`` (default
true: every completion starts with the opened block, through the loop's ``response_prefix``
hook, so that even a small model that ignores the instruction states a prediction; backends
that cannot prefill, e.g. remote servers, rely on the instruction alone), ``reflection_chars``
(length cap of each side of the comparison, default 300).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from unified.chatformat.toolcalls import parse_completion
from unified.agent.prompting import PROMPTING, PromptingModule
from unified.predict.blocks import PREDICTION_TAG, find_blocks, strip_blocks
from unified.predict.extract import NO_CALL, step_predictions
from unified.predict.score import score_prediction
from unified.types import Message, Observation, Step

PREDICT_INSTRUCTION = f"""\
# Predict, then act
Before every tool call, first write what you expect the tool to return, inside
<{PREDICTION_TAG}> and </{PREDICTION_TAG}> tags, then make the call. Predict the actual
content (values, file names, error messages), not a description of it. Example:
<{PREDICTION_TAG}>
{{"status": "ok", "count": 3}}
</{PREDICTION_TAG}>
<tool_call>
...
</tool_call>"""

REFLECT_INSTRUCTION = """\
After each tool result you will see a <reflection> comparing your prediction with what the
tool actually returned. Use it: where the prediction was wrong, correct your picture of the
environment before acting again."""


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


class PredictThenAct(PromptingModule):
    """Ask for a prediction block before each call; strip it; score it once the answer is in."""

    name = "predict_then_act"

    def __init__(self, instruction: str | None = None, threshold: float = 0.5, prefill: bool | str = True,
                 **options: Any) -> None:
        super().__init__(instruction=instruction, threshold=threshold, prefill=prefill, **options)
        self.instruction = instruction or PREDICT_INSTRUCTION
        self.threshold = float(threshold)
        self.prefill = prefill if isinstance(prefill, bool) else str(prefill).lower() in ("1", "true", "yes", "on")

    def response_prefix(self) -> str:
        """Open the prediction block for the model (``prefill=false``: leave it to the instruction)."""
        return f"<{PREDICTION_TAG}>\n" if self.prefill else ""

    def system_prompt(self, base: str) -> str:
        return f"{base.rstrip()}\n\n{self.instruction}" if base.strip() else self.instruction

    def parse(self, completion: str) -> tuple[str, dict[str, Any]]:
        """Strip the blocks; record them (unaligned, unscored) until ``after_observations`` scores them.

        A turn without tool calls gets no ``after_observations``: its blocks stay recorded as
        ``method="unaligned"`` predictions, with the reason (no call in the turn; or calls whose
        observations never came, when the environment step failed).
        """
        blocks = find_blocks(completion)
        visible = strip_blocks(completion) if blocks else completion
        reason = NO_CALL
        if blocks and parse_completion(visible).tool_calls:
            reason = "the turn's tool calls got no observation (the environment step failed or was not run)"
        records = [{"kind": "explicit", "source": "completion", "text": b.text, "claim": b.text, "start": b.start,
                    "end": b.end, "position": b.start / max(len(completion), 1), "cue": "", "call_name": b.call,
                    "call_index": None, "call_id": None, "correct": None, "score": None, "method": "unaligned",
                    "detail": reason, "reason": reason} for b in blocks if b.text]
        extras = {"prediction_blocks": len(blocks), "predictions": records}
        return visible, extras

    def after_observations(self, step: Step, observations: list[Observation]) -> None:
        view = step if step.observations or not observations else dataclasses.replace(step, observations=list(observations))
        predictions = [score_prediction(p, threshold=self.threshold) for p in step_predictions(view)]
        records = []
        for p in predictions:
            record = p.to_dict()
            for key in ("episode", "step", "observation", "observation_is_error"):
                record.pop(key)  # the step already holds them
            records.append(record)
        step.extras["predictions"] = records
        step.extras["prediction_blocks"] = sum(p.kind == "explicit" for p in predictions)


class PredictThenActReflect(PredictThenAct):
    """Predict-then-act, plus a comparison of the last predictions with their outcomes in the next prompt."""

    name = "predict_then_act_reflect"

    def __init__(self, reflection_chars: int = 300, **options: Any) -> None:
        super().__init__(**options)
        self.reflection_chars = int(reflection_chars)
        self._reflection: str | None = None

    def system_prompt(self, base: str) -> str:
        return f"{super().system_prompt(base)}\n\n{REFLECT_INSTRUCTION}"

    def after_observations(self, step: Step, observations: list[Observation]) -> None:
        super().after_observations(step, observations)
        answers = step.observations or observations
        lines = []
        for record in step.extras.get("predictions", []):
            if record["kind"] != "explicit" or record["call_index"] is None:
                continue
            index = record["call_index"]
            obs = next((o for o in answers if o.call_id and o.call_id == record["call_id"]), None)
            if obs is None and index < len(answers):
                obs = answers[index]
            if obs is None:
                continue
            verdict = {True: "matched", False: "did not match", None: "could not be checked"}[record["correct"]]
            lines.append(f"{record['call_name'] or 'call'}: you predicted "
                         f"{_clip(record['text'], self.reflection_chars)!r}; it returned "
                         f"{_clip(obs.content, self.reflection_chars)!r}; the prediction {verdict}"
                         + (f" ({record['detail']})" if record["correct"] is False and record["detail"] else "") + ".")
        if not lines and step.tool_calls:
            lines.append("you made no prediction before calling; predict before the next call.")
        self._reflection = "\n".join(lines) if lines else None
        if self._reflection:
            step.extras["reflection"] = self._reflection

    def before_policy(self, messages: list[Message]) -> list[Message]:
        if not self._reflection or not messages or messages[-1].role != "tool":
            return messages
        last = messages[-1]
        note = f"{last.content}\n<reflection>\n{self._reflection}\n</reflection>"
        return [*messages[:-1], dataclasses.replace(last, content=note)]


PROMPTING.register("predict_then_act", PredictThenAct)
PROMPTING.register("predict_then_act_reflect", PredictThenActReflect)
