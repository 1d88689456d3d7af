"""The agent loop's blocking calls run on workers: a slow start, user or judge holds back only its own episode.

Every test runs both policies (the fixture's scripted ``EchoModel``, answered by one ``generate`` call,
and the same model answered on a thread of its own behind ``submit``'s futures, as an engine answers). The gates are real ``threading.Event``s that only the
*other* episodes' delivery opens: a loop that ran the blocked call on its own thread would never
deliver those episodes, the gate would time out, and the test fails (it does on the loop of
commit 6d61e8f, where only ``env.step`` ran on workers).
"""

from __future__ import annotations

import threading
import time

import pytest

from fixture_eval_bench import EchoModel, FixtureAdapter, FixtureEnv, StreamingEchoModel
from unified.agent.loop import AgentLoop, Job
from unified.agent.replay import GoldReplayer

GATE_SECONDS = 5.0
"""How long a gated call waits for the other episodes before giving up (the old loop's failure)."""

SCHEDULES = ["rounds", "continuous"]


def _policy(scheduling: str) -> EchoModel:
    return StreamingEchoModel() if scheduling == "continuous" else EchoModel()


class GatedEnv(FixtureEnv):
    """Blocks in ``start`` or ``next_user_turn`` (as its adapter says) until its gate opens."""

    def __init__(self, task, adapter) -> None:
        super().__init__(task)
        self.adapter = adapter

    def start(self) -> None:
        self.adapter.wait_at("open", self.task.id)

    def next_user_turn(self, episode):
        self.adapter.wait_at("user", self.task.id)
        return None


class GatedAdapter(FixtureAdapter):
    """``gated`` task's call at ``where`` (open, user or score) waits until every other episode was delivered."""

    def __init__(self, where: str, gated: str = "echo_0", n: int = 3) -> None:
        super().__init__(n=n)
        self.where, self.gated, self.gate, self.opened_in_time = where, gated, threading.Event(), None

    def wait_at(self, where: str, task_id: str) -> None:
        if where == self.where and task_id == self.gated:
            self.opened_in_time = self.gate.wait(GATE_SECONDS)

    def open(self, task, *, run=None):
        return GatedEnv(task, self)

    def score(self, task, episode, env):
        self.wait_at("score", task.id)
        return super().score(task, episode, env)


@pytest.mark.parametrize("scheduling", SCHEDULES)
@pytest.mark.parametrize("where", ["open", "user", "score"])
def test_a_blocked_call_holds_back_only_its_own_episode(where, scheduling):
    adapter = GatedAdapter(where)
    tasks = adapter.tasks()
    delivered, threads = [], set()

    def on_result(result, episode):
        delivered.append(result.task_id)
        threads.add(threading.get_ident())
        if set(delivered) >= {"echo_1", "echo_2"}:
            adapter.gate.set()

    results = AgentLoop(adapter, _policy(scheduling), max_in_flight=3, scheduling=scheduling,
                        on_result=on_result).run([Job(t) for t in tasks])
    assert adapter.opened_in_time is True, f"the other episodes waited for echo_0's {where}"
    assert delivered[-1] == "echo_0" and sorted(delivered) == ["echo_0", "echo_1", "echo_2"]
    assert all(r.passed for r in results), [r.error for r in results]
    assert [r.task_id for r in results] == [t.id for t in tasks]  # returned in job order, not finish order
    assert threads == {threading.get_ident()}  # on_result only ever runs on the loop's (this) thread


class OneCallAtATimeEnv(FixtureEnv):
    """Records every call it gets (name, thread) and fails loudly when two overlap."""

    def __init__(self, task, adapter) -> None:
        super().__init__(task)
        self.adapter, self.lock, self.calls, self.follow_ups = adapter, threading.Lock(), [], 1

    def enter(self, name: str) -> None:
        if not self.lock.acquire(blocking=False):
            self.adapter.overlaps.append((self.task.id, name))
            self.lock.acquire()
        self.calls.append((name, threading.get_ident()))
        time.sleep(0.005)  # long enough for a second call to overlap, were one made

    def start(self) -> None:
        self.enter("start")
        self.lock.release()

    def step(self, tool_calls, message=None):
        self.enter("step")
        try:
            return super().step(tool_calls, message)
        finally:
            self.lock.release()

    def next_user_turn(self, episode):
        self.enter("user")
        try:
            if self.follow_ups:
                self.follow_ups -= 1
                return "Thanks. Anything else?"
            return None
        finally:
            self.lock.release()

    def stop(self) -> None:
        if self.calls and self.calls[-1][0] == "stop":
            return  # stop is idempotent
        self.enter("stop")
        super().stop()
        self.lock.release()


class OneCallAtATimeAdapter(FixtureAdapter):
    def __init__(self, n: int) -> None:
        super().__init__(n=n)
        self.envs, self.overlaps = [], []

    def open(self, task, *, run=None):
        env = OneCallAtATimeEnv(task, self)
        self.envs.append(env)
        return env

    def score(self, task, episode, env):
        env.enter("score")
        try:
            return super().score(task, episode, env)
        finally:
            env.lock.release()


@pytest.mark.parametrize("scheduling", SCHEDULES)
def test_one_environment_never_gets_two_calls_at_once_and_keeps_its_order(scheduling):
    adapter = OneCallAtATimeAdapter(n=6)
    results = AgentLoop(adapter, _policy(scheduling), max_in_flight=3, scheduling=scheduling).run(
        [Job(t) for t in adapter.tasks()])
    assert all(r.passed for r in results) and len(adapter.envs) == 6
    assert adapter.overlaps == []
    loop_thread = threading.get_ident()
    for env in adapter.envs:
        assert [name for name, _ in env.calls] == ["start", "step", "user", "user", "score", "stop"]
        assert all(thread != loop_thread for _, thread in env.calls)  # every blocking call ran on a worker


class FailingEnv(FixtureEnv):
    def start(self) -> None:
        if self.task.id == "echo_4":
            raise RuntimeError("sandbox failed to start")

    def next_user_turn(self, episode):
        if self.task.id == "echo_1":
            raise RuntimeError("simulated user fell over")
        return None


class FailingAdapter(FixtureAdapter):
    """echo_1: its user raises; echo_2: its judge raises; echo_3: open raises; echo_4: start raises."""

    def __init__(self) -> None:
        super().__init__(n=6)
        self.envs = {}

    def open(self, task, *, run=None):
        if task.id == "echo_3":
            raise RuntimeError("could not open the task")
        env = self.envs[task.id] = FailingEnv(task)
        return env

    def score(self, task, episode, env):
        if task.id == "echo_2":
            raise RuntimeError("judge unreachable")
        return super().score(task, episode, env)


@pytest.mark.parametrize("scheduling", SCHEDULES)
def test_an_exception_in_open_user_or_score_is_recorded_on_that_episode_only(scheduling):
    adapter = FailingAdapter()
    episodes = {}
    results = AgentLoop(adapter, _policy(scheduling), max_in_flight=4, scheduling=scheduling,
                        on_result=lambda r, e: episodes.__setitem__(e.task_id, e)).run(
        [Job(t) for t in adapter.tasks()])
    by_id = {r.task_id: r for r in results}
    assert "simulated user fell over" in by_id["echo_1"].error and episodes["echo_1"].stop_reason == "error"
    scoring = by_id["echo_2"]  # after the agent acted: a 0, counted and labelled (issue 42 R2)
    assert scoring.error is None and scoring.score == 0.0 and scoring.details["status"] == "scoring_failed_after_agent"
    assert "judge unreachable" in scoring.details["grader_error"]
    assert "could not open the task" in by_id["echo_3"].error
    assert "sandbox failed to start" in by_id["echo_4"].error
    assert by_id["echo_0"].passed and by_id["echo_5"].passed
    assert all(env.stopped for env in adapter.envs.values())  # also the one whose start failed


class SlowScoreAdapter(FixtureAdapter):
    """``echo_1`` depends on ``echo_0``, whose judge takes a moment: echo_1 must open after echo_0 closed."""

    def __init__(self) -> None:
        super().__init__(n=3)
        self.events = []

    def tasks(self, split=None, limit=None):
        tasks = super().tasks(split, limit)
        tasks[1].depends_on = ["echo_0"]
        return tasks

    def open(self, task, *, run=None):
        self.events.append(("open", task.id))
        env = FixtureEnv(task)
        env.stop = lambda: self.events.append(("stop", task.id))
        return env

    def score(self, task, episode, env):
        if task.id == "echo_0":
            time.sleep(0.2)
        env.seen.append(str(task.payload["n"]))
        return super().score(task, episode, env)


@pytest.mark.parametrize("scheduling", SCHEDULES)
def test_a_dependent_task_opens_only_after_its_dependency_was_scored_and_stopped(scheduling):
    adapter = SlowScoreAdapter()
    results = AgentLoop(adapter, _policy(scheduling), max_in_flight=3, scheduling=scheduling).run(
        [Job(t) for t in adapter.tasks()])
    assert all(r.passed for r in results)
    assert adapter.events.index(("stop", "echo_0")) < adapter.events.index(("open", "echo_1"))
    assert adapter.events.index(("open", "echo_2")) < adapter.events.index(("stop", "echo_0"))  # echo_2 did not wait


def test_an_exception_leaving_the_loop_still_stops_every_environment():
    adapter = OneCallAtATimeAdapter(n=4)

    def on_result(result, episode):
        raise OSError("disk full")  # the crash record cannot be written either: run raises

    with pytest.raises(OSError, match="disk full"):
        AgentLoop(adapter, GoldReplayer(), max_in_flight=4, on_result=on_result).run([Job(t) for t in adapter.tasks()])
    assert adapter.envs and all(env.stopped for env in adapter.envs)


@pytest.mark.parametrize("scheduling", SCHEDULES)
def test_a_slow_judge_does_not_keep_the_next_episode_from_starting(scheduling):
    adapter = GatedAdapter("score", n=2)  # echo_0's judge waits until echo_1 was delivered
    delivered = []

    def on_result(result, episode):
        delivered.append(result.task_id)
        if "echo_1" in delivered:
            adapter.gate.set()

    results = AgentLoop(adapter, _policy(scheduling), max_in_flight=1, scheduling=scheduling,
                        on_result=on_result).run([Job(t) for t in adapter.tasks()])
    assert adapter.opened_in_time is True and delivered == ["echo_1", "echo_0"]
    assert all(r.passed for r in results)
