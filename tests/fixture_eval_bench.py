"""A fixture benchmark in the adapter contract's format (for runner/loop tests, not a real benchmark).

Task ``echo_N``: the agent must call ``echo(text="N")``; score 1 when it did. ``crash_*`` tasks
raise inside ``step``. :class:`EchoModel` is a scripted chat model that solves it from the
conversation alone (for the loop's schedules without model weights). Steps sleep ``FIXTURE_STEP_SECONDS`` (env var) so a run can be killed mid-way.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

from unified.chatformat.toolcalls import render_tool_call
from unified.benchmarks.contract import Adapter, Environment, Task
from unified.inference.base import ChatModel, PolicyOutput
from unified.types import EpisodeResult, Message, Observation, ToolCall, ToolSpec


class FixtureEnv(Environment):
    def __init__(self, task: Task) -> None:
        super().__init__()
        self.task = task
        self.tools = [ToolSpec(name="echo", description="Echo text back.",
                               parameters={"type": "object", "properties": {"text": {"type": "string"}}})]
        self.system_prompt = "You are a test agent."
        self.first_user_message = f"Call echo with text {task.payload['n']}."
        self.seen: list[str] = []
        self.stopped = False

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        time.sleep(float(os.environ.get("FIXTURE_STEP_SECONDS", "0")))
        if self.task.id.startswith("crash"):
            raise RuntimeError("fixture environment crashed")
        out = []
        for call in tool_calls:
            self.seen.append(str(call.arguments.get("text")))
            out.append(Observation(call_id=call.id, content=f"echo: {call.arguments.get('text')}"))
        return out

    def stop(self) -> None:
        self.stopped = True


class FixtureAdapter(Adapter):
    name = "fixture_echo"

    def __init__(self, n: int = 6, crash: int = 0, **config) -> None:
        super().__init__(**config)
        self.n, self.crash = n, crash

    def tasks(self, split=None, limit=None):
        tasks = [Task(id=f"echo_{i}", benchmark=self.name, payload={"n": i}) for i in range(self.n)]
        tasks += [Task(id=f"crash_{i}", benchmark=self.name, payload={"n": i}) for i in range(self.crash)]
        return tasks[:limit] if limit else tasks

    def open(self, task, *, run=None):
        return FixtureEnv(task)

    def score(self, task, episode, env):
        ok = str(task.payload["n"]) in env.seen
        return EpisodeResult(benchmark=self.name, task_id=task.id, trial=episode.trial, score=float(ok), passed=ok)

    def gold_turns(self, task):
        return [[ToolCall(name="echo", arguments={"text": str(task.payload["n"])})]]


class DependentFixtureAdapter(FixtureAdapter):
    """Fixture tasks with ``depends_on`` chains, in the shape of BFCL memory questions: ``setup_G`` (not
    scored) comes first, ``question_G_K`` depends on it; ``chain_G`` depends on ``question_G_0``. The
    environment of a dependent task checks that what it depends on finished (a result line exists
    in the run directory), so a dependent task run apart from its dependencies fails its step."""

    name = "fixture_depends"

    def __init__(self, groups: int = 3, questions: int = 2, lone: int = 6, **config) -> None:
        super().__init__(n=lone, **config)
        self.groups, self.questions = groups, questions

    def tasks(self, split=None, limit=None):
        tasks = []
        for g in range(self.groups):
            tasks.append(Task(id=f"setup_{g}", benchmark=self.name, payload={"n": 100 + g}, scored=False))
            tasks += [Task(id=f"question_{g}_{k}", benchmark=self.name, payload={"n": 10 * g + k},
                           depends_on=[f"setup_{g}"]) for k in range(self.questions)]
            tasks.append(Task(id=f"chain_{g}", benchmark=self.name, payload={"n": 1000 + g},
                              depends_on=[f"question_{g}_0"]))
        tasks += super().tasks(split, None)
        return tasks[:limit] if limit else tasks

    def open(self, task, *, run=None):
        done = (run.work_dir / "done") if run and run.work_dir else None
        missing = [d for d in task.depends_on if done is None or not (done / d).exists()]
        if missing:
            raise RuntimeError(f"{task.id}: dependencies not run here: {missing}")
        env = FixtureEnv(task)
        env.done_dir = done
        return env

    def score(self, task, episode, env):
        result = super().score(task, episode, env)
        if env.done_dir is not None:
            env.done_dir.mkdir(parents=True, exist_ok=True)
            (env.done_dir / task.id).touch()
        if not task.scored:
            result.details["prereq"] = True
        return result


class EchoModel(ChatModel):
    """A scripted chat model for this fixture's format (no weights): in the first user turn it calls
    ``echo(text=N)`` with the N of "Call echo with text N." once, then answers "Done." (ends the
    turn), as the gold replay does; every later user turn gets "Done.". It reads only the
    conversation, as a model does; ``generate`` serves the rounds schedule."""

    name = "fixture_echo_model"

    def __init__(self) -> None:
        super().__init__("fixture_echo_model")

    @staticmethod
    def answer(messages: list[dict]) -> PolicyOutput:
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        match = re.search(r"Call echo with text (\S+?)\.", messages[users[0]]["content"]) if users else None
        acted = len(users) != 1 or any(m["role"] == "assistant" for m in messages[users[0] + 1:])
        if match and not acted:
            text = render_tool_call(ToolCall(name="echo", arguments={"text": match.group(1)}))
        else:
            text = "Done."
        return PolicyOutput(text="</think>\n\n" + text, finish_reason="stop")

    def generate(self, requests):
        return [self.answer(r.messages) for r in requests]


class StreamingEchoModel(EchoModel):
    """:class:`EchoModel` behind futures, answered on a thread of its own (as an engine answers)."""

    supports_continuous_batching = True

    def __init__(self) -> None:
        super().__init__()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="streaming-echo")

    def submit(self, request, *, continuous=None):
        return self.pool.submit(self._answer, request)

    def _answer(self, request):
        time.sleep(0.001)  # one "decode step"
        return self.answer(request.messages)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        super().close()
