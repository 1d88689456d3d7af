"""Terminal-Bench through harbor's Terminus-2 (the default agent, ``agent=terminus_2``).

The paper's Terminal-Bench 2.0 figures use Terminus-2, harbor's reference agent. Harbor needs
Python >= 3.12 and brings its own dependencies (litellm and more), so it lives in an interpreter
of its own (``make harbor``: ``.venv-harbor`` with ``harbor==0.25.0``). Harbor's agent runs there,
whole and unchanged, in :mod:`.terminus_bridge` (its docstring has the protocol); what this side
keeps is ours:

* the environment: the task's sandbox or container (``ExecutionSession``), where every command
  Terminus-2's ``TmuxSession`` issues (tmux install attempt, ``new-session``, ``send-keys``,
  ``capture-pane``, ``tmux wait``) runs through ``session.exec``; the task's verifier, oracle and
  reward reading are the tool-calling environment's (:mod:`.environment`);
* the model: every ``call(prompt, message_history)`` Terminus-2 makes becomes one turn of
  unified's agent loop. The prompt is the user message :meth:`TerminusEnvironment.next_user_turn`
  returns, and :meth:`TerminusEnvironment.policy_messages` hands the loop the exact conversation
  harbor asked with (``message_history + [prompt]``; after a summarisation it is not the episode's),
  so the eval's policy (an OpenAI-compatible endpoint, vLLM, the in-process checkpoint) answers it.
  The answer's visible text (reasoning split off, as a reasoning-parser server returns
  ``content``) goes back to Terminus-2's parser.

Harbor pieces used at run time: ``Terminus2`` (its ``setup`` and ``run``: prompt template
``terminus-json-plain.txt`` or ``terminus-xml-plain.txt``, ``TerminusJSONPlainParser`` /
``TerminusXMLPlainParser``, the completion double-check, the timeout template, output limiting to
10 kB, proactive summarisation, ``trajectory.json``), its ``TmuxSession``, ``BaseLLM`` /
``LLMResponse`` / ``OutputLengthExceededError`` and ``LiteLLM``'s context-limit lookup. Pieces of the
run that are ours, each named in the aggregate's ``not_comparable_because`` (:func:`differences`):
the model call (unified's loop, chat template and sampling settings, not LiteLLM), the command
execution (``session.exec`` in our sandbox; harbor's ``user`` is not switched), no asciinema
recording, the agent timeout (watched while Terminus-2 works and between model calls, then the
bridge is stopped; harbor cancels the coroutine at once), and a failed policy call (a context
overflow included) ends the episode instead of harbor's overflow summarisation.

``--model gold`` runs the oracle (harbor's oracle agent is not Terminus-2 either): its
``send_keys`` calls reach :meth:`TerminusEnvironment.step`, which stops the bridge and types them
into the tool-calling terminal.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from unified.benchmarks.contract import BenchmarkUnavailable
from unified.chatformat.reasoning import split_reasoning
from unified.execution import ExecutionError
from unified.types import Episode, Message, Observation, ToolCall

from evaluators.terminal_bench.environment import TerminalBenchEnvironment

HARBOR_VERSION = "0.25.0"
"""The harbor release whose Terminus-2 the default agent runs (``make harbor`` installs it)."""
BRIDGE = Path(__file__).with_name("terminus_bridge.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
HARBOR_PYTHON_ENV = "UNIFIED_HARBOR_PYTHON"
START_TIMEOUT_S = 120.0
"""How long harbor may take to import and start Terminus-2 before its first model call."""


def harbor_python(setting: str | None = None) -> Path | None:
    """The interpreter with harbor installed: the setting, else ``$UNIFIED_HARBOR_PYTHON``, else
    ``.venv-harbor/bin/python`` in the checkout or the working directory; None when there is none."""
    candidates = [setting] if setting else [os.environ.get(HARBOR_PYTHON_ENV)] if os.environ.get(HARBOR_PYTHON_ENV) \
        else [REPO_ROOT / ".venv-harbor" / "bin" / "python", Path.cwd() / ".venv-harbor" / "bin" / "python"]
    for candidate in candidates:
        path = Path(str(candidate)).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def require_harbor_python(setting: str | None = None) -> Path:
    """:func:`harbor_python` or :class:`BenchmarkUnavailable` saying how to get one."""
    found = harbor_python(setting)
    if found is None:
        where = setting or os.environ.get(HARBOR_PYTHON_ENV) or str(REPO_ROOT / ".venv-harbor" / "bin" / "python")
        raise BenchmarkUnavailable(
            f"Terminus-2, the default Terminal-Bench agent, needs harbor=={HARBOR_VERSION} in its own interpreter "
            f"(none at {where})",
            "run `make harbor` (creates .venv-harbor), or set harbor_python=PATH / $UNIFIED_HARBOR_PYTHON, or use "
            "the tool-calling agent: --set benchmarks.terminal_bench_2.agent=tool_calling")
    return found


ENDPOINT_BACKENDS = ("openai", "vllm")
"""Policy backends whose requests are HTTP bodies (:class:`unified.inference.openai_backend.OpenAIPolicy`)."""


def user_sampling(sampling: Any) -> dict[str, Any]:
    """The request fields (name -> value) of the run's sampling that differ from the library's defaults
    (``SamplingConfig()``): what a run whose official client sends none sends, because the user set
    them. A value set equal to the default cannot be told from an unset one and is not sent."""
    if sampling is None:
        return {}
    default = type(sampling)()
    names = {"max_new_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "seed": "seed"}
    out = {wire: getattr(sampling, key) for key, wire in names.items()
           if getattr(sampling, key) != getattr(default, key)}
    if sampling.thinking != default.thinking:
        out["chat_template_kwargs"] = {"enable_thinking": sampling.thinking}
    return out


class BridgeError(RuntimeError):
    """The bridge process died, broke the protocol, or reported an error of harbor's."""


class TimeUp(Exception):
    """The task's agent timeout passed while Terminus-2 was working."""


class HarborBridge:
    """One ``terminus_bridge.py`` process: requests in, answers out (module docstring of the bridge)."""

    def __init__(self, python: Path, config: dict[str, Any], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
        env.pop("PYTHONPATH", None)  # harbor's interpreter imports harbor, never unified's tree
        self.proc = subprocess.Popen([str(python), str(BRIDGE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env, text=True, encoding="utf-8", bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True, name="terminus-bridge-reader").start()
        try:
            self.send(config)
            hello = self.read(START_TIMEOUT_S)
            if hello.get("type") != "hello":
                raise BridgeError(f"the bridge did not start: {hello}")
        except BaseException:  # no process of ours outlives a failed start
            self.close()
            raise
        self.harbor_version = str(hello.get("harbor_version"))

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise BridgeError(f"the bridge is gone ({exc}); its log: {self.tail()}") from exc

    def read(self, timeout_s: float) -> dict[str, Any]:
        """The next message; TimeUp after ``timeout_s``, BridgeError when the process ended."""
        try:
            line = self._lines.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            raise TimeUp() from None
        if line is None:
            raise BridgeError(f"the bridge exited ({self.proc.wait()}); its log: {self.tail()}")
        try:
            return json.loads(line)
        except ValueError as exc:
            raise BridgeError(f"the bridge wrote a line that is not JSON: {line[:200]!r}") from exc

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._log.close()


class TerminusEnvironment(TerminalBenchEnvironment):
    """One task driven by harbor's Terminus-2 (module docstring); the verifier is the base class's."""

    steps_unoffered_calls = True
    """Tool calls reach :meth:`step`: the oracle's are typed into the terminal, a model's are refused."""

    def __init__(self, *args: Any, harbor_python: Path, logs_dir: Path, parser_name: str = "json",
                 model_name: str = "openai/policy", enable_summarize: bool = True, context_limit: int | None = None,
                 output_limit: int | None = None, sampling: Any = None, policy_backend: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tools, self.system_prompt = [], ""  # Terminus-2 sends one user prompt, no system message, no tools
        sent = user_sampling(sampling)
        self.request_fields: tuple[str, ...] = tuple(sent)
        """What a policy request carries besides model and messages: harbor's LiteLLM client sends no sampling
        field (temperature, reasoning_effort, max_tokens unset by default), so only those the user set."""
        self.harbor_python, self.logs_dir = harbor_python, logs_dir
        self.bridge_config = {"instruction": self.task.instruction, "model_name": model_name,
                              "parser_name": parser_name, "logs_dir": str(logs_dir),
                              "enable_summarize": enable_summarize, "context_limit": context_limit,
                              "output_limit": output_limit, "max_turns": None,
                              "pane_width": self.width, "pane_height": self.height}
        self.bridge: HarborBridge | None = None
        self._pending: dict[str, Any] | None = None
        """Terminus-2's model call the loop is answering: ``{"id", "prompt", "history"}``."""
        self.terminus: dict[str, Any] = {"agent": "terminus_2", "parser": parser_name, "logs_dir": str(logs_dir),
                                         "policy_backend": policy_backend, "request_extras": sent}
        if policy_backend not in (None, *ENDPOINT_BACKENDS, "gold") and sampling is not None:
            self.terminus["in_process_sampling"] = {"max_new_tokens": sampling.max_new_tokens,
                                                    "temperature": sampling.temperature, "top_p": sampling.top_p,
                                                    "thinking": sampling.thinking}
        """What the bridge reported: harbor's version, model calls, summarisations, completion, errors."""

    # -- start: the session, then harbor's setup up to its first model call ---------------

    def start(self) -> None:
        self.start_session()
        self._started_at = time.monotonic()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.bridge = HarborBridge(self.harbor_python, self.bridge_config, self.logs_dir / "bridge.log")
        self.terminus["harbor_version"] = self.bridge.harbor_version
        self.metadata.update({"agent": "terminus_2", "harbor_version": self.bridge.harbor_version,
                              "terminus_logs_dir": str(self.logs_dir)})
        first = self._serve(max(self._time_left(), START_TIMEOUT_S))
        if first is None:
            raise BridgeError(f"Terminus-2 ended before its first model call: {self.terminus.get('error')}")
        self.record_setup()  # harbor's own setup (its tmux) is done; the model has not acted yet
        self.first_user_message = first

    def _serve(self, timeout_s: float | None = None) -> str | None:
        """Run Terminus-2's commands until its next model call (its prompt) or its end (None)."""
        assert self.bridge is not None
        while True:
            left = self._time_left() if timeout_s is None else timeout_s
            message = self.bridge.read(left)
            kind = message.get("type")
            if kind == "exec":
                self.bridge.send({"id": message["id"], **self._exec(message)})
            elif kind == "llm":
                self._pending = message
                self.terminus["model_calls"] = self.terminus.get("model_calls", 0) + 1
                return str(message["prompt"])
            elif kind == "done":
                self._pending = None
                self.terminus.update({k: message.get(k) for k in ("completed", "n_episodes", "summarization_count",
                                                                   "trajectory", "error")})
                self.completed = bool(message.get("completed"))
                self.done = True
                self._close_bridge()
                return None
            else:
                raise BridgeError(f"unknown bridge message {message!r:.200}")

    def _exec(self, request: dict[str, Any]) -> dict[str, Any]:
        """One command of Terminus-2's, in the task's session (``bash -c``), bounded by the time left."""
        assert self.session is not None
        limit = min(float(request.get("timeout_sec") or self.exec_timeout_s), max(self._time_left(), 1.0))
        try:
            res = self.session.exec(["bash", "-c", str(request["command"])], timeout_s=limit,
                                    workdir=request.get("cwd"), env=request.get("env") or None)
        except ExecutionError as exc:
            return {"stdout": "", "stderr": str(exc), "return_code": 1}
        return {"stdout": res.stdout, "stderr": res.stderr, "return_code": 124 if res.timed_out else res.exit_code}

    # -- the agent loop's side -------------------------------------------------------------

    def policy_messages(self, messages: list[Message]) -> list[Message]:
        """The conversation Terminus-2 asked with (``message_history + [prompt]``), once the oracle is not typing."""
        if self._pending is None:
            return messages
        history = [Message(role=m["role"], content=m.get("content") or "") for m in self._pending.get("history", [])]
        return history + [Message(role="user", content=str(self._pending["prompt"]))]

    def next_user_turn(self, episode: Episode) -> str | None:
        """Hand the model's answer to Terminus-2; its next prompt, or None once it finished."""
        if self._pending is None or self.bridge is None or not episode.steps:
            return None
        step = episode.steps[-1]
        reasoning, content = split_reasoning(step.completion)
        try:
            if self._time_left() <= 0:
                raise TimeUp()
            self.bridge.send({"id": self._pending["id"], "content": content, "reasoning": reasoning,
                              "finish_reason": step.extras.get("finish_reason"),
                              "prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens})
            self._pending = None
            follow_up = self._serve()
        except TimeUp:
            self.metadata["agent_timed_out"] = True
            self.done = True
            self._close_bridge()
            return None
        if follow_up is None and self.terminus.get("error"):
            raise BridgeError(f"Terminus-2 failed: {self.terminus['error']}")
        return follow_up

    def step(self, tool_calls: list[ToolCall], message: Message | None = None) -> list[Observation]:
        """The oracle's calls go to the tool-calling terminal; a model's calls are not Terminus-2's format."""
        if self.oracle_requested():
            if self.bridge is not None:
                self._close_bridge()
                self._pending = None
                self.terminus["oracle"] = "typed by the tool-calling terminal (harbor's oracle is not Terminus-2)"
            if self.terminal is None:
                self.start_terminal()
            return super().step(tool_calls, message)
        return [Observation(call.id, "Terminus-2 reads the JSON (or XML) answer its prompt asks for; tool calls are "
                            "not run.", is_error=True) for call in tool_calls]

    def _close_bridge(self) -> None:
        if self.bridge is not None:
            self.bridge.close()
            self.bridge = None

    def stop(self) -> None:
        self._close_bridge()
        super().stop()


def logs_dir_for(work_dir: Path | None, task_id: str) -> Path:
    """Where one episode's harbor logs (``trajectory.json``, ``bridge.log``) go: the run's work directory."""
    base = Path(work_dir) / "terminus_2" if work_dir else Path(tempfile.gettempdir()) / "unified-terminus-2"
    return base / f"{task_id}-{uuid.uuid4().hex[:8]}"


def differences(results_details: list[dict[str, Any]]) -> list[str]:
    """The ways a run through this bridge differs from ``harbor run -a terminus-2`` (for ``not_comparable_because``)."""
    terminus = [d for d in results_details if d.get("agent") == "terminus_2"]
    if not terminus:
        return []
    out = ["Terminus-2's model calls go through unified's agent loop, not harbor's LiteLLM client",
           "Terminus-2's commands run through unified's ExecutionSession.exec (harbor's per-command `user` is not "
           "switched); no asciinema recording",
           "the agent timeout is watched while Terminus-2 works and between model calls, not during one (harbor "
           "cancels the agent at once)",
           "a failed model call (a context overflow included) ends the episode instead of harbor's overflow "
           "summarisation"]
    extras = sorted({json.dumps(d["request_extras"], sort_keys=True) for d in terminus if d.get("request_extras")})
    if extras:
        out.append("model requests carry " + " / ".join(extras) + " (set by the user; harbor's client sends model "
                   "and messages only)")
    local = sorted({json.dumps(d["in_process_sampling"], sort_keys=True) for d in terminus
                    if d.get("in_process_sampling")})
    if local:
        out.append("an in-process policy decodes with the run's sampling " + " / ".join(local) + " and its own "
                   "chat template (harbor's client sends no sampling field to a served model)")
    versions = sorted({str(d.get("harbor_version")) for d in terminus if d.get("harbor_version")} - {HARBOR_VERSION})
    if versions:
        out.append(f"harbor {', '.join(versions)} instead of {HARBOR_VERSION}")
    caps = sorted({json.dumps(d["loop_caps"], sort_keys=True) for d in terminus if d.get("loop_caps")})
    if caps:
        out.append("the agent loop's caps " + " / ".join(caps) + " (set by the user; harbor's Terminus-2 stops only "
                   "at the task's agent timeout)")
    limited = sorted({str(d["loop_limit"]) for d in terminus if d.get("loop_limit")})
    if limited:
        n = sum(1 for d in terminus if d.get("loop_limit"))
        out.append(f"{n} episode(s) cut by the agent loop's limit ({', '.join(limited)}), which Terminus-2 does not "
                   "have (raise --max-turns / --max-episode-tokens / --max-seconds)")
    return out
