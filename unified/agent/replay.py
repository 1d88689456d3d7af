"""Replayers: answers the agent loop takes from the task itself, in place of a policy.

A :class:`Replayer` is given to :class:`unified.agent.loop.AgentLoop` where a ChatModel would go.
The loop does not send it a request: for each episode ready for its next turn it calls
:meth:`Replayer.respond` with the adapter, the task and the conversation so far, and treats the
completion exactly as a model's (parsed, recorded, its calls stepped), so a replayed episode runs
every part of the loop but generation. Nothing about the task travels through a
:class:`unified.inference.base.PolicyRequest`.

:class:`GoldReplayer` (``--model gold``) replays the task's reference actions to verify an adapter end
to end: for user turn ``u`` it first emits every call of ``adapter.gold_turns(task)[u]`` (as Qwen3.5
XML tool-call text, so the real parsing path runs), then, once their observations are in, a final
answer without calls (``adapter.gold_answer(task)`` on the last turn when the benchmark scores the
answer text, otherwise "Done."). A correct adapter scores 100% with it on benchmarks whose ground
truth is a call sequence (BFCL multi-turn).
"""

from __future__ import annotations

from typing import Any

from unified.chatformat.toolcalls import render_tool_call
from unified.benchmarks.contract import Adapter, Task
from unified.inference.base import PolicyOutput
from unified.inference.spec import parse_spec


class Replayer:
    """Answers an episode's turns from its task (subclasses implement :meth:`respond`)."""

    name = "replay"
    model = "replay"
    """What episodes record as their ``model`` when the loop is given no ``model_name``."""

    def respond(self, adapter: Adapter, task: Task, messages: list[dict[str, Any]]) -> PolicyOutput:
        """The completion of the next turn, given the conversation so far (chat-format dicts, the
        last one a user or tool message). An exception raised here ends only this episode (its error)."""
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""


class GoldReplayer(Replayer):
    """The task's reference actions (module docstring)."""

    name = "gold"
    model = "gold"

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], list] = {}

    def _turns(self, adapter: Adapter, task: Task) -> list:
        key = (task.benchmark, task.id)
        if key not in self._cache:
            self._cache[key] = adapter.gold_turns(task)
        return self._cache[key]

    def respond(self, adapter: Adapter, task: Task, messages: list[dict[str, Any]]) -> PolicyOutput:
        turns = self._turns(adapter, task)
        user_idx = [i for i, m in enumerate(messages) if m["role"] == "user"]
        turn = len(user_idx) - 1
        acted = any(m["role"] == "assistant" for m in messages[user_idx[-1] + 1:]) if user_idx else False
        calls = turns[turn] if 0 <= turn < len(turns) else []
        if calls and not acted:
            text = "\n".join(render_tool_call(c) for c in calls)
        else:
            answer = adapter.gold_answer(task) if turn == len(turns) - 1 else None
            text = answer if answer is not None else "Done."
        return PolicyOutput(text="</think>\n\n" + text, prompt="", finish_reason="stop")


def replay_name(model: str) -> str | None:
    """``"gold"`` when the model spec is the gold replayer's, else None; resolves nothing, so a spec that
    only a policy object given to ``run_eval`` answers for (a test's replayer) is not an error here."""
    return "gold" if str(model).strip() == "gold" else None


def replayer_for(model: str) -> Replayer | None:
    """The replayer a model spec names (``gold``), or None for a spec that names a model."""
    return GoldReplayer() if parse_spec(model).kind == "gold" else None
