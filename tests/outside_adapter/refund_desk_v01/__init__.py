"""refund_desk_v01: the refund desk's adapter as it was written for adapter SDK 0.1 (unified 0.1.0).

It must keep running, with one deprecation line per old name, for as long as SDK 0.1's shims last
(removed in SDK 0.3; ``docs/adapters.md``, "Versions and the shim window"). It uses, as SDK 0.1
documented them: ``unified.contracts`` and ``unified.eval.aggregate`` (now ``unified.benchmarks``),
``AgentLimits.max_steps_per_user_turn`` (now ``max_steps_per_turn``: built, replaced and read here),
``open(task)`` and ``aggregate(results)`` without ``run`` (reading ``self.runs_requested``), and
``StopReason.MAX_TOKENS`` (now ``MAX_EPISODE_TOKENS``). The conversation itself (orders, simulated
customer, tools) is the current package's: the environment's contract did not change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from refund_desk import ORDERS, RefundDeskEnvironment
from unified.contracts import Adapter, AgentLimits, Environment, StopReason, Task
from unified.eval.aggregate import avg_at_k, partition, pass_pow_k, scores_by_task
from unified.types import Episode, EpisodeResult, ToolCall


@dataclass
class RefundDeskV01Config:
    """Settings as SDK 0.1 adapters named them."""

    refund_window_days: int = 30
    max_turns: int = 6
    max_steps_per_user_turn: int = 3


class RefundDeskV01Adapter(Adapter):
    name = "refund_desk_v01"
    suites = ("sdk_0_1",)  # its own suite, so --suite ood runs the current package only
    world_model_domain = "mcp"
    runs_default = 2
    Config = RefundDeskV01Config

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        tasks = [Task(id=f"refund_{o['order_id']}", benchmark=self.name, payload=dict(o)) for o in ORDERS]
        return tasks[:limit] if limit else tasks

    def open(self, task: Task) -> RefundDeskEnvironment:
        return RefundDeskEnvironment(task.payload, self.settings.refund_window_days)

    def agent_limits(self, limits: AgentLimits) -> AgentLimits:
        return dataclasses.replace(limits, max_turns=self.settings.max_turns,
                                   max_steps_per_user_turn=self.settings.max_steps_per_user_turn)

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        assert isinstance(env, RefundDeskEnvironment)
        last = next((m.content for m in reversed(episode.messages) if m.role == "assistant" and m.content), "")
        right_action = env.refunds == ([env.order["order_id"]] if env.eligible else [])
        ok = right_action and env.order["order_id"] in last and episode.stop_reason == "answer"
        limits = self.agent_limits(AgentLimits(max_steps_per_user_turn=self.settings.max_steps_per_user_turn))
        details = {"refunds": env.refunds, "out_of_tokens": episode.stop_reason == StopReason.MAX_TOKENS,
                   "agent_limits": {"max_turns": limits.max_turns,
                                    "max_steps_per_user_turn": limits.max_steps_per_user_turn}}
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=float(ok), passed=ok,
                             details=details)

    def aggregate(self, results: list[EpisodeResult]) -> dict[str, Any]:
        parts = partition(results)
        k = int(self.runs_requested or self.runs_default)
        by_task = scores_by_task(parts.scored)
        pass_pow = [pass_pow_k(len(v), sum(1 for s in v if s >= 1.0), k) for v in by_task.values()]
        return {"score": avg_at_k(by_task), "metric": f"pass rate (%), Avg@{k}",
                f"pass^{k}": 100.0 * sum(pass_pow) / len(pass_pow) if pass_pow else 0.0,
                "comparable": True, "not_comparable_because": []}

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        order_id = task.payload["order_id"]
        eligible = task.payload["delivered_days_ago"] <= self.settings.refund_window_days
        refund = [ToolCall(name="refund_order", arguments={"order_id": order_id}, id="gold_refund")]
        return [[ToolCall(name="get_order", arguments={"order_id": order_id}, id="gold_lookup")],
                refund if eligible else []]

    def gold_answer(self, task: Task) -> str | None:
        o = task.payload
        if o["delivered_days_ago"] <= self.settings.refund_window_days:
            return f"Done: {o['amount']:.2f} for order {o['order_id']} is refunded."
        return f"Sorry, order {o['order_id']} cannot be refunded: it is outside our refund window."
