"""``gold``: a policy that replays an adapter's ground truth, to verify the adapter end to end.

For user turn ``u`` of an episode it first emits every call of ``adapter.gold_turns(task)[u]``
(as Qwen3.5 XML tool-call text, so the real parsing path runs), then, once their observations
are in, a final answer without calls (``adapter.gold_answer(task)`` on the last turn when the
benchmark scores the answer text, otherwise "Done."). A perfect adapter scores 100% with it
on benchmarks whose ground truth is a call sequence (BFCL multi-turn).
"""

from __future__ import annotations

from unified.chatformat.toolcalls import render_tool_call
from unified.inference.base import ChatModel, PolicyOutput, PolicyRequest, SamplingConfig


class GoldPolicy(ChatModel):
    name = "gold"
    needs_context = True
    """The agent loop passes ``{"task", "adapter"}`` in each request's context."""

    def __init__(self, sampling: SamplingConfig = SamplingConfig()) -> None:
        super().__init__("gold", sampling)
        self._cache: dict[tuple[str, str], list] = {}

    @classmethod
    def from_spec(cls, spec, sampling: SamplingConfig, **options) -> "GoldPolicy":
        return cls(sampling=sampling)  # nothing to load: the adapter is the model

    def _turns(self, adapter, task) -> list:
        key = (task.benchmark, task.id)
        if key not in self._cache:
            self._cache[key] = adapter.gold_turns(task)
        return self._cache[key]

    def generate(self, requests: list[PolicyRequest]) -> list[PolicyOutput | Exception]:
        outputs: list[PolicyOutput | Exception] = []
        for request in requests:
            try:
                outputs.append(self._one(request))
            except Exception as exc:
                outputs.append(exc)
        return outputs

    def _one(self, request: PolicyRequest) -> PolicyOutput:
        adapter, task = request.context["adapter"], request.context["task"]
        turns = self._turns(adapter, task)
        messages = request.messages
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

