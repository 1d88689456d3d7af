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
import inspect
import re
import types as _pytypes
import typing
from typing import Any, Callable, Literal, TypeVar

from unified.config import from_dict

R = TypeVar("R", bound="Record")

ROW_SCHEMA = 2
"""The schema version every JSONL row of a run directory carries (``"schema": 2``): results, episodes,
warmup metrics. A row without one was written before rows were versioned (version 1: the same fields);
a row of a newer version is an error naming the file and line (written by a newer ``unified``)."""

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

    def to_row(self) -> dict[str, Any]:
        """``to_dict()`` as one versioned JSONL row: ``{"schema": ROW_SCHEMA, ...fields}``."""
        return {"schema": ROW_SCHEMA, **self.to_dict()}

    @classmethod
    def from_row(cls: type[R], data: dict[str, Any], where: str = "") -> R:
        """The record of one JSONL row (:meth:`to_row`): its ``schema`` checked (absent: version 1) and
        removed, the rest read strictly by :meth:`from_dict`."""
        return cls.from_dict(row_fields(data, where), where)


def row_fields(data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``data`` without its ``schema`` key, checked to be a version this library reads (ValueError
    naming ``where`` otherwise)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema", 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= ROW_SCHEMA:
        raise ValueError(f"{where}: row schema {version!r}: this version of unified reads schemas 1-{ROW_SCHEMA} "
                         "(a newer schema was written by a newer unified: upgrade to read it)")
    return {k: v for k, v in data.items() if k != "schema"}


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

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> "ToolSpec":
        """The tool a function declares: its name (or ``name``), the docstring's text before an
        ``Args:`` section as the description, and an object schema of its parameters from their type
        hints (``str int float bool``, ``list[X]``, ``dict[str, X]``, ``Literal[...]``, ``Optional[X]`` /
        ``X | None``, unions, ``Annotated[X, "description"]``); a parameter's description comes from
        ``Annotated`` or the docstring's ``Args:`` / ``:param x:`` lines, a default makes it optional
        (recorded as ``default`` when JSON has it). A parameter without a hint, ``*args`` / ``**kwargs``
        or a hint outside that list is a TypeError naming the function, the parameter and the hint."""
        return _tool_from_function(cls, fn, name)


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


# ToolSpec.from_function: a JSON schema from a function's signature ---------------------------------

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_JSON_VALUES = (str, int, float, bool, type(None))
_SUPPORTED = ("str, int, float, bool, list[X], dict[str, X], Literal[...], X | None, unions of these, "
              "Annotated[X, 'description']")


def _schema(hint: Any, where: str) -> dict[str, Any]:
    """The JSON schema of one type hint (``where`` names the parameter in errors)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is typing.Annotated:
        schema = _schema(args[0], where)
        text = next((a for a in args[1:] if isinstance(a, str)), None)
        return {**schema, "description": text} if text else schema
    if origin is Literal:
        if not all(isinstance(a, _JSON_VALUES) for a in args):
            raise TypeError(f"{where}: Literal values must be JSON scalars, got {args!r}")
        kinds = {_SCALARS.get(type(a)) for a in args}
        return {"type": kinds.pop(), "enum": list(args)} if len(kinds) == 1 and None not in kinds \
            else {"enum": list(args)}
    if origin in (typing.Union, _pytypes.UnionType):
        options = [a for a in args if a is not type(None)]
        schemas = [_schema(a, where) for a in options]
        if len(options) < len(args):  # Optional: null allowed too
            schemas.append({"type": "null"})
        if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
            return {"type": [s["type"] for s in schemas]}
        return {"anyOf": schemas}
    if hint is list or origin is list:
        return {"type": "array", **({"items": _schema(args[0], where)} if args else {})}
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"{where}: JSON object keys are text: dict[str, X], not {hint!r}")
        return {"type": "object", **({"additionalProperties": _schema(args[1], where)} if args else {})}
    raise TypeError(f"{where}: type hint {hint!r} has no JSON schema here (supported: {_SUPPORTED})")


def _docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """(description: the text before an ``Args:``/``Parameters:`` section or ``:param`` line,
    parameter name -> its description from ``name: text`` / ``name (type): text`` / ``:param name: text``)."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    described: dict[str, str] = {}
    text: list[str] = []
    in_args, current, item_indent = False, None, None
    for line in lines:
        stripped, indent = line.strip(), len(line) - len(line.lstrip())
        param = re.match(r":param\s+(?:\w+\s+)?(\w+):\s*(.*)", stripped)
        if param:
            in_args, current = True, param.group(1)
            described[current] = param.group(2)
        elif re.fullmatch(r"(Args|Arguments|Parameters):", stripped):
            in_args, current, item_indent = True, None, None
        elif in_args and re.fullmatch(r"(Returns|Raises|Yields|Examples?|Notes?):", stripped):
            in_args, current = False, None
        elif not in_args:
            text.append(line)
        elif stripped:
            item = re.match(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", stripped)
            if item and (item_indent is None or indent <= item_indent):
                item_indent, current = indent, item.group(1)
                described[current] = item.group(2)
            elif current:  # a continuation line of the current parameter
                described[current] = f"{described[current]} {stripped}".strip()
    return "\n".join(text).strip(), described


def _tool_from_function(cls: type, fn: Callable[..., Any], name: str | None) -> Any:
    label = getattr(fn, "__qualname__", repr(fn))
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:  # a hint naming something that does not exist
        raise TypeError(f"ToolSpec.from_function({label}): its type hints do not resolve: {exc}") from None
    description, described = _docstring_parts(inspect.getdoc(fn) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        where = f"ToolSpec.from_function({label}): parameter {param.name!r}"
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{where}: *args / **kwargs have no JSON schema; name each parameter")
        if param.name not in hints:
            raise TypeError(f"{where} has no type hint (supported: {_SUPPORTED})")
        schema = _schema(hints[param.name], where)
        if param.name in described and "description" not in schema:
            schema["description"] = described[param.name]
        if param.default is param.empty:
            required.append(param.name)
        elif isinstance(param.default, (*_JSON_VALUES, list, dict)):
            schema["default"] = param.default
        properties[param.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return cls(name=name or fn.__name__, description=description, parameters=parameters)
