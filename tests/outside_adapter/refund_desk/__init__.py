"""refund_desk: a tiny tau2-style customer-service benchmark, written as an outside adapter of unified.

A customer writes in about an order. The agent (the checkpoint under test) opens with a greeting,
looks the order up, and, once the customer confirms, refunds it when the shop's policy allows
(delivered within ``refund_window_days``), or explains why not. A rule-based simulated customer
answers the agent's turns; nothing here loads a model.

The package imports only ``unified.benchmarks.contract`` (the contract), ``unified.types`` (the records) and
``unified.benchmarks.aggregate`` (shared averages): it is what a benchmark outside the repository looks
like. ``docs/adapters.md`` walks through it; ``tests/test_outside_adapter.py`` installs it into a
temporary directory and runs it inside ``python -m unified.eval --suite ood``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from unified.benchmarks import Adapter, AgentLimits, Environment, RunContext, Task, avg_at_k, partition, pass_pow_k, scores_by_task
from unified.types import Episode, EpisodeResult, Message, Observation, ToolCall, ToolSpec

ORDERS = [
    {"order_id": "A100", "customer": "Ana", "item": "wireless headphones", "amount": 42.5, "delivered_days_ago": 5},
    {"order_id": "B200", "customer": "Ben", "item": "desk lamp", "amount": 19.0, "delivered_days_ago": 45},
    {"order_id": "C300", "customer": "Chen", "item": "hiking boots", "amount": 88.0, "delivered_days_ago": 29},
    {"order_id": "D400", "customer": "Dara", "item": "coffee grinder", "amount": 35.25, "delivered_days_ago": 31},
]
"""The benchmark's data: one task an order (a real benchmark reads its own files here)."""

GREETING = "Hello, you have reached the refund desk. How can I help you today?"
CONFIRM = "Yes, I confirm. Please go ahead with order {order_id}."
TOOLS = [
    ToolSpec(name="get_order", description="Look an order up by its id.",
             parameters={"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
    ToolSpec(name="refund_order", description="Refund an order in full (only with the customer's confirmation).",
             parameters={"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
]


@dataclass
class RefundDeskConfig:
    """Settings of refund_desk (``--set benchmarks.refund_desk.KEY=VALUE``); unknown keys are errors."""

    refund_window_days: int = 30
    """Orders delivered at most this many days ago can be refunded (the shop's policy)."""
    max_turns: int = 6
    """Policy calls per episode, the protocol's own budget (tau2-bench caps an episode's steps too)."""
    max_steps_per_turn: int = 3
    """Policy calls within one customer turn."""


class RefundDeskEnvironment(Environment):
    """One customer conversation: the order database, the policy, the simulated customer."""

    def __init__(self, order: dict[str, Any], window_days: int) -> None:
        super().__init__()
        self.order, self.window_days = order, window_days
        self.tools = list(TOOLS)
        self.system_prompt = (f"You work at a shop's refund desk. Policy: an order can be refunded in full when it "
                              f"was delivered at most {window_days} days ago. Look the order up first, and refund "
                              "only after the customer has confirmed. Do not ask a question and act in the same "
                              "message: wait for the answer.")
        self.assistant_greeting = GREETING
        self.first_user_message = f"Hi, this is {order['customer']}. I'd like a refund for order {order['order_id']}."
        self.refunds: list[str] = []
        self.looked_up = False
        self.confirmed = False
        self.refused_while_asking = 0

    @property
    def eligible(self) -> bool:
        return self.order["delivered_days_ago"] <= self.window_days

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        """Execute the calls. ``message`` is the assistant turn that made them: a refund in a message
        that also asks the customer something is refused (the policy says to wait for the answer)."""
        asking = bool(message and "?" in (message.content or ""))
        return [self._one(call, asking) for call in tool_calls]

    def _one(self, call: ToolCall, asking: bool) -> Observation:
        if call.parse_error:
            return Observation(call.id, f"Malformed call: {call.parse_error}", is_error=True)
        if call.arguments.get("order_id") != self.order["order_id"]:
            return Observation(call.id, f"No order {call.arguments.get('order_id')!r}.", is_error=True)
        if call.name == "get_order":
            self.looked_up = True
            return Observation(call.id, json.dumps(self.order))
        if call.name == "refund_order":
            if asking:
                self.refused_while_asking += 1
                return Observation(call.id, "Refused: you asked the customer a question in this message; "
                                            "wait for the answer before acting.", is_error=True)
            if not (self.looked_up and self.confirmed):
                return Observation(call.id, "Refused: look the order up and get the customer's confirmation first.",
                                   is_error=True)
            if not self.eligible:
                return Observation(call.id, f"Refused: delivered {self.order['delivered_days_ago']} days ago, "
                                            f"outside the {self.window_days}-day window.", is_error=True)
            if self.refunds:
                return Observation(call.id, "Already refunded.", is_error=True)
            self.refunds.append(self.order["order_id"])
            return Observation(call.id, f"Refunded {self.order['amount']:.2f} for order {self.order['order_id']}.")
        return Observation(call.id, f"No tool named {call.name!r}.", is_error=True)

    def next_user_turn(self, episode: Episode) -> str | None:
        """The simulated customer: confirms once after the agent's first answer, then is done."""
        if self.confirmed:
            return None
        self.confirmed = True
        return CONFIRM.format(order_id=self.order["order_id"])


class RefundDeskAdapter(Adapter):
    """refund_desk: 4 conversations, pass^k over ``runs_default`` trials (tau2-bench's reliability view)."""

    name = "refund_desk"
    suites = ("ood",)
    world_model_domain = "mcp"
    runs_default = 2
    Config = RefundDeskConfig

    def tasks(self, split: str | None = None, limit: int | None = None) -> list[Task]:
        tasks = [Task(id=f"refund_{o['order_id']}", benchmark=self.name, payload=dict(o)) for o in ORDERS]
        return tasks[:limit] if limit else tasks

    def open(self, task: Task, *, run: RunContext = RunContext()) -> RefundDeskEnvironment:
        return RefundDeskEnvironment(task.payload, self.settings.refund_window_days)

    def agent_limits(self, limits: AgentLimits) -> AgentLimits:
        """The protocol's budgets replace the run's turn limits (tokens and wall time stay the run's)."""
        return dataclasses.replace(limits, max_turns=self.settings.max_turns,
                                   max_steps_per_turn=self.settings.max_steps_per_turn)

    def score(self, task: Task, episode: Episode, env: Environment) -> EpisodeResult:
        """1 when the right thing happened (refunded exactly once iff eligible) and the last assistant
        message tells the customer the outcome (mentions the order id), else 0."""
        assert isinstance(env, RefundDeskEnvironment)
        last = next((m.content for m in reversed(episode.messages) if m.role == "assistant" and m.content), "")
        right_action = env.refunds == ([env.order["order_id"]] if env.eligible else [])
        told = env.order["order_id"] in last
        ok = right_action and told and episode.stop_reason == "answer"
        limits = self.agent_limits(AgentLimits())
        details = {"eligible": env.eligible, "refunds": env.refunds, "told_customer": told,
                   "refused_while_asking": env.refused_while_asking, "stop_reason": episode.stop_reason,
                   "agent_limits": {"max_turns": limits.max_turns,
                                    "max_steps_per_turn": limits.max_steps_per_turn},
                   "policy_calls": len(episode.steps)}
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=float(ok), passed=ok,
                             details=details)

    def aggregate(self, results: list[EpisodeResult], *, run: RunContext = RunContext()) -> dict[str, Any]:
        """Pass rate (Avg@k, per task over trials then over tasks) and pass^k with k the trials asked for."""
        parts = partition(results)
        k = run.trials(self)
        by_task = scores_by_task(parts.scored)
        pass_pow = [pass_pow_k(len(v), sum(1 for s in v if s >= 1.0), k) for v in by_task.values()]
        reasons = [] if k >= self.runs_default else [f"pass^{k} instead of the protocol's pass^{self.runs_default}"]
        return {"score": avg_at_k(by_task), "metric": f"pass rate (%), Avg@{k}",
                f"pass^{k}": 100.0 * sum(pass_pow) / len(pass_pow) if pass_pow else 0.0,
                "n_tasks": len(by_task), "comparable": True, "not_comparable_because": reasons}

    def gold_turns(self, task: Task) -> list[list[ToolCall]]:
        """Turn 1: look the order up; turn 2 (after the customer confirms): refund it when eligible."""
        order_id = task.payload["order_id"]
        eligible = task.payload["delivered_days_ago"] <= self.settings.refund_window_days
        refund = [ToolCall(name="refund_order", arguments={"order_id": order_id}, id="gold_refund")]
        return [[ToolCall(name="get_order", arguments={"order_id": order_id}, id="gold_lookup")],
                refund if eligible else []]

    def gold_answer(self, task: Task) -> str | None:
        o = task.payload
        if o["delivered_days_ago"] <= self.settings.refund_window_days:
            return f"Done: {o['amount']:.2f} for order {o['order_id']} is refunded."
        return (f"Sorry, order {o['order_id']} was delivered {o['delivered_days_ago']} days ago, outside our "
                f"{self.settings.refund_window_days}-day refund window, so it cannot be refunded.")
