"""Prompting modules: how the agent loop lets ``--prompting NAME`` reshape prompts and parsing.

A prompting module wraps any adapter without the adapter knowing (``unified.predict`` holds
the predict-then-act family; ``act`` here is the plain agent). The agent loop creates **one
instance per episode** (so a module may keep per-episode state, e.g. the last prediction) by
calling the registered factory with the options of ``--set prompting.KEY=VALUE``, and calls
its four hooks in this order on every turn:

``system_prompt(base: str) -> str``
    Once, when the episode opens: the environment's system prompt -> the one used.
``before_policy(messages: list[Message]) -> list[Message]``
    Before every policy call: the conversation (system prompt first, reasoning of earlier
    turns still attached; the chat template drops what it drops) -> the messages rendered
    for the policy. Must not mutate its input; the recorded Episode keeps the original.
``parse(completion: str) -> tuple[str, dict]``
    After every policy call, on the raw completion (reasoning included, ``<think>...</think>``
    when the model reasons): returns the completion the loop goes on to parse (reasoning,
    tool calls and answer are extracted from it) with module blocks, e.g. ``<prediction>``,
    stripped, plus ``extras`` stored in ``Step.extras`` (e.g. the prediction text). The
    stripped text never reaches tools or the benchmark's scorer; the raw completion stays in
    ``Step.completion``.
``after_observations(step: Step, observations: list[Observation]) -> None``
    After the environment answered the turn's calls: may annotate ``step.extras`` and keep
    state for the next ``before_policy`` (predict-then-act-reflect puts its comparison there).
``response_prefix() -> str`` (optional; default ``""``)
    Text the next completion must start with, prefilled after the generation prompt by the
    backends that can (``hf``, ``vllm``; ``PolicyOutput.prefix`` says whether it was). The loop
    parses and records ``prefix + generated text`` as the completion and notes the prefix in
    ``Step.extras["response_prefix"]``. Predict-then-act opens its prediction block this way,
    so even a small model states a prediction at every turn.

Modules register in :data:`PROMPTING` (a :class:`unified.registry.Registry`)::

    from unified.agent.prompting import PROMPTING, PromptingModule

    @PROMPTING.register("predict_then_act")
    class PredictThenAct(PromptingModule): ...

Packages above the loop (``unified.predict``, or an outside package) make their modules known
through the entry-point group ``unified.prompting`` (``NAME = "module:Factory"`` in their
``pyproject.toml``); :func:`make_prompting` loads the entry point of a name it does not know yet,
so the loop never names a module above its own floor.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any, Callable

from unified.registry import Registry, UnknownNameError
from unified.types import Message, Observation, Step


class PromptingModule:
    """The identity prompting module (also the base class of the others)."""

    name = "act"

    def __init__(self, **options: Any) -> None:
        self.options = options

    def system_prompt(self, base: str) -> str:
        return base

    def before_policy(self, messages: list[Message]) -> list[Message]:
        return messages

    def parse(self, completion: str) -> tuple[str, dict[str, Any]]:
        return completion, {}

    def after_observations(self, step: Step, observations: list[Observation]) -> None:
        return None

    def response_prefix(self) -> str:
        return ""


PROMPTING: Registry[Callable[..., PromptingModule]] = Registry("prompting module")
"""Factories of prompting modules by name; ``act`` is the plain agent."""
PROMPTING.register("act", PromptingModule)


PROMPTING_ENTRY_POINTS = "unified.prompting"
"""The entry-point group where packages register prompting modules by name."""


def _registered_entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=PROMPTING_ENTRY_POINTS)}


def make_prompting(name: str = "act", **options: Any) -> PromptingModule:
    """A fresh instance of the prompting module ``name`` (one per episode); an unknown name is an
    UnknownNameError listing the registered and entry-point names ("did you mean")."""
    if name not in PROMPTING:
        entry_point = _registered_entry_points().get(name)
        if entry_point is not None:
            factory = entry_point.load()
            if name not in PROMPTING:  # loading a module may have registered it already
                PROMPTING.register(name, factory)
        else:
            raise UnknownNameError(PROMPTING.kind, name, prompting_names())
    return PROMPTING.get(name)(**options)


def prompting_names() -> list[str]:
    """Every module name: registered here, or announced by an installed package's entry point."""
    return sorted(set(PROMPTING.names()) | set(_registered_entry_points()))
