"""A Terminal-Bench task as a tool-calling agent environment (``agent=tool_calling``).

The default agent is harbor's Terminus-2 itself (:mod:`.terminus`, a subclass of this environment
that shares its session, oracle and verifier). This one is the tool-calling alternative in its
style: Terminus-2 drives one tmux session, the model sends keystrokes, waits a chosen number of
seconds, and sees the terminal screen. Here that is two tools:
``send_keys(keystrokes, duration, press_enter)`` (every ``\\n`` presses Enter; a bare tmux key name such as ``C-c`` presses that key; the wait ends early once the typed command has finished) and
``task_complete()``. One deviation from Terminus-2, where the model must end a command with
``\\n``: tool-call formats that strip a parameter's surrounding whitespace (the Qwen3.5 XML
form does) cannot carry that newline, so Enter is pressed after the keystrokes unless
``press_enter`` is false (never after a bare key name). The observation is the visible
screen. The task's ``[agent] timeout_sec`` bounds the whole episode.

A command's end is told by the terminal's completion marker (see
:mod:`unified.execution.tmux`): a ``send_keys`` call returns as soon as the command line it
typed has finished (its exit code goes into the observation's metadata), never because the
pane's foreground process happens to be a shell; otherwise after ``duration`` seconds.

Verification (``run_verifier``) follows Harbor's verifier: after the agent stops, the task's
``tests/`` folder is copied to ``/tests`` and ``bash /tests/test.sh`` runs in the same
environment (output to ``/logs/verifier/test-stdout.txt`` as well) with the task's
``[verifier]`` timeout and env. The reward is read in Harbor's order: ``reward.json`` first
(its numeric ``reward``; the other numeric keys are kept as ``rewards``; when it has no
``reward`` key, ``reward.txt`` supplies it), else ``reward.txt``. A verifier that times out or
writes no reward scores 0 with ``reward_error`` saying so. As in Harbor, the processes the agent
(or the oracle) left running keep running while the verifier runs (a task's answer can be a
service) where the session can run the verifier out of their reach
(:meth:`~unified.execution.ExecutionSession.exec_private_verifier`, docker and podman:
``/logs/verifier``, ``/tests`` and the verifier's home are private to it, see
:mod:`unified.execution.verifier`). Elsewhere (``local``, apptainer) every process the agent left
running is killed first, and that none is left is checked (otherwise the episode is not verified
and scores 0 with that error); ``/logs/verifier`` is then made a fresh empty directory, so nothing
of the agent's can write or pre-place the reward. ``agent_processes`` in the result says which. The verifier runs
with :meth:`~unified.execution.ExecutionSession.verifier_env` under the task's own env: a fresh
``HOME`` outside the working directory, Python's user site off, no agent-writable ``PATH`` entry,
so nothing the agent planted (a ``usercustomize.py`` in its home) runs inside the verifier.
The programs the verifier runs come from the agent's system, though (``bash``, ``python3``, ``curl``):
where the session can compare that system with its image (docker, podman: the engine's diff, before
and after the verifier) an episode whose agent changed one of them (a ``bash`` that writes reward 1
when its argv names ``test.sh``, an ``/etc/ld.so.preload``) scores 0 with ``stop_reason`` and
``tampered`` saying what changed (Harbor trusts them; see docs/containers.md).

The oracle (``gold``) gets the task's whole ``solution/`` folder at ``/solution``, as Harbor's
oracle agent uploads it, and runs ``solve.sh`` from the terminal with ``[solution] env``; the
folder is copied in only for an episode whose adapter was asked for the gold solution.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from unified.benchmarks.contract import Environment
from unified.execution import EnvironmentSpec, ExecutionBackend, ExecutionSession, TmuxTerminal
from unified.execution.verifier import PrivateRun
from unified.types import Message, Observation, ToolCall, ToolSpec

from evaluators.terminal_bench.tasks import TBTask

INSTALL_TMUX = ("(command -v apt-get && (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y tmux)) "
                "|| (command -v apk && apk add --no-cache tmux bash) || (command -v dnf && dnf install -y tmux) "
                "|| (command -v yum && yum install -y tmux)")
"""Best effort at start, when the task's image has no tmux and the network is on."""

MAX_WAIT_S = 300.0
"""Longest single wait a ``send_keys`` call may ask for (Terminus-2 caps durations too)."""
KEPT_RUNNING = "kept running during verification, as Harbor leaves them (the verifier ran out of their reach)"
STOPPED = "stopped before verification (Harbor leaves them running)"
TAMPERED = ("the agent changed the verifier's toolchain (compared with the image; Harbor would trust it), "
            "scored 0")

SEND_KEYS = ToolSpec(
    name="send_keys",
    description=("Type keystrokes into the terminal (a tmux session), then wait up to `duration` seconds and "
                 "return the screen. Every newline in `keystrokes` presses Enter, and Enter is pressed at the end unless "
                 "press_enter is false. "
                 "A value that is exactly a tmux key name (C-c, C-d, Escape, Up, Tab ...) presses that key. "
                 "The wait ends early once the command has finished."),
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
                 width: int = 160, height: int = 40, *, image: str | None = None, build_context: str | None = None,
                 network: bool = True, network_source: str = "", oracle_requested=None) -> None:
        super().__init__()
        self.task, self.backend = task, backend
        self.exec_timeout_s, self.width, self.height = exec_timeout_s, width, height
        self.session: ExecutionSession | None = None
        self.terminal: TmuxTerminal | None = None
        self.tools = [SEND_KEYS, TASK_COMPLETE]
        self.system_prompt = SYSTEM_PROMPT
        self._started_at = 0.0
        self.completed = False
        self.image, self.build_context = image, build_context
        self.network, self.network_source = network, network_source
        self.oracle_requested = oracle_requested or (lambda: False)
        self.solution_installed = False
        self.verifier_files: PrivateRun | None = None
        self.setup_changes: set[str] = set()
        """The toolchain changes our setup made before the agent acted (:meth:`record_setup`)."""
        self.prepared_verifier_env: dict[str, str] = {}
        """The verifier's environment, made by :meth:`start_session` before the agent acts."""

    def spec(self) -> EnvironmentSpec:
        t = self.task
        extra = ["/tests", "/logs/verifier", "/logs/agent"] + (["/solution"] if self.backend.name == "local" else [])
        return EnvironmentSpec(image=self.image, build_context=Path(self.build_context) if self.build_context else None,
                               workdir=t.workdir, env=dict(t.environment_env), network=self.network, cpus=t.cpus,
                               memory_mb=t.memory_mb, timeout_s=self.exec_timeout_s, build_timeout_s=t.build_timeout_s,
                               extra_dirs=extra, name=t.id)

    def start(self) -> None:
        self.start_session()
        self.start_terminal()
        self.record_setup()
        self._started_at = time.monotonic()
        self.first_user_message = (f"Task:\n{self.task.instruction}\n\nCurrent terminal screen:\n"
                                   f"{self.terminal.capture()}")

    def record_setup(self) -> None:
        """Before the agent's first action: what our own setup changed in the verifier's toolchain (tmux installed
        into an image without it), so that only the agent's changes count as tampering."""
        assert self.session is not None
        self.setup_changes = set(self.session.toolchain_changes() or [])

    def start_session(self) -> None:
        """The task's sandbox or container, with tmux in it, and the run facts in ``metadata``."""
        self.session = self.backend.start(self.spec())
        # what the private verifier needs is made now, before the agent acts (a mktemp it replaced, a /tmp it made
        # read-only, cannot stop it later); its HOME becomes a fresh private directory when it runs
        self.prepared_verifier_env = self.session.verifier_env()
        self._ensure_tmux()
        self.metadata.update({"backend": self.session.backend, "execution": dict(self.session.info),
                              "agent_timeout_s": self.task.agent_timeout_s, "network": self.network,
                              "network_source": self.network_source, "image": self.image,
                              "built_from": self.build_context, "task_warnings": list(self.task.warnings)})

    def start_terminal(self) -> None:
        """The tool-calling agent's tmux terminal (:class:`unified.execution.TmuxTerminal`)."""
        assert self.session is not None
        self.terminal = TmuxTerminal(self.session, width=self.width, height=self.height)
        self.terminal.start()
        self.terminal.wait(5.0)

    def _ensure_tmux(self) -> None:
        """Install tmux when the image lacks it and the network is on (Harbor's agents do the same)."""
        assert self.session is not None
        if self.session.exec(["sh", "-c", "command -v tmux"], timeout_s=30).ok or not self.network:
            return
        res = self.session.exec(["sh", "-c", INSTALL_TMUX], timeout_s=600, workdir="/")
        self.metadata["tmux_installed"] = res.ok
    def stop(self) -> None:
        if self.session is not None:
            try:
                self.session.close()
            except Exception:
                pass
            self.session = None

    # -- agent actions -------------------------------------------------------------------

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        if not self.solution_installed and self.oracle_requested():
            self.install_solution()
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
        return Observation(call.id, f"Current terminal screen:\n{screen}",
                           metadata={"waited_s": round(waited, 2), "exit_code": self.terminal.last_exit_code})

    def install_solution(self) -> None:
        """Copy the task's whole ``solution/`` to ``/solution`` (the oracle's upload, as Harbor does it)."""
        assert self.session is not None
        source = Path(self.task.path) / "solution"
        if not source.is_dir():
            raise FileNotFoundError(f"{self.task.id}: no solution/ folder")
        if self.backend.name != "local":
            self.session.exec(["mkdir", "-p", "/solution"], timeout_s=30, workdir="/")
        self.session.copy_in(source, "/solution")
        self.solution_installed = True
        self.metadata["oracle"] = True

    # -- grading -------------------------------------------------------------------------

    def run_verifier(self) -> dict[str, Any]:
        """Copy tests in, run ``tests/test.sh``, read the reward (see the module docstring); 0 and ``tampered``
        when the agent changed the verifier's toolchain (the engine's diff against the image, before and after)."""
        assert self.session is not None
        before = self.session.toolchain_changes()
        details = self._run_verifier()
        after = self.session.toolchain_changes(before_verifier=False)  # what a process left running did meanwhile
        changes = [c for c in dict.fromkeys([*(before or []), *(after or [])]) if c not in self.setup_changes]
        if before is None and after is None:
            details["toolchain_checked"] = False
        elif changes:
            details.update({"reward_claimed": details.get("reward"), "reward": 0.0, "stop_reason": "tampered",
                            "tampered": f"{TAMPERED}: {', '.join(changes[:40])}"
                                        + (f" and {len(changes) - 40} more" if len(changes) > 40 else "")})
        return details

    def _run_verifier(self) -> dict[str, Any]:
        session = self.session
        assert session is not None
        # fresh HOME (private to the verifier), no user site (see there); made before the agent acted
        env = {**(self.prepared_verifier_env or session.verifier_env()), **self.task.verifier_env}
        tests = Path(self.task.path) / "tests"
        private = session.exec_private_verifier(
            ["bash", "-c", "bash /tests/test.sh 2>&1 | tee /logs/verifier/test-stdout.txt; exit ${PIPESTATUS[0]}"],
            out_dir="/logs/verifier", private_dirs=["/tests", env["HOME"]], files={"/tests": tests},
            timeout_s=self.task.verifier_timeout_s, env=env)
        if not isinstance(private, str):
            self.verifier_files = private
            base = {"backend": session.backend, "network": self.network, "agent_processes": KEPT_RUNNING}
            if private.failure():
                return {**base, "reward": None, "reward_error": private.failure()}
            details = {**base, "verifier_exit_code": private.exit_code, "verifier_timed_out": private.timed_out,
                       "verifier_seconds": round(private.duration_s, 2), "verifier_output": private.output()[-4000:]}
            details.update(read_reward(self.read_verifier_file))
            return details
        # this session cannot keep the verifier out of their reach: nothing of the agent's may run during
        # verification or have left a reward behind
        stopped = session.stop_agent_processes()
        if not stopped["ok"]:
            return {"reward": None, "backend": session.backend, "reward_error": "the agent's processes could not all "
                    f"be stopped before verification ({stopped['detail']}); not verified"}
        session.fresh_dir("/logs/verifier")
        session.fresh_dir("/tests")  # in a container the agent could have left a conftest.py there
        session.copy_in(tests, "/tests")
        env = {**session.verifier_env(), **self.task.verifier_env}  # a new HOME, made now that none of theirs runs
        res = session.exec(["bash", "-c", "bash /tests/test.sh 2>&1 | tee /logs/verifier/test-stdout.txt; "
                            "exit ${PIPESTATUS[0]}"], timeout_s=self.task.verifier_timeout_s, env=env)
        details: dict[str, Any] = {"verifier_exit_code": res.exit_code, "verifier_timed_out": res.timed_out,
                                   "verifier_seconds": round(res.duration_s, 2),
                                   "verifier_output": res.output()[-4000:], "backend": session.backend,
                                   "network": self.network, "agent_processes": f"{STOPPED} ({private})"}
        details.update(read_reward(self.read_verifier_file))
        return details

    def read_verifier_file(self, path: str) -> bytes:
        """A file the verifier wrote (under ``/logs/verifier``): from its private run, else from the session."""
        if self.verifier_files is not None:
            return self.verifier_files.read(path, "/logs/verifier")
        assert self.session is not None
        return self.session.read_file(path)


def read_reward(read: ExecutionSession | Callable[[str], bytes]) -> dict[str, Any]:
    """``{"reward", "rewards", "reward_source"}`` or ``{"reward": None, "reward_error"}``, in Harbor's order.

    ``reward.json`` first: an object whose numeric values are the rewards (``rewards``), with
    ``reward`` the headline; without a ``reward`` key, ``reward.txt`` supplies it. Then
    ``reward.txt`` alone (one number). ``reward_source`` names the file the headline came from.
    """
    if isinstance(read, ExecutionSession):
        read = read.read_file

    def text_reward() -> float:
        raw = read("/logs/verifier/reward.txt").decode(errors="replace").strip()
        if not raw:
            raise ValueError("reward.txt is empty")
        return float(raw)

    try:
        raw_json = read("/logs/verifier/reward.json")
    except FileNotFoundError:
        raw_json = None
    if raw_json is not None:
        try:
            parsed = json.loads(raw_json)
        except ValueError as exc:
            return {"reward": None, "reward_error": f"reward.json is not JSON: {exc}"}
        if not isinstance(parsed, dict):
            return {"reward": None, "reward_error": "reward.json must be an object"}
        rewards = {k: float(v) for k, v in parsed.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        source = "reward.json"
        if "reward" not in rewards:
            try:
                rewards["reward"], source = text_reward(), "reward.txt"  # the headline's file, not the others'
            except (FileNotFoundError, ValueError):
                return {"reward": None, "rewards": rewards,
                        "reward_error": "reward.json has no numeric 'reward' and reward.txt gives none"}
        return {"reward": rewards["reward"], "rewards": rewards, "reward_source": source}
    try:
        return {"reward": text_reward(), "reward_source": "reward.txt"}
    except FileNotFoundError:
        return {"reward": None, "reward_error": "no /logs/verifier/reward.json or reward.txt"}
    except ValueError as exc:
        return {"reward": None, "reward_error": f"reward.txt: {exc}"}
