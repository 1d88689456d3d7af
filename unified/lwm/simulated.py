"""Paradigm I on the adapter seam: any benchmark's environment with its tool observations answered by a
world model, so the sim-vs-real score gap of a policy can be measured per benchmark.

An eval recipe with ``benchmarks: ["unified.lwm.simulated:SimulatedAdapter"]`` and
``benchmark_config: {"unified.lwm.simulated:SimulatedAdapter": {adapter: bfcl_v4, world_model: embedded}}``
(docs/agentic.md) runs the adapter's tasks as usual (its tools, system prompt, user turns, limits) except that every
``env.step`` asks the world model instead of executing the calls. The world model is asked as the
AgentWorldBench records the harvester writes are shaped (:mod:`unified.lwm.harvest`): the domain's
system prompt (:func:`unified.lwm.prompts.build_system_prompt`, task = the first user message, the
action space = the tools), one user turn per step holding the step's calls as JSON lines, one
assistant turn per observation (tagged for GUI domains). Its answer (reasoning removed,
``<predicted_observation>`` read for GUI domains, :func:`unified.chatformat.observation.parse_observation`)
is the observation of a single call; a step of k calls gets the answer's k blank-line-separated
parts when it has exactly k, else the whole answer on the first call and a note on the others.

Scoring is the real adapter's ``score`` on the real environment, which never saw the simulated calls:
right for scorers that read the episode (BFCL's call checker, answer matching), not for scorers that
read the environment's final state (they see the untouched start). ``aggregate`` is the real
adapter's. The same weights' fidelity on real episodes is ``python -m unified.eval lwm`` on records
harvested from a real run (``python -m unified.lwm.harvest``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from unified.benchmarks.contract import Adapter, AgentLimits, Environment, RunContext, Task, with_run
from unified.benchmarks.discovery import load_adapter
from unified.chatformat.observation import parse_observation
from unified.inference.base import SamplingConfig
from unified.inference.shared import shared_chat_model
from unified.lwm.prompts import build_system_prompt, format_observation
from unified.lwm.records import DOMAINS
from unified.types import Episode, EpisodeResult, Message, Observation, ToolCall

SPLIT_NOTE = "(the world model answered this step's calls together; see the first call's observation)"


def action_text(calls: list[ToolCall]) -> str:
    """A step's calls as the harvester writes an action: one JSON object a line."""
    return "\n".join(json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False) for c in calls)


def split_answer(answer: str, calls: int) -> list[str]:
    """The observation of each of ``calls`` calls from one answer (module docstring)."""
    parts = [p for p in answer.split("\n\n") if p.strip()]
    if calls == 1:
        return [answer]
    if len(parts) == calls:
        return parts
    return [answer] + [SPLIT_NOTE] * (calls - 1)


class SimulatedEnvironment(Environment):
    """The real environment's conversation with a world model's observations (module docstring)."""

    def __init__(self, real: Environment, world_model: Any, domain: str, *, max_new_tokens: int = 512) -> None:
        super().__init__()
        self.real, self.world_model, self.domain, self.max_new_tokens = real, world_model, domain, max_new_tokens
        self.history: list[tuple[str, str]] = []
        self.malformed_call_ends_turn = real.malformed_call_ends_turn  # type: ignore[misc]

    def start(self) -> None:
        self.real.__enter__()
        self.tools, self.system_prompt = self.real.tools, self.real.system_prompt
        self.first_user_message, self.assistant_greeting = self.real.first_user_message, self.real.assistant_greeting
        self.metadata = {**self.real.metadata, "observations": f"world model {self.world_model.model}"}

    def stop(self) -> None:
        self.real.__exit__(None, None, None)

    def messages(self, action: str) -> list[dict[str, str]]:
        system = build_system_prompt(self.domain, task=self.first_user_message,
                                     action_space="Tools: " + ", ".join(t.name for t in self.tools))
        out = [{"role": "system", "content": system}]
        for past_action, observation in self.history:
            out += [{"role": "user", "content": past_action},
                    {"role": "assistant", "content": format_observation(self.domain, observation)}]
        return out + [{"role": "user", "content": action}]

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        action = action_text(tool_calls)
        answer = parse_observation(self.world_model.chat(self.messages(action), max_tokens=self.max_new_tokens))
        self.history.append((action, answer))
        return [Observation(call_id=call.id, content=text)
                for call, text in zip(tool_calls, split_answer(answer, len(tool_calls)))]

    def next_user_turn(self, episode: Episode) -> str | None:
        return self.real.next_user_turn(episode)


@dataclass
class SimulatedConfig:
    """Settings of :class:`SimulatedAdapter`."""

    adapter: str = ""
    """The benchmark whose environment is simulated (a registered name or ``package.module:Factory``)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """That adapter's own settings."""
    world_model: str = "embedded"
    """The world model's model spec (a checkpoint in-process, or ``openai:URL#MODEL``)."""
    domain: str | None = None
    """The AgentWorldBench domain of its prompts; None: the adapter's ``world_model_domain``."""
    max_new_tokens: int = 512
    """Tokens of one predicted observation."""


class SimulatedAdapter(Adapter):
    """An installed adapter with its observations answered by a world model (module docstring)."""

    name = "simulated"
    """Its settings' key (``benchmarks.simulated.adapter=...``); each instance is named after the benchmark it
    simulates (``NAME_simulated``), the directory of its records."""
    Config = SimulatedConfig

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        s: SimulatedConfig = self.settings
        if not s.adapter:
            raise ValueError("SimulatedAdapter: adapter: name the benchmark whose environment is simulated")
        self.real = load_adapter(s.adapter, **s.settings)
        self.domain = s.domain or getattr(self.real, "world_model_domain", None) or "mcp"
        if self.domain not in DOMAINS:
            raise ValueError(f"SimulatedAdapter: domain {self.domain!r} is not one of {', '.join(DOMAINS)}")
        self.name = f"{self.real.name}_simulated"  # type: ignore[misc]
        self.runs_default = self.real.runs_default  # type: ignore[misc]
        self._model: Any = None
        """The world model, loaded on the first ``open``."""

    def world_model(self) -> Any:
        if self._model is None:
            self._model = shared_chat_model(self.settings.world_model,
                                            sampling=SamplingConfig(max_new_tokens=self.settings.max_new_tokens,
                                                                    thinking=False))
        return self._model

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        self.real.replay = self.replay
        return self.real.tasks(split, limit)

    def open(self, task: Task, *, run: RunContext = RunContext()) -> Environment:
        return SimulatedEnvironment(with_run(self.real, "open", task, run=run), self.world_model(), self.domain,
                                    max_new_tokens=self.settings.max_new_tokens)

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        real = env.real if isinstance(env, SimulatedEnvironment) else env
        result = self.real.score(task, episode, real)
        result.benchmark = self.name
        return result

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        return with_run(self.real, "aggregate", results, run=run)

    def agent_limits(self, limits: AgentLimits) -> AgentLimits:
        return self.real.agent_limits(limits)

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        return self.real.gold_turns(task)


__all__ = ["SimulatedAdapter", "SimulatedConfig", "SimulatedEnvironment", "action_text", "split_answer"]
