"""The shared records of the library.

Everything that crosses a module boundary is one of these dataclasses: the agent loop
writes Episodes, the eval stores EpisodeResults, the world-model data is
:class:`unified.lwm.records.AWBRecord` (its own format), the
rewards return RewardBreakdowns. Each has ``to_dict``/``from_dict`` for JSONL storage;
``from_dict`` (the one loader, :func:`unified.config.from_dict`) rejects unknown fields
(naming them, with "did you mean") and wrong types, so that a corrupted file is noticed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from unified.config import from_dict

R = TypeVar("R", bound="Record")

Role = Literal["system", "user", "assistant", "tool"]


class Record:
    """Mixin: plain-dict round trip for nested dataclass records."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any], where: str = "") -> R:
        """The record of ``data`` through the library's one loader, :func:`unified.config.from_dict`:
        nested records revived, unknown fields an error with "did you mean", types checked.

        ``where`` (a file, ``file:line``) prefixes every error message; errors are ``ValueError``.
        """
        return from_dict(cls, data, source=where)


@dataclass
class ToolSpec(Record):
    """A tool the agent may call, in the OpenAI function-calling shape."""

    name: str
    """Function name, unique within an environment."""
    description: str = ""
    """What the tool does, shown to the model."""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON schema of the arguments (an object schema)."""

    def to_openai(self) -> dict[str, Any]:
        """The ``{"type": "function", "function": {...}}`` form chat templates expect."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


@dataclass
class ToolCall(Record):
    """One call the model asked for."""

    name: str
    """Function name as the model wrote it (may be unknown to the environment)."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """Parsed arguments."""
    id: str = ""
    """Call id (position-based when the model gives none)."""
    raw: str = ""
    """The exact text the call was parsed from."""
    parse_error: str | None = None
    """Why the call could not be parsed, if it could not (it then becomes an error observation)."""


@dataclass
class Message(Record):
    """One chat message, as rendered through a chat template."""

    role: Role
    """system, user, assistant or tool."""
    content: str = ""
    """Visible text (for assistant turns: without reasoning and without tool-call markup)."""
    reasoning: str | None = None
    """Assistant reasoning (the ``<think>`` block), kept in records, dropped from later prompts."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Calls made in an assistant turn."""
    tool_call_id: str | None = None
    """For tool messages: the call this answers."""
    name: str | None = None
    """For tool messages: the tool's name."""

    def to_chat(self, *, keep_reasoning: bool = True) -> dict[str, Any]:
        """The dict a HF chat template (or an OpenAI server) expects."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.role == "assistant":
            if keep_reasoning and self.reasoning:
                out["reasoning_content"] = self.reasoning
            if self.tool_calls:
                out["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in self.tool_calls
                ]
        if self.role == "tool":
            if self.tool_call_id:
                out["tool_call_id"] = self.tool_call_id
            if self.name:
                out["name"] = self.name
        return out


@dataclass
class Observation(Record):
    """What the environment answered to one tool call."""

    call_id: str
    """The ToolCall.id this answers."""
    content: str
    """The text the agent sees."""
    is_error: bool = False
    """True for failed or malformed calls (the agent sees the error and can react)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Environment-specific extras (exit codes, timings, ...), not shown to the agent."""


@dataclass
class Step(Record):
    """One model call of an episode: the prompt, what the policy produced, and what the environment
    answered to its tool calls. A user turn may span several steps (a call, observations, the next
    call ...); ``AgentLimits.max_turns`` counts steps, ``max_steps_per_turn`` steps within a user turn."""

    index: int
    """0-based step number within the episode."""
    prompt: str
    """The exact rendered prompt text given to the policy."""
    completion: str
    """The raw completion, reasoning and tool-call markup included."""
    reasoning: str | None = None
    """The reasoning extracted from the completion."""
    content: str = ""
    """The visible answer text (no reasoning, no tool calls)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Every call parsed from the completion, malformed ones included."""
    observations: list[Observation] = field(default_factory=list)
    """The environment's answers, one per call, in call order."""
    prompt_tokens: int = 0
    """Number of prompt tokens."""
    completion_tokens: int = 0
    """Number of generated tokens."""
    completion_token_ids: list[int] = field(default_factory=list)
    """The policy's own token ids (never re-tokenised; used by training)."""
    prompt_token_ids: list[int] = field(default_factory=list)
    """The prompt's token ids as the backend fed them (empty for remote backends that do not
    return them)."""
    completion_logprobs: list[float] | None = None
    """Log-probability of each of ``completion_token_ids`` under the sampling distribution, where
    the backend gives them (None otherwise)."""
    generation_seconds: float = 0.0
    """Wall time of the policy call."""
    environment_seconds: float = 0.0
    """Wall time of executing the calls."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Prompting-module annotations (e.g. predictions) and the like."""


@dataclass
class Episode(Record):
    """A whole multi-turn rollout of one task."""

    benchmark: str
    """Adapter name, e.g. ``bfcl_v4``."""
    task_id: str
    """The benchmark's own task id."""
    trial: int = 0
    """Repetition index (Avg@k, pass^k)."""
    model: str = ""
    """Model spec the policy ran."""
    messages: list[Message] = field(default_factory=list)
    """The conversation as the agent saw it (reasoning kept here)."""
    steps: list[Step] = field(default_factory=list)
    """One record per policy call."""
    tools: list[ToolSpec] = field(default_factory=list)
    """Tools offered to the agent."""
    stop_reason: str = ""
    """Why the episode ended: a :class:`unified.benchmarks.contract.StopReason` value (documented there)."""
    error: str | None = None
    """Traceback text if the episode crashed."""
    started_at: float = 0.0
    """Unix time the episode started."""
    wall_seconds: float = 0.0
    """Total wall time."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Prompting module, sandbox backend and other run facts."""

    def turn_samples(self) -> list["TokenTrajectory"]:
        """One single-turn training sample per policy call: that call's prompt ids, and its
        completion ids with loss mask 1 everywhere. Always available when the backend gave ids."""
        samples = []
        for step in self.steps:
            _require_ids(step)
            samples.append(TokenTrajectory(
                prompt_ids=list(step.prompt_token_ids), response_ids=list(step.completion_token_ids),
                response_mask=[1] * len(step.completion_token_ids),
                response_logprobs=_logprobs_or_none([step])))
        return samples

    def token_trajectory(self) -> "TokenTrajectory":
        """The whole episode as one token sequence with a loss mask (verl's ``AgentLoopOutput`` shape).

        ``prompt_ids`` are the first call's prompt; ``response_ids`` concatenate, per call, the
        generated ids (mask 1) and then the tokens the next prompt adds after them: tool
        observations, user turns, template markup (mask 0, log-prob 0). This needs every prompt
        to extend the previous prompt plus its completion token for token; a chat template that
        rewrites earlier turns (dropping old reasoning, re-rendering tool calls) breaks that, and
        the error names the step (use :meth:`turn_samples` then).
        """
        if not self.steps:
            raise ValueError(f"{self.benchmark}/{self.task_id} trial {self.trial}: the episode has no policy calls")
        for step in self.steps:
            _require_ids(step)
        prompt = list(self.steps[0].prompt_token_ids)
        with_logprobs = all(step.completion_logprobs is not None for step in self.steps)
        response: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        for step, following in zip(self.steps, self.steps[1:] + [None]):
            response += step.completion_token_ids
            mask += [1] * len(step.completion_token_ids)
            logprobs += list(step.completion_logprobs or []) if with_logprobs else []
            if following is None:
                break
            so_far = prompt + response
            nxt = following.prompt_token_ids
            if nxt[:len(so_far)] != so_far:
                at = next((i for i, (a, b) in enumerate(zip(so_far, nxt)) if a != b), min(len(so_far), len(nxt)))
                raise ValueError(f"step {following.index}'s prompt does not extend step {step.index}'s prompt and "
                                 f"completion (first difference at token {at}): the chat template rewrote an "
                                 "earlier turn; use Episode.turn_samples()")
            added = nxt[len(so_far):]
            response += added
            mask += [0] * len(added)
            logprobs += [0.0] * len(added) if with_logprobs else []
        return TokenTrajectory(prompt_ids=prompt, response_ids=response, response_mask=mask,
                               response_logprobs=logprobs if with_logprobs else None)



@dataclass
class TokenTrajectory(Record):
    """Token ids of an episode (or one turn) ready for RL, in verl's ``AgentLoopOutput`` shape.

    Shapes: ``prompt_ids`` [P]; ``response_ids``, ``response_mask`` and ``response_logprobs`` [R]
    each. ``response_mask[i]`` is 1 where the policy generated ``response_ids[i]`` (the loss is
    taken there) and 0 for tokens the environment, the user or the template added.
    """

    prompt_ids: list[int]
    """The first prompt."""
    response_ids: list[int]
    """Everything after it: generated tokens and the tokens added between calls."""
    response_mask: list[int]
    """1 for policy-generated tokens, 0 otherwise; same length as ``response_ids``."""
    response_logprobs: list[float] | None = None
    """The backend's log-probs of the generated tokens (0.0 at masked positions); None when any
    call lacked them."""


def _require_ids(step: "Step") -> None:
    if not step.prompt_token_ids or not step.completion_token_ids:
        raise ValueError(f"step {step.index} has no prompt/completion token ids (a remote backend that does not "
                         "return them); token views need an in-process backend")


def _logprobs_or_none(steps: list["Step"]) -> list[float] | None:
    if any(s.completion_logprobs is None for s in steps):
        return None
    return [lp for s in steps for lp in (s.completion_logprobs or [])]


@dataclass
class RewardBreakdown(Record):
    """A reward and where it came from."""

    total: float
    """The mixed reward fed to the RL trainer."""
    components: dict[str, float] = field(default_factory=dict)
    """Per-source values, e.g. rubric criteria, rule verifier."""
    source: str = ""
    """``rubric``, ``rule`` or ``mixed``."""
    parsed: bool = True
    """False when the judge's answer could not be parsed (reward 0)."""
    detail: str = ""
    """Judge text or verifier message, for inspection."""


@dataclass
class EpisodeResult(Record):
    """An Episode scored by its benchmark."""

    benchmark: str
    """Adapter name."""
    task_id: str
    """Task id."""
    trial: int
    """Repetition index."""
    score: float
    """The benchmark's per-episode metric (0..1 unless the benchmark says otherwise)."""
    passed: bool | None = None
    """Pass/fail where the benchmark defines it."""
    details: dict[str, Any] = field(default_factory=dict)
    """Sub-scores and checker messages."""
    skipped: str | None = None
    """Reason if the task was skipped (missing key, missing engine, ...)."""
    error: str | None = None
    """Error text if the episode or scoring crashed."""
    episode_path: str | None = None
    """Where the full Episode is stored."""
