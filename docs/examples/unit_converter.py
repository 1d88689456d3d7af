"""unit_converter: a complete benchmark adapter in one file (the example of docs/adapters.md).

Each task asks to convert a length; the agent has one tool, ``convert``, and must answer with the
number. Run it (no model needed, ``--model gold`` replays the reference actions):

    PYTHONPATH=docs/examples python -m unified.eval --benchmarks unit_converter:UnitConverterAdapter \\
        --model gold --out /tmp/unit_run

An installed package registers the class instead (pyproject.toml):
``[project.entry-points."unified.benchmarks"]`` ``unit_converter = "unit_converter:UnitConverterAdapter"``,
and then ``--benchmarks unit_converter`` finds it. ``tests/test_adapter_docs.py`` runs this file
end to end and checks that docs/adapters.md shows it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from unified.benchmarks import Adapter, AgentLimits, Environment, RunContext, Task, avg_at_k, scores_by_task
from unified.types import Episode, EpisodeResult, Message, Observation, ToolCall, ToolSpec

FACTORS = {"m": 1.0, "km": 1000.0, "cm": 0.01, "ft": 0.3048, "mi": 1609.344}
QUESTIONS = [("q1", 5.0, "km", "m"), ("q2", 12.0, "ft", "m"), ("q3", 3.0, "mi", "km")]


def convert(value: float, from_unit: Literal["m", "km", "cm", "ft", "mi"],
            to_unit: Literal["m", "km", "cm", "ft", "mi"]) -> float:
    """Convert a length between units.

    Args:
        value: the length to convert.
        from_unit: the unit it is given in.
        to_unit: the unit wanted.
    """
    return value * FACTORS[from_unit] / FACTORS[to_unit]


CONVERT = ToolSpec.from_function(convert)  # name, description and JSON schema from the signature


@dataclass
class UnitConverterConfig:
    """Settings (``--set benchmarks.unit_converter.KEY=VALUE``); an unknown key is an error."""

    tolerance: float = 0.01
    """Relative error an answer may have."""


class UnitConverterEnvironment(Environment):
    """One question: the tool, the prompt, the first user message; ``step`` answers each call."""

    def __init__(self, question: dict[str, Any]) -> None:
        super().__init__()  # required: sets tools, prompts, greeting, done, metadata to their defaults
        self.question = question
        self.tools = [CONVERT]  # ToolSpec objects (a plain dict is an error naming this tool)
        self.system_prompt = "Use the convert tool, then answer with the number only."
        self.first_user_message = (f"How many {question['to_unit']} is {question['value']} "
                                   f"{question['from_unit']}?")

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        """One Observation per call, in order; a bad call is an error observation, never a raise."""
        observations = []
        for call in tool_calls:
            try:
                observations.append(Observation(call.id, f"{convert(**call.arguments):.6g}"))
            except (TypeError, KeyError) as exc:
                observations.append(Observation(call.id, f"Error: {exc}", is_error=True))
        return observations


class UnitConverterAdapter(Adapter):
    """tasks -> open -> (the agent loop steps the environment) -> score -> aggregate."""

    name = "unit_converter"
    suites = ("examples",)  # --suite examples runs it; not part of the study's suites
    runs_default = 1
    Config = UnitConverterConfig

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        tasks = [Task(id=qid, benchmark=self.name,
                      payload={"value": value, "from_unit": src, "to_unit": dst})
                 for qid, value, src, dst in QUESTIONS]
        return tasks[:limit] if limit else tasks

    def open(self, task: Task, *, run: RunContext = RunContext()) -> UnitConverterEnvironment:
        return UnitConverterEnvironment(task.payload)

    def agent_limits(self, limits: AgentLimits) -> AgentLimits:
        return limits  # the run's limits; a protocol with its own budgets returns those

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        expected = convert(**task.payload)
        last = next((m.content for m in reversed(episode.messages) if m.role == "assistant" and m.content), "")
        try:
            ok = abs(float(last.strip()) - expected) <= self.settings.tolerance * abs(expected)
        except ValueError:
            ok = False
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=float(ok),
                             passed=ok, details={"expected": expected, "answer": last})

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        scored = [r for r in results if r.skipped is None and r.error is None]
        return {"score": avg_at_k(scores_by_task(scored)), "metric": "accuracy (%)", "n": len(scored),
                "comparable": True, "not_comparable_because": []}

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        return [[ToolCall(name="convert", arguments=dict(task.payload), id="gold")]]

    def gold_answer(self, task: Task) -> str | None:
        return f"{convert(**task.payload):.6g}"
