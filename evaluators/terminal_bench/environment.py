"""A Terminal-Bench task as an agent environment, in the style of the Terminus-2 harness.

Terminus-2 (the benchmark's reference agent) drives one tmux session: the model sends
keystrokes, waits a chosen number of seconds, and sees the terminal screen. Here that is two
tools: ``send_keys(keystrokes, duration, press_enter)`` (every ``\\n`` presses Enter; a bare tmux key
name such as ``C-c`` presses that key; the wait ends early once the shell is idle again) and
``task_complete()``. One deviation from Terminus-2, where the model must end a command with
``\\n``: tool-call formats that strip a parameter's surrounding whitespace (the Qwen3.5 XML
form does) cannot carry that newline, so Enter is pressed after the keystrokes unless
``press_enter`` is false (never after a bare key name). The observation is the visible
screen. The task's ``[agent] timeout_sec`` bounds the whole episode.

Verification (``run_verifier``) follows the benchmark: after the agent stops, the task's
``tests/`` folder is copied to ``/tests`` and ``bash /tests/test.sh`` runs in the same
environment with the task's ``[verifier]`` timeout and env; the reward is the number in
``/logs/verifier/reward.txt`` (or ``reward`` in ``reward.json``); a verifier that times out or
writes no reward scores 0. Before the verifier starts, every process the agent left running is
killed, and that none is left is checked (otherwise the episode is not verified and scores 0
with that error); ``/logs/verifier`` is then made a fresh empty directory, so nothing of the
agent's can write or pre-place the reward.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from unified.eval.adapter import Environment
from unified.execution import EnvironmentSpec, ExecutionBackend, ExecutionSession, TmuxTerminal
from unified.types import Observation, ToolCall, ToolSpec

from evaluators.terminal_bench.tasks import TBTask

MAX_WAIT_S = 300.0
"""Longest single wait a ``send_keys`` call may ask for (Terminus-2 caps durations too)."""

SEND_KEYS = ToolSpec(
    name="send_keys",
    description=("Type keystrokes into the terminal (a tmux session), then wait up to `duration` seconds and "
                 "return the screen. Every newline in `keystrokes` presses Enter, and Enter is pressed at the end unless "
                 "press_enter is false. "
                 "A value that is exactly a tmux key name (C-c, C-d, Escape, Up, Tab ...) presses that key. "
                 "The wait ends early once the shell prompt is back."),
    parameters={"type": "object", "properties": {
        "keystrokes": {"type": "string", "description": "Text to type, e.g. \"ls -la\\n\", or a key name like C-c."},
        "duration": {"type": "number", "description": "Seconds to wait for the output (default 1; at most 300)."},
        "press_enter": {"type": "boolean", "description": "Press Enter after the keystrokes (default true; "
                        "set false to type without submitting)."}},
        "required": ["keystrokes"]})
TASK_COMPLETE = ToolSpec(
    name="task_complete",
    description="Call once the task is fully done; the terminal is then handed over for grading.",
    parameters={"type": "object", "properties": {}})

SYSTEM_PROMPT = """You are an AI assistant solving a command-line task in a Linux environment. You work in a \
terminal (a tmux session) through tools:

- send_keys(keystrokes, duration, press_enter): types into the terminal, presses Enter (unless press_enter \
is false) and shows you the screen afterwards. Use short durations for quick commands and longer ones for builds or downloads; you \
can always wait more by sending an empty string.
- task_complete(): call when the task is done. You cannot act after that.

Work step by step: look at the current state, run commands, check their output, and verify your result \
before calling task_complete. Do not use interactive editors that need a full screen when a command will do."""


class TerminalBenchEnvironment(Environment):
    """One task in one execution session with a tmux terminal."""

    def __init__(self, task: TBTask, backend: ExecutionBackend, exec_timeout_s: float = 180.0,
                 width: int = 160, height: int = 40) -> None:
        super().__init__()
        self.task, self.backend = task, backend
        self.exec_timeout_s, self.width, self.height = exec_timeout_s, width, height
        self.session: ExecutionSession | None = None
        self.terminal: TmuxTerminal | None = None
        self.tools = [SEND_KEYS, TASK_COMPLETE]
        self.system_prompt = SYSTEM_PROMPT
        self._started_at = 0.0
        self.completed = False

    def spec(self) -> EnvironmentSpec:
        t = self.task
        return EnvironmentSpec(image=t.docker_image, build_context=Path(t.build_context) if t.build_context else None,
                               network=t.allow_internet, cpus=t.cpus, memory_mb=t.memory_mb,
                               timeout_s=self.exec_timeout_s, build_timeout_s=t.build_timeout_s,
                               extra_dirs=["/tests", "/logs/verifier", "/logs/agent"], name=t.id)

    def start(self) -> None:
        self.session = self.backend.start(self.spec())
        self.terminal = TmuxTerminal(self.session, width=self.width, height=self.height)
        self.terminal.start()
        self.terminal.wait(2.0)
        self._started_at = time.monotonic()
        self.metadata.update({"backend": self.session.backend, "execution": dict(self.session.info),
                              "agent_timeout_s": self.task.agent_timeout_s})
        self.first_user_message = (f"Task:\n{self.task.instruction}\n\nCurrent terminal screen:\n"
                                   f"{self.terminal.capture()}")

    def stop(self) -> None:
        if self.session is not None:
            try:
                self.session.close()
            except Exception:
                pass
            self.session = None

    # -- agent actions -------------------------------------------------------------------

    def step(self, tool_calls: list[ToolCall]) -> list[Observation]:
        out = []
        for call in tool_calls:
            out.append(self._one(call))
        return out

    def _time_left(self) -> float:
        return self.task.agent_timeout_s - (time.monotonic() - self._started_at)

    def _one(self, call: ToolCall) -> Observation:
        if call.parse_error:
            return Observation(call.id, f"Malformed tool call: {call.parse_error}", is_error=True)
        if self.done:
            return Observation(call.id, "The episode is over; no more actions are accepted.", is_error=True)
        if self._time_left() <= 0:
            self.done = True
            self.metadata["agent_timed_out"] = True
            return Observation(call.id, f"Time limit of {self.task.agent_timeout_s:.0f}s reached; the task is "
                               "handed over for grading.", is_error=True)
        if call.name == "task_complete":
            self.done = self.completed = True
            return Observation(call.id, "Task marked complete.")
        if call.name != "send_keys":
            return Observation(call.id, f"Unknown tool {call.name!r}; use send_keys or task_complete.", is_error=True)
        keys = call.arguments.get("keystrokes")
        if not isinstance(keys, str):
            return Observation(call.id, "send_keys needs a string argument `keystrokes`.", is_error=True)
        try:
            duration = float(call.arguments.get("duration", 1.0))
        except (TypeError, ValueError):
            return Observation(call.id, "`duration` must be a number of seconds.", is_error=True)
        duration = max(0.0, min(duration, MAX_WAIT_S, max(self._time_left(), 0.0)))
        press_enter = call.arguments.get("press_enter", True)
        if isinstance(press_enter, str):
            press_enter = press_enter.strip().lower() not in ("false", "0", "no")
        if press_enter and keys and not keys.endswith("\n") and not TmuxTerminal.is_key_name(keys):
            keys += "\n"
        assert self.terminal is not None
        self.terminal.send_keys(keys)
        waited = self.terminal.wait(duration)
        screen = self.terminal.capture()
        return Observation(call.id, f"Current terminal screen:\n{screen}", metadata={"waited_s": round(waited, 2)})

    # -- grading -------------------------------------------------------------------------

    def run_verifier(self) -> dict[str, Any]:
        """Copy tests in, run ``tests/test.sh``, read the reward (see the module docstring)."""
        assert self.session is not None
        session = self.session
        # nothing of the agent's may run during verification or have left a reward behind
        stopped = session.stop_agent_processes()
        if not stopped["ok"]:
            return {"reward": None, "backend": session.backend, "reward_error": "the agent's processes could not all "
                    f"be stopped before verification ({stopped['detail']}); not verified"}
        session.fresh_dir("/logs/verifier")
        session.copy_in(Path(self.task.path) / "tests", "/tests")
        res = session.exec(["bash", "/tests/test.sh"], timeout_s=self.task.verifier_timeout_s,
                           env=self.task.verifier_env)
        details: dict[str, Any] = {"verifier_exit_code": res.exit_code, "verifier_timed_out": res.timed_out,
                                   "verifier_seconds": round(res.duration_s, 2),
                                   "verifier_output": res.output()[-4000:], "backend": session.backend}
        reward = None
        try:
            reward = float(session.read_file("/logs/verifier/reward.txt").decode().strip().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            try:
                data = json.loads(session.read_file("/logs/verifier/reward.json"))
                reward = float(data["reward"])
                details["reward_details"] = data.get("details")
            except (FileNotFoundError, ValueError, KeyError, TypeError):
                details["reward_error"] = "no readable /logs/verifier/reward.txt or reward.json"
        details["reward"] = reward
        return details
